// Where an installed binary finds its data. deploy/install.sh puts binaries
// in PREFIX/bin and the bundled models in PREFIX/share/moeserve/models, so a
// default such as --model_dir=models/demo (relative to a source checkout)
// must also work from any directory once installed.
#ifndef MOESERVE_BASE_INSTALL_PATHS_H_
#define MOESERVE_BASE_INSTALL_PATHS_H_

#include <string>

namespace moeserve::base {

// The directory of the running executable ("/opt/moeserve/bin"), or "" when
// /proc/self/exe cannot be read.
std::string ExecutableDir();

// `path` itself when it is absolute or exists relative to the working
// directory; else <exe>/../share/moeserve/<path> when that exists; else
// `path` unchanged, so that the error a caller reports names what was given.
std::string ResolveDataPath(const std::string& path);

}  // namespace moeserve::base

#endif  // MOESERVE_BASE_INSTALL_PATHS_H_
