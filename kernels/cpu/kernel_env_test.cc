// MOESERVE_CPU_KERNELS picks the CPU backend's kernel variant (cpu_backend.h).
// The BUILD file runs this test with the variable set to known variants
// ("avx2", "amxbf16": forced, clamped to the CPU, so "amxbf16" gives
// avx512bf16 or less where AMX or the kernel's permission is missing) and to
// a name that is not one ("amx": ignored, the default applies); the test
// reads the same variable to know which case it is in.
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_int4.h"

namespace moeserve::kernels::cpu {
namespace {

TEST(KernelEnv, ForcesTheNamedVariantOrIgnoresAnUnknownName) {
  const char* value = std::getenv("MOESERVE_CPU_KERNELS");
  ASSERT_NE(value, nullptr) << "run through bazel test (BUILD sets the env)";
  const std::optional<Isa> named = ParseIsa(value);
  const Isa want = named.has_value() ? ClampIsa(*named) : BestIsa();
  EXPECT_EQ(IsaFromEnvironment().has_value(), named.has_value());
  CpuBackend backend(CpuBackendOptions{2, true});
  EXPECT_EQ(backend.isa(), want);
  EXPECT_EQ(backend.name(), absl::StrCat("cpu-", IsaName(want), "-2t"));
  if (named.has_value()) {
    // The named variant where this CPU has an int4 kernel for it.
    EXPECT_EQ(backend.int4_isa(), ClampInt4Isa(*named));
    EXPECT_LE(backend.int4_isa(), *named);
  } else {
    EXPECT_EQ(backend.int4_isa(), BestInt4Isa());
  }
  // Options still win over the environment, and use_simd = false over both.
  CpuBackendOptions scalar;
  scalar.use_simd = false;
  EXPECT_EQ(CpuBackend(scalar).isa(), Isa::kScalar);
  CpuBackendOptions forced;
  forced.isa = Isa::kScalar;
  EXPECT_EQ(CpuBackend(forced).isa(), Isa::kScalar);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
