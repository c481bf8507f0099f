#include "base/build_info.h"

#include "base/build_info_stamp.h"  // generated: kStampedGitRevision

namespace moeserve::base {

const char* MoeserveVersion() { return "0.16.0"; }

const char* GitRevision() { return kStampedGitRevision; }

std::string BuildMode() {
#ifdef NDEBUG
  std::string mode = "opt";
#else
  std::string mode = "fastbuild";
#endif
#if defined(__SANITIZE_ADDRESS__)
  mode += "+asan";
#endif
#if defined(__SANITIZE_THREAD__)
  mode += "+tsan";
#endif
  return mode;
}

}  // namespace moeserve::base
