#include "kernels/tensor.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even.
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);
  // 1.0078125 + 2^-8 is halfway with an odd lower neighbour: rounds up.
  EXPECT_EQ(FloatToBf16(1.0078125f + 1.0f / 256), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToBf16(std::nextafter(1.0f + 1.0f / 256, 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  // The largest float rounds to infinity, as torch does.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(Bf16, RoundTripIsExactForBf16Values) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToFloat(static_cast<bf16>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), h);
  }
}

TEST(Tensor, ShapeReshapeSlice) {
  std::vector<float> buf(24);
  Tensor t(buf.data(), DType::kF32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96);
  EXPECT_EQ(t.DebugString(), "F32[2,3,4]@cpu");
  auto r = t.Reshape({6, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dim(0), 6);
  EXPECT_FALSE(t.Reshape({5, 5}).ok());
  EXPECT_FALSE(t.Reshape({1, 1, 1, 1, 24}).ok());
  auto s = r->Slice(2, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->data<float>(), buf.data() + 8);
  EXPECT_EQ(s->dim(0), 2);
  EXPECT_FALSE(r->Slice(3, 7).ok());
  const int64_t bad[] = {2, -1};
  EXPECT_FALSE(Tensor::Make(buf.data(), DType::kF32, bad, 2).ok());
  EXPECT_EQ(Tensor(nullptr, DType::kI4, {3}).nbytes(), 2);
  EXPECT_EQ(Tensor(nullptr, DType::kU8, {3, 5}).nbytes(), 15);
  EXPECT_EQ(std::string(DTypeName(DType::kU8)), "U8");
}

TEST(OpChecks, CheckTensorRejectsMismatches) {
  std::vector<float> buf(6);
  Tensor t(buf.data(), DType::kF32, {2, 3});
  EXPECT_TRUE(
      CheckTensor(t, "t", Device::kCpu, DType::kF32, {2, kAnyDim}).ok());
  EXPECT_FALSE(CheckTensor(t, "t", Device::kCuda, DType::kF32, {2, 3}).ok());
  EXPECT_FALSE(CheckTensor(t, "t", Device::kCpu, DType::kBF16, {2, 3}).ok());
  EXPECT_FALSE(CheckTensor(t, "t", Device::kCpu, DType::kF32, {3, 2}).ok());
  EXPECT_FALSE(CheckTensor(t, "t", Device::kCpu, DType::kF32, {6}).ok());
  EXPECT_FALSE(CheckTensor(Tensor(), "t", Device::kCpu, DType::kF32, {}).ok());
  Tensor null(nullptr, DType::kF32, {2, 3});
  EXPECT_FALSE(CheckTensor(null, "t", Device::kCpu, DType::kF32, {2, 3}).ok());
  EXPECT_EQ(CheckTensor(t, "x", Device::kCpu, DType::kBF16, {2, 3}).message(),
            "x is F32[2,3]@cpu, expected BF16[2,3]@cpu");
}

}  // namespace
}  // namespace moeserve::kernels
