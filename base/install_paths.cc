#include "base/install_paths.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moeserve::base {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  const std::string exe(buf, n);
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "." : exe.substr(0, slash);
}

std::string ResolveDataPath(const std::string& path) {
  if (path.empty() || path[0] == '/' || Exists(path)) return path;
  const std::string dir = ExecutableDir();
  if (dir.empty()) return path;
  const std::string installed = dir + "/../share/moeserve/" + path;
  return Exists(installed) ? installed : path;
}

}  // namespace moeserve::base
