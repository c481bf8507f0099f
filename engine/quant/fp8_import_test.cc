// fp8_import: a block-scaled ("fp8") and a per-channel / per-tensor
// (compressed-tensors) e4m3 Linear land in an fp8 expert part with the
// codes as stored and the scales widened exactly; dequantization is
// q * scale rounded once to bf16; every mismatch is refused by name.
#include "engine/quant/fp8_import.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/fp8_expert.h"
#include "kernels/tensor.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::quant {
namespace {

QuantizationConfig Block128() {
  return *ParseQuantizationConfig(nlohmann::json::parse(
      R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
          "activation_scheme": "dynamic", "weight_block_size": [128, 128]}})"));
}

QuantizationConfig CompressedFp8(const std::string& strategy) {
  return *ParseQuantizationConfig(nlohmann::json::parse(
      R"({"quantization_config": {"quant_method": "compressed-tensors",
          "format": "float-quantized", "config_groups": {"g": {"targets":
          ["Linear"], "weights": {"num_bits": 8, "type": "float",
          "strategy": ")" +
      strategy + R"("}}}}})"));
}

// A tensor over owned bytes.
struct Owned {
  std::vector<unsigned char> bytes;
  TensorInfo info;
  Owned(std::string name, DType dtype, std::vector<int64_t> shape,
        size_t elem) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.resize(n * elem);
    info.name = std::move(name);
    info.dtype = dtype;
    info.shape = std::move(shape);
    info.byte_size = bytes.size();
    info.data = bytes.data();
  }
};

constexpr int64_t kHidden = 256, kFfn = 96;

