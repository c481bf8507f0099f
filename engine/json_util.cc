#include "engine/json_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace moeserve::engine::json_util {
namespace {

using nlohmann::json;

// Maximum depth of [ / { outside string literals; a cheap pre-pass.
int MaxNestingDepth(absl::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

absl::Status Missing(absl::string_view key) {
  return absl::InvalidArgumentError(
      absl::StrCat("missing required field \"", key, "\""));
}

absl::Status IllTyped(absl::string_view key, absl::string_view expected,
                      const json& value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "field \"", key, "\" must be ", expected, ", got ", value.type_name()));
}

// Looks `key` up; nullptr when absent or null.
const json* Lookup(const json& obj, absl::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

absl::StatusOr<json> Parse(absl::string_view text, absl::string_view what) {
  if (MaxNestingDepth(text) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": JSON nested deeper than ", kMaxJsonDepth, " levels"));
  }
  try {
    json j = json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                         /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON"));
    }
    return j;
  } catch (const std::exception& e) {  // Defensive: nothing may escape.
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not valid JSON (", e.what(), ")"));
  }
}

std::optional<int64_t> AsInt64(const json& value) {
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

bool HasNonNull(const json& obj, absl::string_view key) {
  return Lookup(obj, key) != nullptr;
}

absl::StatusOr<int64_t> GetInt(const json& obj, absl::string_view key,
                               std::optional<int64_t> default_value) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) {
    if (default_value) return *default_value;
    return Missing(key);
  }
  std::optional<int64_t> i = AsInt64(*v);
  if (!i) return IllTyped(key, "an integer", *v);
  return *i;
}

absl::StatusOr<double> GetDouble(const json& obj, absl::string_view key,
                                 std::optional<double> default_value) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) {
    if (default_value) return *default_value;
    return Missing(key);
  }
  if (!v->is_number()) return IllTyped(key, "a number", *v);
  return v->get<double>();
}

absl::StatusOr<bool> GetBool(const json& obj, absl::string_view key,
                             std::optional<bool> default_value) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) {
    if (default_value) return *default_value;
    return Missing(key);
  }
  if (!v->is_boolean()) return IllTyped(key, "a boolean", *v);
  return v->get<bool>();
}

absl::StatusOr<std::string> GetString(
    const json& obj, absl::string_view key,
    std::optional<std::string> default_value) {
  const json* v = Lookup(obj, key);
  if (v == nullptr) {
    if (default_value) return *default_value;
    return Missing(key);
  }
  if (!v->is_string()) return IllTyped(key, "a string", *v);
  return v->get<std::string>();
}

const char* FileKind(unsigned int st_mode) {
  if (S_ISREG(st_mode)) return "a regular file";
  if (S_ISDIR(st_mode)) return "a directory";
  if (S_ISFIFO(st_mode)) return "a FIFO";
  if (S_ISSOCK(st_mode)) return "a socket";
  if (S_ISCHR(st_mode)) return "a character device";
  if (S_ISBLK(st_mode)) return "a block device";
  return "not a file";
}

absl::StatusOr<int> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading blocks until a writer opens it.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const std::string message =
        absl::StrCat(path, ": cannot open: ", strerror(err));
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const unsigned int mode = st.st_mode;
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", FileKind(mode), ")"));
  }
  // Reads of a regular file: blocking, as usual.
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

absl::StatusOr<std::string> ReadFileText(const std::string& path) {
  absl::StatusOr<int> fd = OpenRegularFile(path);
  if (!fd.ok()) {
    if (absl::IsInvalidArgument(fd.status())) return fd.status();
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  }
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = read(*fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(*fd);
      return absl::DataLossError(absl::StrCat(path, ": read error"));
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
  }
  close(*fd);
  return text;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace moeserve::engine::json_util
