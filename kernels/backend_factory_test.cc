#include "kernels/backend_factory.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::kernels {
namespace {

TEST(BackendFactory, CpuAlwaysThere) {
  absl::StatusOr<std::unique_ptr<Backend>> b =
      CreateBackend({.name = "cpu", .cpu_threads = 2});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->device(), Device::kCpu);
}

// The device that does no arithmetic, in every build.
TEST(BackendFactory, NullAlwaysThere) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend({.name = "null"});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "null");
  EXPECT_EQ((*b)->device(), Device::kCpu);
  const std::vector<std::string> names = CompiledBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "null"), names.end());
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

// --version's compute lines name every backend and kernel variant built,
// and the default is one this CPU runs.
TEST(BackendFactory, DescribesComputeForVersion) {
  const std::vector<std::string> lines = DescribeCompute();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("backends: cpu", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("cpu kernels: scalar avx2 avx512 avx512bf16 "
                           "amxbf16; this CPU: scalar",
                           0),
            0u)
      << lines[1];
  EXPECT_NE(
      lines[1].find(std::string("; default ") + cpu::IsaName(cpu::BestIsa())),
      std::string::npos)
      << lines[1];
}

}  // namespace
}  // namespace moeserve::kernels
