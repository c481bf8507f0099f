#include "base/plugin_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace moeserve::base {
namespace {

std::string ExecutablePath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::vector<std::string> CandidatePaths(const PluginSpec& spec) {
  // An explicit path is the only candidate: when it does not load, the
  // caller hears why, instead of silently getting another copy (a GPU run
  // that sets MOESERVE_CUDA_PLUGIN to the build it means to test would
  // otherwise test whatever plugin the search found).
  const char* env = getenv(spec.env_var.c_str());
  if (env != nullptr && *env != '\0') return {env};
  std::vector<std::string> paths;
  const std::string runfile = "moeserve/" + spec.package_dir + "/" + spec.file;
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = getenv(var)) paths.push_back(dir + ("/" + runfile));
  }
  const std::string exe = ExecutablePath();
  if (!exe.empty()) {
    paths.push_back(exe + ".runfiles/" + runfile);
    paths.push_back(Dirname(exe) + "/" + spec.file);
    // deploy/install.sh's layout: PREFIX/bin/<exe>, PREFIX/lib/moeserve/.
    paths.push_back(Dirname(exe) + "/../lib/moeserve/" + spec.file);
    paths.push_back(Dirname(exe) + "/../" + spec.package_dir + "/" + spec.file);
  }
  return paths;
}

}  // namespace

void* OpenPlugin(const PluginSpec& spec, std::string* error) {
  std::string missing;
  std::string failed;
  for (const std::string& path : CandidatePaths(spec)) {
    if (access(path.c_str(), R_OK) != 0) {
      missing += (missing.empty() ? "" : ", ") + path;
      continue;
    }
    if (void* handle = dlopen(path.c_str(), spec.dlopen_flags)) return handle;
    failed += path + ": " + dlerror() + "; ";
  }
  // An install problem, not a model problem: say which file, where it was
  // looked for, and how to point at it.
  *error = "install problem: cannot load the plugin " + spec.file +
           (failed.empty() ? " (not found; looked in: " + missing + ")"
                           : " (" + failed + "not found in: " + missing + ")") +
           "; install it beside the binary or in PREFIX/lib/moeserve/ "
           "(deploy/install.sh), or set " +
           spec.env_var + " to its path";
  return nullptr;
}

void* PluginSymbol(void* handle, const char* name, std::string* error) {
  void* fn = dlsym(handle, name);
  if (fn == nullptr) *error = std::string("missing symbol ") + name;
  return fn;
}

}  // namespace moeserve::base
