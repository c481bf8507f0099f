// The fp8 expert format: the e4m3fn decoder and encoder over every code
// (round trip, round to nearest even, saturation, NaN, subnormals), the
// layouts of the three scale granularities, and the quantizer's error bound.
#include "kernels/fp8_expert.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tensor.h"

namespace moeserve::kernels {
namespace {

bool IsNanCode(int c) { return (c & 0x7f) == 0x7f; }

TEST(Fp8E4M3, DecodesHandPickedCodes) {
  EXPECT_EQ(Fp8E4M3ToFloat(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(Fp8E4M3ToFloat(0x80)));
  EXPECT_EQ(Fp8E4M3ToFloat(0x80), 0.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x38), 1.0f);  // e = 7, m = 0.
  EXPECT_EQ(Fp8E4M3ToFloat(0xb8), -1.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x3c), 1.5f);    // m = 4.
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);  // Largest finite.
  EXPECT_EQ(Fp8E4M3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0x1p-6f);  // Smallest normal.
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1p-9f);  // Smallest subnormal.
  EXPECT_EQ(Fp8E4M3ToFloat(0x07), 0x7p-9f);  // Largest subnormal.
  EXPECT_EQ(Fp8E4M3ToFloat(0x78), 256.0f);   // e = 15, m = 0: finite.
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0xff)));
  EXPECT_TRUE(std::signbit(Fp8E4M3ToFloat(0xff)));
}

TEST(Fp8E4M3, EveryCodeRoundTripsAndTheTableAgrees) {
  for (int c = 0; c < 256; ++c) {
    const float v = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    SCOPED_TRACE(c);
    if (IsNanCode(c)) {
      EXPECT_TRUE(std::isnan(v));
      EXPECT_EQ(FloatToFp8E4M3(v), c);  // The sign survives.
      continue;
    }
    EXPECT_EQ(FloatToFp8E4M3(v), c) << v;
    EXPECT_EQ(Fp8E4M3Table()[c], v);
    // Negation flips the sign bit only.
    EXPECT_EQ(Fp8E4M3ToFloat(static_cast<uint8_t>(c ^ 0x80)), -v);
  }
}

TEST(Fp8E4M3, ValuesAreIncreasingOverPositiveCodes) {
  for (int c = 1; c < 0x7f; ++c) {
    EXPECT_LT(Fp8E4M3ToFloat(c - 1), Fp8E4M3ToFloat(c)) << c;
  }
}

TEST(Fp8E4M3, RoundsToNearestEven) {
  // Between every pair of adjacent positive codes (subnormal, normal and
  // across the subnormal/normal and exponent boundaries): just below the
  // midpoint goes down, just above goes up, the midpoint to the even code.
  for (int c = 0; c + 1 < 0x7f; ++c) {
    const float lo = Fp8E4M3ToFloat(c), hi = Fp8E4M3ToFloat(c + 1);
    const float mid = (lo + hi) / 2;  // Exact in fp32.
    SCOPED_TRACE(c);
    EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, 1000.0f)), c + 1);
    EXPECT_EQ(FloatToFp8E4M3(mid), c % 2 == 0 ? c : c + 1);
    EXPECT_EQ(FloatToFp8E4M3(-mid), 0x80 | (c % 2 == 0 ? c : c + 1));
  }
  // Below half the smallest subnormal: zero (with the sign).
  EXPECT_EQ(FloatToFp8E4M3(0x1p-11f), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(-0x1p-11f), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(1e-30f), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(0x1p-149f), 0x00);  // fp32 subnormal.
}

TEST(Fp8E4M3, SaturatesAndKeepsNan) {
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(460.0f), 0x7e);  // Would round to 448 anyway.
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7e);  // Midpoint to 480: saturates.
  EXPECT_EQ(FloatToFp8E4M3(1e6f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-1e6f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(INFINITY), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-INFINITY), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::nanf("")), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(-std::nanf("")), 0xff);
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
}

