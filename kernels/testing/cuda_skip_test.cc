#include "kernels/testing/cuda_skip.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace moeserve::kernels::testing {
namespace {

TEST(CudaSkip, OnlyAMissingDeviceOrToolkitMaySkip) {
  unsetenv("MOESERVE_REQUIRE_CUDA");
  EXPECT_TRUE(CudaSkipAllowed(
      absl::UnavailableError("no CUDA device (cudaErrorInsufficientDriver)")));
  EXPECT_TRUE(CudaSkipAllowed(absl::FailedPreconditionError(
      "backend 'cuda': this build has no CUDA backend (the CUDA toolkit was "
      "not found when it was built; see third_party/cuda)")));
  // A plugin that does not load, a bad device ordinal, an init error.
  EXPECT_FALSE(CudaSkipAllowed(absl::UnavailableError(
      "backend 'cuda': libmoeserve_cuda.so: undefined symbol: foo")));
  EXPECT_FALSE(CudaSkipAllowed(
      absl::InvalidArgumentError("CUDA device 3 not in [0, 1)")));
  EXPECT_FALSE(CudaSkipAllowed(absl::InternalError("cudaSetDevice: ...")));
  EXPECT_FALSE(CudaSkipAllowed(absl::OkStatus()));
}

TEST(CudaSkip, RequireCudaTurnsEverySkipIntoAFailure) {
  setenv("MOESERVE_REQUIRE_CUDA", "1", 1);
  EXPECT_TRUE(CudaRequired());
  EXPECT_FALSE(CudaSkipAllowed(absl::UnavailableError("no CUDA device")));
  setenv("MOESERVE_REQUIRE_CUDA", "0", 1);
  EXPECT_FALSE(CudaRequired());
  unsetenv("MOESERVE_REQUIRE_CUDA");
}

}  // namespace
}  // namespace moeserve::kernels::testing
