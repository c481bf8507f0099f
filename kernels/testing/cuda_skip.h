// When a CUDA test may skip: only when this machine has no CUDA device (or
// driver), or this build has no CUDA backend, and the run does not demand
// one. Every other failure to create the backend (a plugin that does not
// load, a missing symbol, an initialisation error) is a defect the test
// must report, not a skip: a broken plugin on a GPU machine would otherwise
// pass every CUDA test by skipping them all.
//
// MOESERVE_REQUIRE_CUDA=1 (GPU runs: tools/gpu_check) turns every skip into
// a failure.
#ifndef MOESERVE_KERNELS_TESTING_CUDA_SKIP_H_
#define MOESERVE_KERNELS_TESTING_CUDA_SKIP_H_

#include <cstdlib>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace moeserve::kernels::testing {

// True when the run demands a CUDA device (MOESERVE_REQUIRE_CUDA=1).
inline bool CudaRequired() {
  const char* v = std::getenv("MOESERVE_REQUIRE_CUDA");
  return v != nullptr && std::string_view(v) == "1";
}

// True when `status`, from creating the CUDA backend, means "no device
// here": UNAVAILABLE "no CUDA device ..." (CudaBackend::Create, also through
// the plugin) or FAILED_PRECONDITION from a build without the toolkit.
inline bool IsNoCudaDevice(const absl::Status& status) {
  const absl::string_view message = status.message();
  if (absl::IsUnavailable(status)) {
    return message.find("no CUDA device") != absl::string_view::npos;
  }
  return absl::IsFailedPrecondition(status) &&
         message.find("this build has no CUDA backend") !=
             absl::string_view::npos;
}

// True when a test may skip for `status` (not OK): no device, and the run
// does not demand one.
inline bool CudaSkipAllowed(const absl::Status& status) {
  return !status.ok() && IsNoCudaDevice(status) && !CudaRequired();
}

}  // namespace moeserve::kernels::testing

// In a test body or SetUp: skips when CudaSkipAllowed(status); otherwise,
// for a status that is not OK, fails the test with it.
#define MOESERVE_SKIP_WITHOUT_CUDA(status)                                \
  do {                                                                    \
    const ::absl::Status moeserve_cuda_status_ = (status);                \
    if (::moeserve::kernels::testing::CudaSkipAllowed(                    \
            moeserve_cuda_status_)) {                                     \
      GTEST_SKIP() << "CUDA test skipped: " << moeserve_cuda_status_      \
                   << " (needs a machine with an NVIDIA GPU and driver)"; \
    }                                                                     \
    if (!moeserve_cuda_status_.ok()) {                                    \
      FAIL() << "CUDA backend unusable"                                   \
             << (::moeserve::kernels::testing::CudaRequired()             \
                     ? " and MOESERVE_REQUIRE_CUDA=1"                     \
                     : " for a reason other than a missing device")       \
             << ": " << moeserve_cuda_status_;                            \
    }                                                                     \
  } while (0)

#endif  // MOESERVE_KERNELS_TESTING_CUDA_SKIP_H_
