// Tests of the int4 reference (kernels/cpu/reference_ops.h QuantizeInt4,
// Int4Weight, MatMulInt4Reference): the format every int4 kernel is checked
// against, so it is pinned down here by hand-computed cases. Runs on the CPU.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/tensor.h"
#include "kernels/testing/differential.h"

namespace moeserve::kernels::testing {
namespace {

namespace ref = ::moeserve::kernels::cpu::ref;

Tensor F32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}
Tensor I4(std::vector<uint8_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kI4, shape);
}
Tensor Bf16(std::vector<bf16>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kBF16, shape);
}

TEST(QuantizeInt4, HandComputedGroups) {
  // Row 0: group 0 = {0.7, -0.35}, group 1 = zeros; row 1: {-1, 0.5}, {8, 4}.
  std::vector<float> w = {0.7f, -0.35f, 0, 0, -1, 0.5f, 8, 4};
  std::vector<uint8_t> wq(4);
  std::vector<bf16> scales(4);
  ASSERT_TRUE(
      ref::QuantizeInt4(F32(w, {2, 4}), 2, I4(wq, {2, 4}), Bf16(scales, {2, 2}))
          .ok());
  // scale = bf16(0.1) = 0.10009765625: 0.7 -> q 7 + 8 = 15 (low nibble),
  // -0.35 -> round(-3.497) = -3 -> 5 (high nibble).
  EXPECT_EQ(Bf16ToFloat(scales[0]), Bf16ToFloat(FloatToBf16(0.1f)));
  EXPECT_EQ(wq[0], 0x5f);
  EXPECT_EQ(scales[1], 0);  // All-zero group: scale 0, q = 8.
  EXPECT_EQ(wq[1], 0x88);
  // bf16(1/7) = 0.142578125: -1 -> round(-7.01) = -7 -> 1; 0.5 -> round(3.5)
  // = 4 -> 12.
  EXPECT_EQ(wq[2], 0xc1);
  // bf16(8/7) = 1.140625: 8 -> round(7.01) = 7 -> 15; 4 -> round(3.51) = 4
  // -> 12.
  EXPECT_EQ(wq[3], 0xcf);
  EXPECT_FLOAT_EQ(
      ref::Int4Weight(I4(wq, {2, 4}), Bf16(scales, {2, 2}), 2, 1, 2),
      7 * 1.140625f);
  EXPECT_FLOAT_EQ(
      ref::Int4Weight(I4(wq, {2, 4}), Bf16(scales, {2, 2}), 2, 0, 1),
      -3 * Bf16ToFloat(scales[0]));
}

TEST(QuantizeInt4, RoundTripIsWithinHalfAStep) {
  Rng rng(1);
  const int64_t n = 7, k = 256;
  for (int64_t group : {64, 128}) {
    std::vector<bf16> w = rng.Bf16(n * k, -0.3f, 0.3f);
    std::vector<uint8_t> wq(n * k / 2);
    std::vector<bf16> scales(n * k / group);
    ASSERT_TRUE(ref::QuantizeInt4(Bf16(w, {n, k}), group, I4(wq, {n, k}),
                                  Bf16(scales, {n, k / group}))
                    .ok());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const float s = Bf16ToFloat(scales[r * (k / group) + c / group]);
        const float got = ref::Int4Weight(
            I4(wq, {n, k}), Bf16(scales, {n, k / group}), group, r, c);
        EXPECT_LE(std::fabs(got - Bf16ToFloat(w[r * k + c])), 0.5f * s * 1.01f)
            << r << "," << c;
      }
    }
  }
}

TEST(MatMulInt4Reference, IsTheProductWithDequantisedWeights) {
  Rng rng(2);
  const int64_t m = 3, k = 128, n = 5, group = 64;
  std::vector<float> w = rng.F32(n * k), x = rng.F32(m * k);
  std::vector<uint8_t> wq(n * k / 2);
  std::vector<bf16> scales(n * k / group);
  ASSERT_TRUE(ref::QuantizeInt4(F32(w, {n, k}), group, I4(wq, {n, k}),
                                Bf16(scales, {n, k / group}))
                  .ok());
  std::vector<float> out(m * n);
  ref::MatMulInt4Reference(F32(x, {m, k}), I4(wq, {n, k}),
                           Bf16(scales, {n, k / group}), group,
                           F32(out, {m, n}));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t c = 0; c < k; ++c) {
        want += double{x[r * k + c]} *
                ref::Int4Weight(I4(wq, {n, k}), Bf16(scales, {n, k / group}),
                                group, j, c);
      }
      EXPECT_NEAR(out[r * n + j], want, 1e-5 * std::fabs(want) + 1e-6);
    }
  }
}

TEST(QuantizeInt4, RefusesBadArguments) {
  std::vector<float> w(2 * 8);
  std::vector<uint8_t> wq(8);
  std::vector<bf16> scales(4);
  // Odd group, group not dividing k.
  EXPECT_TRUE(absl::IsInvalidArgument(ref::QuantizeInt4(
      F32(w, {2, 8}), 3, I4(wq, {2, 8}), Bf16(scales, {2, 2}))));
  EXPECT_TRUE(absl::IsInvalidArgument(ref::QuantizeInt4(
      F32(w, {2, 8}), 6, I4(wq, {2, 8}), Bf16(scales, {2, 1}))));
  // Wrong wq dtype and scales shape.
  EXPECT_TRUE(absl::IsInvalidArgument(ref::QuantizeInt4(
      F32(w, {2, 8}), 4, Bf16(scales, {2, 2}), Bf16(scales, {2, 2}))));
  EXPECT_TRUE(absl::IsInvalidArgument(ref::QuantizeInt4(
      F32(w, {2, 8}), 4, I4(wq, {2, 8}), Bf16(scales, {1, 4}))));
  // Device memory.
  EXPECT_TRUE(absl::IsInvalidArgument(
      ref::QuantizeInt4(Tensor(w.data(), DType::kF32, {2, 8}, Device::kCuda), 4,
                        I4(wq, {2, 8}), Bf16(scales, {2, 2}))));
  EXPECT_TRUE(
      ref::QuantizeInt4(F32(w, {2, 8}), 4, I4(wq, {2, 8}), Bf16(scales, {2, 2}))
          .ok());
}

}  // namespace
}  // namespace moeserve::kernels::testing