TEST(Fp8ImportTest, BlockScaledPartsAndDequantization) {
  const QuantizationConfig q = Block128();
  const kernels::Fp8ExpertLayout layout =
      *Fp8CheckpointLayout(q, kHidden, kFfn);
  std::mt19937 rng(7);
  // down: [hidden, ffn] = [256, 96], scale grid [2, 1].
  Owned w("m.down_proj.weight", DType::kF8E4M3, {kHidden, kFfn}, 1);
  for (auto& b : w.bytes) {
    b = static_cast<unsigned char>(rng() & 0xFF);
    if ((b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN codes
  }
  Owned s("m.down_proj.weight_scale_inv", DType::kF32, {2, 1}, 4);
  const float scales[] = {0.015625f, 3.0f};
  std::memcpy(s.bytes.data(), scales, sizeof(scales));
  Fp8LinearTensors t{"m.down_proj", &w.info, &s.info};
  std::vector<std::byte> blob(layout.bytes);
  ASSERT_TRUE(
      ImportFp8ExpertPart(q, t, layout, kernels::Fp8Part::kDown, blob.data())
          .ok());
  std::vector<float> row(kFfn);
  for (int64_t r : {0, 127, 128, 255}) {
    kernels::DequantizeFp8ExpertRow(blob.data(), layout,
                                    kernels::Fp8Part::kDown, r, row.data());
    for (int64_t c = 0; c < kFfn; ++c) {
      const float want =
          kernels::Fp8E4M3ToFloat(w.bytes[r * kFfn + c]) * scales[r / 128];
      ASSERT_EQ(row[c], want) << r << "," << c;
    }
  }
  std::vector<uint16_t> bf16(kHidden * kFfn);
  ASSERT_TRUE(DequantizeFp8Linear(q, t, kHidden, kFfn, bf16.data()).ok());
  EXPECT_EQ(bf16[200 * kFfn + 5],
            kernels::FloatToBf16(
                kernels::Fp8E4M3ToFloat(w.bytes[200 * kFfn + 5]) * scales[1]));
}

TEST(Fp8ImportTest, PerChannelBf16ScalesWidenExactly) {
  const QuantizationConfig q = CompressedFp8("channel");
  const kernels::Fp8ExpertLayout layout =
      *Fp8CheckpointLayout(q, kHidden, kFfn);
  Owned w("m.gate_proj.weight", DType::kF8E4M3, {kFfn, kHidden}, 1);
  for (size_t i = 0; i < w.bytes.size(); ++i) w.bytes[i] = (i * 37) % 0x7E;
  Owned s("m.gate_proj.weight_scale", DType::kBF16, {kFfn, 1}, 2);
  for (int64_t r = 0; r < kFfn; ++r) {
    const uint16_t b = kernels::FloatToBf16(0.001f * (r + 1));
    std::memcpy(&s.bytes[2 * r], &b, 2);
  }
  Fp8LinearTensors t;
  auto find = [&](const std::string& n) -> const TensorInfo* {
    if (n == w.info.name) return &w.info;
    if (n == s.info.name) return &s.info;
    return nullptr;
  };
  absl::StatusOr<Fp8LinearTensors> found =
      FindFp8LinearTensors(q, "m.gate_proj", find);
  ASSERT_TRUE(found.ok()) << found.status();
  std::vector<std::byte> blob(layout.bytes);
  ASSERT_TRUE(ImportFp8ExpertPart(q, *found, layout, kernels::Fp8Part::kGate,
                                  blob.data())
                  .ok());
  const kernels::Fp8Matrix m =
      kernels::Fp8ExpertPart(blob.data(), layout, kernels::Fp8Part::kGate);
  for (int64_t r = 0; r < kFfn; ++r) {
    uint16_t b;
    std::memcpy(&b, &s.bytes[2 * r], 2);
    ASSERT_EQ(m.ScaleAt(r, 17), kernels::Bf16ToFloat(b)) << r;
  }
  EXPECT_EQ(std::memcmp(m.q, w.bytes.data(), w.bytes.size()), 0);
}

TEST(Fp8ImportTest, RefusesByName) {
  const QuantizationConfig q = Block128();
  const kernels::Fp8ExpertLayout layout =
      *Fp8CheckpointLayout(q, kHidden, kFfn);
  std::vector<std::byte> blob(layout.bytes);
  Owned w("m.up_proj.weight", DType::kF8E4M3, {kFfn, kHidden}, 1);
  Owned s("m.up_proj.weight_scale_inv", DType::kF32, {1, 2}, 4);
  const float ones[] = {1.f, 1.f};
  std::memcpy(s.bytes.data(), ones, sizeof(ones));
  auto expect = [&](const Fp8LinearTensors& t, const std::string& name) {
    absl::Status st =
        ImportFp8ExpertPart(q, t, layout, kernels::Fp8Part::kUp, blob.data());
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find(name), absl::string_view::npos) << st;
  };
  EXPECT_TRUE(ImportFp8ExpertPart(q, {"m.up_proj", &w.info, &s.info}, layout,
                                  kernels::Fp8Part::kUp, blob.data())
                  .ok());
  Owned bf("m.up_proj.weight", DType::kBF16, {kFfn, kHidden}, 2);
  expect({"m.up_proj", &bf.info, &s.info}, "dtype BF16");
  Owned wrong("m.up_proj.weight", DType::kF8E4M3, {kHidden, kFfn}, 1);
  expect({"m.up_proj", &wrong.info, &s.info}, "shape [256, 96]");
  Owned grid("m.up_proj.weight_scale_inv", DType::kF32, {2, 2}, 4);
  expect({"m.up_proj", &w.info, &grid.info}, "scale grid");
  Owned i32("m.up_proj.weight_scale_inv", DType::kI32, {1, 2}, 4);
  expect({"m.up_proj", &w.info, &i32.info}, "dtype I32");
  const float inf[] = {1.f, INFINITY};
  std::memcpy(s.bytes.data(), inf, sizeof(inf));
  expect({"m.up_proj", &w.info, &s.info}, "must be finite");
  auto none = [](const std::string&) -> const TensorInfo* { return nullptr; };
  absl::StatusOr<Fp8LinearTensors> missing =
      FindFp8LinearTensors(q, "m.up_proj", none);
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
  EXPECT_NE(missing.status().message().find("m.up_proj.weight"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace moeserve::engine::quant
