#include "tools/soak/process_probe.h"

#include <dirent.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moeserve::soak {
namespace {

absl::Status ProcError(const std::string& path, int error) {
  std::string message = absl::StrCat(path, ": ", std::strerror(error));
  if (error == ENOENT || error == ESRCH) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

// "VmRSS:	  123456 kB" -> 123456 * 1024.
bool ParseKbField(absl::string_view line, absl::string_view key,
                  int64_t* bytes) {
  if (!absl::ConsumePrefix(&line, key)) return false;
  line = absl::StripAsciiWhitespace(line);
  if (!absl::ConsumeSuffix(&line, "kB")) return false;
  int64_t kb = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb)) return false;
  *bytes = kb * 1024;
  return true;
}

}  // namespace

absl::StatusOr<ProcessSample> SampleProcess(pid_t pid) {
  const std::string root = absl::StrCat("/proc/", pid);
  ProcessSample sample;
  std::ifstream status(root + "/status");
  if (!status) return ProcError(root + "/status", errno);
  bool have_rss = false, have_threads = false;
  for (std::string line; std::getline(status, line);) {
    have_rss |= ParseKbField(line, "VmRSS:", &sample.rss_bytes);
    ParseKbField(line, "VmHWM:", &sample.hwm_bytes);
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "Threads:")) {
      have_threads =
          absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &sample.threads);
    }
  }
  // A zombie has no VmRSS line: it is gone as far as a soak is concerned.
  if (!have_rss || !have_threads) {
    return absl::NotFoundError(
        absl::StrCat(root, ": no VmRSS/Threads (exited?)"));
  }
  const std::string fd_dir = root + "/fd";
  DIR* dir = opendir(fd_dir.c_str());
  if (dir == nullptr) return ProcError(fd_dir, errno);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++sample.open_fds;
  }
  closedir(dir);
  return sample;
}

}  // namespace moeserve::soak
