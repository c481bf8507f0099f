// OpenPlugin: finds and dlopens one of our shared-library plugins (the
// sentencepiece tokenizer, the CUDA backend). Plugins keep libraries with
// awkward process-wide side effects out of the main binary: Debian's
// sentencepiece bundles its own protobuf, and libcublasLt's large static TLS
// would shrink every thread's stack (civetweb's fixed-size worker threads
// then fail to start).
//
// The environment variable `env_var`, when set and not empty, is the path:
// nothing else is tried, so a broken file there is an error, not a fallback.
// Otherwise the search order is Bazel runfiles (tests and `bazel run`),
// beside the executable, the install layout of deploy/install.sh
// (<exe>/../lib/moeserve/), and bazel-bin's layout (<bin>/<package_dir>/).
#ifndef MOESERVE_BASE_PLUGIN_LOADER_H_
#define MOESERVE_BASE_PLUGIN_LOADER_H_

#include <string>

namespace moeserve::base {

struct PluginSpec {
  std::string file;         // "libmoeserve_spm.so"
  std::string package_dir;  // its Bazel package, "engine"
  std::string env_var;      // "MOESERVE_SPM_PLUGIN"
  int dlopen_flags = 0;     // RTLD_NOW | RTLD_LOCAL | ...
};

// The handle (kept open for the life of the process), or null with `error`
// starting "install problem: " and naming the file, every path tried and
// why it failed, and the environment variable that overrides the search.
void* OpenPlugin(const PluginSpec& spec, std::string* error);

// dlsym, or null with `error` naming the missing symbol.
void* PluginSymbol(void* handle, const char* name, std::string* error);

}  // namespace moeserve::base

#endif  // MOESERVE_BASE_PLUGIN_LOADER_H_
