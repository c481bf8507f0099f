#include "kernels/backend_factory.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace moeserve::kernels {
namespace {

TEST(BackendFactory, CpuAlwaysThere) {
  absl::StatusOr<std::unique_ptr<Backend>> b =
      CreateBackend({.name = "cpu", .cpu_threads = 2});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->device(), Device::kCpu);
}

TEST(BackendFactory, UnknownNameIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend({.name = "tpu"});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("tpu"), std::string::npos);
}

// Without the toolkit: FailedPrecondition; with it but without a GPU:
// Unavailable; with a GPU: a CUDA backend. Never a crash.
TEST(BackendFactory, CudaAnswersClearly) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend({.name = "cuda"});
  const std::vector<std::string> names = CompiledBackends();
  const bool compiled =
      std::find(names.begin(), names.end(), "cuda") != names.end();
  if (!compiled) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  } else if (b.ok()) {
    EXPECT_EQ((*b)->device(), Device::kCuda);
  } else {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  }
}

}  // namespace
}  // namespace moeserve::kernels
