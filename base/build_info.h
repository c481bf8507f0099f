// What a binary says about itself for --version: moeserve's version, the git
// revision it was built from (stamped at build time by
// deploy/workspace_status.sh through a genrule), and the build mode.
#ifndef MOESERVE_BASE_BUILD_INFO_H_
#define MOESERVE_BASE_BUILD_INFO_H_

#include <string>

namespace moeserve::base {

// "0.16.0": bumped by hand when a release is cut.
const char* MoeserveVersion();
// "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" (uncommitted changes to tracked
// files), or "unknown" (built outside a git checkout).
const char* GitRevision();
// "opt" (NDEBUG), else "fastbuild"; with "+asan" / "+tsan" when sanitized.
std::string BuildMode();

}  // namespace moeserve::base

#endif  // MOESERVE_BASE_BUILD_INFO_H_
