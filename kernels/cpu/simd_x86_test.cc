// ExpAvx2 (simd_x86.h) against std::exp: ulp distance over the range the
// attention softmax feeds it, the exact points it must keep, clamping and NaN.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

#if defined(__x86_64__)
#include "kernels/cpu/simd_x86.h"

namespace moeserve::kernels::cpu {
namespace {

bool HasAvx2Fma() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

MOESERVE_AVX2 void Exp8(const float* in, float* out) {
  _mm256_storeu_ps(out, ExpAvx2(_mm256_loadu_ps(in)));
}

float Exp1(float x) {
  float in[8], out[8];
  for (float& v : in) v = x;
  Exp8(in, out);
  return out[0];
}

// Distance in units in the last place between two positive finite floats.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(int64_t{ia} - int64_t{ib});
}

TEST(ExpAvx2, WithinTwoUlpOfStdExp) {
  if (!HasAvx2Fma()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  int64_t worst = 0;
  float worst_x = 0;
  // Two million points spread over [-87, 88), plus small |x| near 0.
  constexpr int64_t kPoints = 2'000'000;
  for (int64_t i = 0; i < kPoints; i += 8) {
    float in[8], out[8];
    for (int l = 0; l < 8; ++l) {
      const double u = static_cast<double>(i + l) / kPoints;
      in[l] = (i / 8) % 4 == 0 ? static_cast<float>((u - 0.5) * 1e-3)
                               : static_cast<float>(-87.0 + 175.0 * u);
    }
    Exp8(in, out);
    for (int l = 0; l < 8; ++l) {
      const float want = std::exp(in[l]);
      const int64_t d = UlpDistance(out[l], want);
      if (d > worst) worst = d, worst_x = in[l];
    }
  }
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
}

TEST(ExpAvx2, ExactPointsClampingAndNan) {
  if (!HasAvx2Fma()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  // exp(0) = 1 exactly: a softmax over one position gives weight 1.
  EXPECT_EQ(Exp1(0.0f), 1.0f);
  EXPECT_EQ(Exp1(-0.0f), 1.0f);
  // -inf and very negative x clamp to about 2^-126: not 0, but negligible
  // against any weight of a real position.
  const float tiny = Exp1(-std::numeric_limits<float>::infinity());
  EXPECT_GT(tiny, 0.0f);
  EXPECT_LT(tiny, 2e-38f);
  EXPECT_EQ(Exp1(-1000.0f), tiny);
  EXPECT_TRUE(std::isfinite(Exp1(1000.0f)));
  EXPECT_NEAR(Exp1(1000.0f), std::exp(88.0f), std::exp(88.0f) * 1e-6);
  EXPECT_TRUE(std::isnan(Exp1(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace moeserve::kernels::cpu

#endif  // __x86_64__