TEST(Fp8ExpertLayout, TilesClampPerPart) {
  // The "fp8" method's 128 x 128 blocks on the demo shape (256 x 96).
  auto block = MakeFp8ExpertLayout(256, 96, 128, 128);
  ASSERT_TRUE(block.ok()) << block.status();
  const Fp8Matrix gate = Fp8ExpertPart(nullptr, *block, Fp8Part::kGate);
  EXPECT_EQ(gate.rows, 96);
  EXPECT_EQ(gate.cols, 256);
  EXPECT_EQ(gate.tile_rows, 96);  // Clamped: one partial block row.
  EXPECT_EQ(gate.tile_cols, 128);
  EXPECT_EQ(gate.scale_rows(), 1);
  EXPECT_EQ(gate.scale_cols(), 2);
  const Fp8Matrix down = Fp8ExpertPart(nullptr, *block, Fp8Part::kDown);
  EXPECT_EQ(down.scale_rows(), 2);
  EXPECT_EQ(down.scale_cols(), 1);
  EXPECT_EQ(down.tile_cols, 96);
  // Offsets: q parts of 24576 bytes, scale grids of 8, 8 and 8 bytes.
  EXPECT_EQ(block->gate_q, 0);
  EXPECT_EQ(block->up_q, 24576);
  EXPECT_EQ(block->down_q, 2 * 24576);
  EXPECT_EQ(block->gate_scales, 3 * 24576);
  EXPECT_EQ(block->up_scales, 3 * 24576 + 64);
  EXPECT_EQ(block->down_scales, 3 * 24576 + 128);
  EXPECT_EQ(block->bytes, 3 * 24576 + 192);

  // Partial edge tiles: 300 x 200 in blocks of 128: [3, 2] and [2, 3].
  auto partial = MakeFp8ExpertLayout(200, 300, 128, 128);
  ASSERT_TRUE(partial.ok());
  const Fp8Matrix up = Fp8ExpertPart(nullptr, *partial, Fp8Part::kUp);
  EXPECT_EQ(up.scale_rows(), 3);
  EXPECT_EQ(up.scale_cols(), 2);
  EXPECT_EQ(partial->gate_q % 64 + partial->up_q % 64 + partial->down_q % 64 +
                partial->gate_scales % 64 + partial->up_scales % 64 +
                partial->down_scales % 64 + partial->bytes % 64,
            0);

  // Per channel and per tensor.
  auto channel = MakeFp8ExpertLayout(256, 96, 1, kFp8Whole);
  ASSERT_TRUE(channel.ok());
  EXPECT_EQ(channel->block_cols, 256);  // Stored clamped to max(hidden, ffn).
  EXPECT_EQ(Fp8ExpertPart(nullptr, *channel, Fp8Part::kGate).scale_rows(), 96);
  EXPECT_EQ(Fp8ExpertPart(nullptr, *channel, Fp8Part::kGate).scale_cols(), 1);
  EXPECT_EQ(Fp8ExpertPart(nullptr, *channel, Fp8Part::kDown).scale_rows(), 256);
  EXPECT_EQ(Fp8ExpertPart(nullptr, *channel, Fp8Part::kDown).tile_cols, 96);
  auto tensor = MakeFp8ExpertLayout(256, 96, kFp8Whole, kFp8Whole);
  ASSERT_TRUE(tensor.ok());
  for (Fp8Part p : {Fp8Part::kGate, Fp8Part::kUp, Fp8Part::kDown}) {
    const Fp8Matrix w = Fp8ExpertPart(nullptr, *tensor, p);
    EXPECT_EQ(w.scale_rows() * w.scale_cols(), 1);
  }
  // The stored layout is its own canonical form.
  EXPECT_EQ(
      *MakeFp8ExpertLayout(256, 96, tensor->block_rows, tensor->block_cols),
      *tensor);
  EXPECT_EQ(*MakeFp8ExpertLayout(256, 96, 1000, 1000), *tensor);

  EXPECT_EQ(MakeFp8ExpertLayout(0, 96, 128, 128).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeFp8ExpertLayout(256, -1, 128, 128).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad_tile = MakeFp8ExpertLayout(256, 96, 0, 128);
  EXPECT_EQ(bad_tile.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_tile.status().message().find("tile"), std::string::npos);
}

// A blob in 64-byte aligned storage.
struct Blob {
  explicit Blob(int64_t bytes) : storage(bytes + 64) {
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    data = reinterpret_cast<std::byte*>(storage.data() + (64 - base % 64) % 64);
  }
  std::vector<uint8_t> storage;
  std::byte* data;
};

TEST(Fp8Expert, QuantizerErrorWithinHalfAStepOfItsTile) {
  const int64_t hidden = 200, ffn = 72;
  std::vector<bf16> w(3 * hidden * ffn);
  uint32_t s = 1;
  for (bf16& v : w) {
    s = s * 1664525u + 1013904223u;
    v = FloatToBf16((static_cast<float>(s >> 8) / (1 << 24) - 0.5f) * 0.2f);
  }
  w[5] = FloatToBf16(0);  // A zero weight stays zero.
  for (auto [br, bc] : {std::pair<int64_t, int64_t>{128, 128},
                        {1, kFp8Whole},
                        {kFp8Whole, kFp8Whole},
                        {16, 48}}) {
    auto layout = MakeFp8ExpertLayout(hidden, ffn, br, bc);
    ASSERT_TRUE(layout.ok());
    Blob blob(layout->bytes);
    QuantizeExpertFp8(w.data(), *layout, blob.data);
    const Fp8Part parts[] = {Fp8Part::kGate, Fp8Part::kUp, Fp8Part::kDown};
    for (int p = 0; p < 3; ++p) {
      const Fp8Matrix m = Fp8ExpertPart(blob.data, *layout, parts[p]);
      std::vector<float> row(m.cols);
      for (int64_t r = 0; r < m.rows; ++r) {
        DequantizeFp8ExpertRow(blob.data, *layout, parts[p], r, row.data());
        for (int64_t c = 0; c < m.cols; ++c) {
          const float want = Bf16ToFloat(w[p * hidden * ffn + r * m.cols + c]);
          const float scale = m.ScaleAt(r, c);
          // 3 mantissa bits: half a step is 2^-4 of the value; below the
          // normal range an absolute 2^-10 * scale.
          EXPECT_LE(std::fabs(row[c] - want),
                    std::max(std::fabs(want) / 16, 0x1p-10f * scale) * 1.001f)
              << "part " << p << " (" << r << ", " << c << ")";
        }
      }
      // Each tile's absmax maps to 448 (up to the division's rounding).
      float top = 0;
      for (int64_t r = 0; r < m.tile_rows; ++r) {
        for (int64_t c = 0; c < m.tile_cols; ++c) {
          top = std::max(top, std::fabs(Fp8E4M3ToFloat(m.q[r * m.cols + c])));
        }
      }
      EXPECT_EQ(top, 448.0f);
    }
    EXPECT_EQ(Fp8At(Fp8ExpertPart(blob.data, *layout, Fp8Part::kGate), 0, 5),
              0.0f);
  }
}

TEST(Fp8Expert, AllZeroTileHasScaleZero) {
  auto layout = MakeFp8ExpertLayout(4, 2, 1, kFp8Whole);
  ASSERT_TRUE(layout.ok());
  std::vector<bf16> w(3 * 4 * 2, FloatToBf16(0.5f));
  for (int c = 0; c < 4; ++c) w[4 + c] = FloatToBf16(0);  // Gate row 1.
  Blob blob(layout->bytes);
  QuantizeExpertFp8(w.data(), *layout, blob.data);
  const Fp8Matrix gate = Fp8ExpertPart(blob.data, *layout, Fp8Part::kGate);
  EXPECT_EQ(gate.scales[0], 0.5f / 448.0f);
  EXPECT_EQ(gate.q[0], 0x7e);
  EXPECT_EQ(gate.scales[1], 0.0f);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(gate.q[4 + c], 0);
}

}  // namespace
}  // namespace moeserve::kernels
