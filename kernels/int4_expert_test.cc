// The int4 expert format pinned by hand: layouts of the model shapes, a 4 x 2
// expert whose quantized bytes and scales are computed by hand below, and a
// round-trip bound on random weights; the checkpoint options (fp16 scales,
// zero points): offsets, a hand-computed asymmetric expert, and the exact
// fp16 conversions against the compiler's _Float16.
#include "kernels/int4_expert.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tensor.h"

namespace moeserve::kernels {
namespace {

TEST(Int4ExpertLayout, GroupsOfTheModelShapes) {
  auto demo96 = MakeInt4ExpertLayout(256, 96);
  ASSERT_TRUE(demo96.ok()) << demo96.status();
  EXPECT_EQ(demo96->group_in, 128);
  EXPECT_EQ(demo96->group_out, 32);  // 96 = 3 x 32: the demo models' ffn.
  auto demo128 = MakeInt4ExpertLayout(256, 128);
  ASSERT_TRUE(demo128.ok());
  EXPECT_EQ(demo128->group_in, 128);
  EXPECT_EQ(demo128->group_out, 128);
  auto mixtral = MakeInt4ExpertLayout(4096, 14336);
  ASSERT_TRUE(mixtral.ok());
  EXPECT_EQ(mixtral->group_out, 128);
  // q: 3 x 4096 x 14336 / 2 bytes; scales: 3 x 4096 x 112 bf16.
  EXPECT_EQ(mixtral->bytes, 3 * 4096 * 14336 / 2 + 3 * 4096 * 112 * 2);

  EXPECT_EQ(*Int4GroupFor(144), 16);
  EXPECT_EQ(*Int4GroupFor(40), 40);  // Nothing of 16..128 divides: k itself.
  EXPECT_EQ(*Int4GroupFor(128, 64), 64);
  EXPECT_EQ(*Int4GroupFor(96, 16), 16);
  EXPECT_FALSE(Int4GroupFor(130).ok());  // > 128 and no group divides.
  EXPECT_FALSE(Int4GroupFor(7).ok());    // Odd.
  EXPECT_FALSE(Int4GroupFor(0).ok());
  EXPECT_FALSE(Int4GroupFor(128, 100).ok());
  auto odd = MakeInt4ExpertLayout(255, 96);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("hidden"), std::string::npos);
  auto bad_ffn = MakeInt4ExpertLayout(256, 130);
  EXPECT_NE(bad_ffn.status().message().find("ffn"), std::string::npos);
  EXPECT_FALSE(Int4ExpertLayoutWithGroups(256, 96, 128, 64).ok());
  EXPECT_FALSE(Int4ExpertLayoutWithGroups(256, 96, 0, 32).ok());
}

bf16 B(float f) { return FloatToBf16(f); }

TEST(Int4Expert, HandComputedQuantization) {
  // hidden 4 (group_in 4: k itself), ffn 2 (group_out 2).
  auto layout = MakeInt4ExpertLayout(4, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->group_in, 4);
  EXPECT_EQ(layout->group_out, 2);
  // Each part 64-byte aligned: q parts of 4 bytes, scales of 4, 4 and 8.
  EXPECT_EQ(layout->gate_q, 0);
  EXPECT_EQ(layout->up_q, 64);
  EXPECT_EQ(layout->down_q, 128);
  EXPECT_EQ(layout->gate_scales, 192);
  EXPECT_EQ(layout->up_scales, 256);
  EXPECT_EQ(layout->down_scales, 320);
  EXPECT_EQ(layout->bytes, 384);

  // Wg [2, 4], then Wu [2, 4], then Wd [4, 2].
  const float w[] = {1.75f, -0.5f,  0.25f, -1.75f, 3.5f,   -3.5f,
                     0.75f, -1.25f, 0,     0,      0,      0,
                     1.0f,  -0.5f,  0.25f, 0.125f, 0.5f,   -0.5f,
                     0,     0,      -2.0f, 1.0f,   0.125f, 0.0625f};
  std::vector<bf16> blob;
  for (float v : w) blob.push_back(B(v));
  std::vector<std::byte> q(layout->bytes, std::byte{0xff});
  QuantizeExpertInt4(blob.data(), *layout, q.data());
  auto byte = [&](int64_t off) { return static_cast<uint8_t>(q[off]); };
  auto scale = [&](int64_t off) {
    bf16 s;
    std::memcpy(&s, &q[off], 2);
    return s;
  };

  // Gate row 0: max 1.75 -> scale 0.25 (exact); q = 7, -2, 1, -7; stored
  // nibbles q + 8 = 15, 6, 9, 1, low nibble first: 0x6F 0x19.
  // Gate row 1: max 3.5 -> scale 0.5; 0.75 / 0.5 = 1.5 -> 2 and
  // -1.25 / 0.5 = -2.5 -> -3 (halves away from zero); q = 7, -7, 2, -3:
  // nibbles 15, 1, 10, 5: 0x1F 0x5A.
  EXPECT_EQ(byte(0), 0x6F);
  EXPECT_EQ(byte(1), 0x19);
  EXPECT_EQ(byte(2), 0x1F);
  EXPECT_EQ(byte(3), 0x5A);
  EXPECT_EQ(scale(192), 0x3E80);  // 0.25
  EXPECT_EQ(scale(194), 0x3F00);  // 0.5
  // Up row 0: all zero -> scale 0, q 0 (nibble 8). Up row 1: scale =
  // bf16(1/7) = 0x3E12 = 0.142578125 (1/7 = 0x3E124925 rounds down);
  // w / scale = 7.014, -3.507, 1.753, 0.877 -> q = 7, -4, 2, 1: nibbles
  // 15, 4, 10, 9: 0x4F 0x9A.
  EXPECT_EQ(byte(64), 0x88);
  EXPECT_EQ(byte(65), 0x88);
  EXPECT_EQ(byte(66), 0x4F);
  EXPECT_EQ(byte(67), 0x9A);
  EXPECT_EQ(scale(256), 0x0000);
  EXPECT_EQ(scale(258), 0x3E12);
  // Down rows (groups of 2 = one byte each):
  //  [0.5, -0.5]: scale bf16(0.5/7) = 0x3D92 (0.0712890625), q 7, -7: 0x1F.
  //  [0, 0]: scale 0, q 0: 0x88.
  //  [-2, 1]: scale bf16(2/7) = 0x3E92 (0.28515625); -7.014 -> -7,
  //   3.507 -> 4: nibbles 1, 12: 0xC1.
  //  [0.125, 0.0625]: scale bf16(0.125/7) = 0x3C92; 7.014 -> 7,
  //   3.507 -> 4: nibbles 15, 12: 0xCF.
  EXPECT_EQ(byte(128), 0x1F);
  EXPECT_EQ(byte(129), 0x88);
  EXPECT_EQ(byte(130), 0xC1);
  EXPECT_EQ(byte(131), 0xCF);
  EXPECT_EQ(scale(320), 0x3D92);
  EXPECT_EQ(scale(322), 0x0000);
  EXPECT_EQ(scale(324), 0x3E92);
  EXPECT_EQ(scale(326), 0x3C92);
  // Padding is zeroed.
  EXPECT_EQ(byte(4), 0);
  EXPECT_EQ(byte(383), 0);

  // Dequantised rows: q * scale.
  float row[4];
  DequantizeInt4ExpertRow(q.data(), *layout, Int4Part::kGate, 0, row);
  EXPECT_EQ(row[0], 1.75f);
  EXPECT_EQ(row[1], -0.5f);
  EXPECT_EQ(row[2], 0.25f);
  EXPECT_EQ(row[3], -1.75f);
  DequantizeInt4ExpertRow(q.data(), *layout, Int4Part::kGate, 1, row);
  EXPECT_EQ(row[2], 1.0f);
  EXPECT_EQ(row[3], -1.5f);
  DequantizeInt4ExpertRow(q.data(), *layout, Int4Part::kUp, 0, row);
  for (float v : row) EXPECT_EQ(v, 0.0f);
  DequantizeInt4ExpertRow(q.data(), *layout, Int4Part::kUp, 1, row);
  EXPECT_EQ(row[0], 7 * 0.142578125f);
  EXPECT_EQ(row[1], -4 * 0.142578125f);
  EXPECT_EQ(row[2], 2 * 0.142578125f);
  EXPECT_EQ(row[3], 1 * 0.142578125f);
  DequantizeInt4ExpertRow(q.data(), *layout, Int4Part::kDown, 2, row);
  EXPECT_EQ(row[0], -7 * 0.28515625f);
  EXPECT_EQ(row[1], 4 * 0.28515625f);
}

TEST(Int4Expert, RoundTripWithinHalfAScale) {
  auto layout = MakeInt4ExpertLayout(256, 96);
  ASSERT_TRUE(layout.ok());
  const int64_t hidden = 256, ffn = 96;
  std::vector<bf16> blob(3 * ffn * hidden);
  uint32_t s = 7;
  for (bf16& w : blob) {
    s = s * 1664525u + 1013904223u;
    w = B(static_cast<float>(static_cast<int32_t>(s)) * 5e-11f);
  }
  std::vector<std::byte> q(layout->bytes);
  QuantizeExpertInt4(blob.data(), *layout, q.data());
  const Int4Part parts[] = {Int4Part::kGate, Int4Part::kUp, Int4Part::kDown};
  std::vector<float> row(hidden);
  for (int p = 0; p < 3; ++p) {
    const Int4Matrix m = Int4ExpertPart(q.data(), *layout, parts[p]);
    for (int64_t r = 0; r < m.rows; ++r) {
      DequantizeInt4ExpertRow(q.data(), *layout, parts[p], r, row.data());
      for (int64_t c = 0; c < m.cols; ++c) {
        const float w = Bf16ToFloat(blob[p * ffn * hidden + r * m.cols + c]);
        const float sc =
            Bf16ToFloat(m.scales[r * (m.cols / m.group) + c / m.group]);
        ASSERT_LE(std::fabs(row[c] - w), 0.5f * sc * 1.01f)
            << "part " << p << " row " << r << " col " << c;
      }
    }
  }
}

TEST(Int4ExpertLayout, OptionsWithoutZerosKeepTheDraftsBytes) {
  auto draft = Int4ExpertLayoutWithGroups(256, 96, 128, 32);
  auto f16 = Int4ExpertLayoutWithOptions(256, 96, 128, 32,
                                         {Int4ScaleType::kF16, false});
  ASSERT_TRUE(draft.ok() && f16.ok());
  EXPECT_EQ(f16->bytes, draft->bytes);
  EXPECT_EQ(f16->down_scales, draft->down_scales);
  EXPECT_EQ(f16->gate_zeros, 0);
  Int4ExpertLayout as_draft = *f16;
  as_draft.scale_type = Int4ScaleType::kBf16;
  EXPECT_EQ(as_draft, *draft);
  EXPECT_EQ(*Int4ExpertLayoutWithOptions(256, 96, 128, 32, {}), *draft);
}

TEST(Int4ExpertLayout, ZerosFollowTheScalesOneByteAGroup) {
  // hidden 256 / ffn 96, one group per down row (group_out = k = 96).
  auto l = Int4ExpertLayoutWithOptions(256, 96, 128, 96,
                                       {Int4ScaleType::kF16, true});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->has_zeros);
  // q: 3 x 12288 bytes; scales: 96 x 2 x 2, 96 x 2 x 2, 256 x 1 x 2.
  EXPECT_EQ(l->down_scales, 3 * 12288 + 384 + 384);
  EXPECT_EQ(l->gate_zeros, l->down_scales + 512);
  EXPECT_EQ(l->up_zeros, l->gate_zeros + 192);  // 96 x 2 bytes, 64-aligned.
  EXPECT_EQ(l->down_zeros, l->up_zeros + 192);
  EXPECT_EQ(l->bytes, l->down_zeros + 256);
  EXPECT_EQ(l->bytes % kInt4ExpertAlign, 0);
  const auto* base = reinterpret_cast<const std::byte*>(uintptr_t{4096});
  const Int4Matrix down = Int4ExpertPart(base, *l, Int4Part::kDown);
  EXPECT_EQ(down.group, 96);
  EXPECT_EQ(down.groups_per_row(), 1);
  EXPECT_EQ(down.scale_type, Int4ScaleType::kF16);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(down.zeros) - base,
            l->down_zeros);
  EXPECT_EQ(Int4ExpertPart(base, *l, Int4Part::kUp).zeros,
            reinterpret_cast<const uint8_t*>(base) + l->up_zeros);

  auto bad = Int4ExpertLayoutWithOptions(
      256, 96, 128, 96, {static_cast<Int4ScaleType>(2), false});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("scale_type"), std::string::npos);
  EXPECT_STREQ(Int4ScaleTypeName(Int4ScaleType::kF16), "f16");
}

TEST(Int4Expert, HandComputedAsymmetricF16Expert) {
  // hidden 4 (one group a row), ffn 2 (one group a row), fp16 scales, zeros.
  auto l = Int4ExpertLayoutWithOptions(4, 2, 4, 2, {Int4ScaleType::kF16, true});
  ASSERT_TRUE(l.ok()) << l.status();
  std::vector<std::byte> blob(l->bytes);
  auto* b = reinterpret_cast<uint8_t*>(blob.data());
  // Gate row 0: nibbles 0, 15, 3, 0 -> bytes 0xf0, 0x03; scale
  // 0.1 in fp16 (0x2e66 = 0.0999755859375), zero 3.
  b[l->gate_q] = 0xf0;
  b[l->gate_q + 1] = 0x03;
  std::memcpy(b + l->gate_scales, "\x66\x2e", 2);
  b[l->gate_zeros] = 3;
  // Down row 1: nibbles 9, 1; scale -2^-24 (the smallest fp16 subnormal,
  // negative: 0x8001); zero 16 (a gptq v1 stored nibble 15).
  b[l->down_q + 1] = 0x19;
  std::memcpy(b + l->down_scales + 2, "\x01\x80", 2);
  b[l->down_zeros + 1] = 16;
  const float s = 0.0999755859375f;
  float row[4];
  DequantizeInt4ExpertRow(blob.data(), *l, Int4Part::kGate, 0, row);
  EXPECT_EQ(row[0], -3 * s);
  EXPECT_EQ(row[1], 12 * s);
  EXPECT_EQ(row[2], 0 * s);
  EXPECT_EQ(row[3], -3 * s);
  DequantizeInt4ExpertRow(blob.data(), *l, Int4Part::kDown, 1, row);
  EXPECT_EQ(row[0], -7 * -0x1p-24f);
  EXPECT_EQ(row[1], -15 * -0x1p-24f);
  // Untouched groups: nibbles 0, scale +0, zero 0: weight 0.
  DequantizeInt4ExpertRow(blob.data(), *l, Int4Part::kUp, 1, row);
  EXPECT_EQ(row[0], 0.0f);
}

TEST(Int4Expert, QuantizerHonoursTheScaleTypeWithZerosEight) {
  auto l =
      Int4ExpertLayoutWithOptions(64, 32, 64, 32, {Int4ScaleType::kF16, true});
  ASSERT_TRUE(l.ok());
  std::vector<bf16> w(3 * 64 * 32);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = B(0.001f * static_cast<float>(static_cast<int>(i % 97) - 48));
  }
  std::vector<std::byte> q(l->bytes);
  QuantizeExpertInt4(w.data(), *l, q.data());
  const Int4Matrix up = Int4ExpertPart(q.data(), *l, Int4Part::kUp);
  for (int64_t r = 0; r < up.rows; ++r) {
    EXPECT_EQ(up.ZeroAt(r, 0), 8);
    float absmax = 0;
    for (int64_t c = 0; c < 64; ++c) {
      absmax =
          std::max(absmax, std::fabs(Bf16ToFloat(w[64 * 32 + r * 64 + c])));
    }
    EXPECT_EQ(up.scales[r], FloatToF16(absmax / 7));
  }
}

// fp16 decode is exact for all 65536 codes, and float -> fp16 rounds to
// nearest even, as the compiler's _Float16 does. g++ 12 has _Float16 on
// x86-64; Debian's clang (the thread-safety build, compile only) does not,
// so there the comparison is left out (__FLT16_MAX__ marks the type).
#ifdef __FLT16_MAX__
TEST(F16, ConversionsMatchTheCompilersFloat16) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 ref;
    const auto bits = static_cast<uint16_t>(h);
    std::memcpy(&ref, &bits, 2);
    const float want = static_cast<float>(ref), got = F16ToFloat(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << h;
    ASSERT_EQ(FloatToF16(got), bits) << h;  // Round trip.
  }
  // Midpoints, subnormal range, overflow and random floats.
  uint32_t s = 1;
  for (int i = 0; i < 2000000; ++i) {
    s = s * 1664525u + 1013904223u;
    uint32_t fbits = s;
    if (i % 4 == 0) fbits = (fbits & 0x807fffffu) | (0x66u << 23);  // 2^-25
    if (i % 4 == 1) fbits = (fbits & 0x80001fffu) | 0x38000000u;    // subnormal
    float f;
    std::memcpy(&f, &fbits, 4);
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &ref, 2);
    ASSERT_EQ(FloatToF16(f), want) << f << " bits " << fbits;
  }
  EXPECT_EQ(FloatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToF16(-1e9f), 0xfc00);
  EXPECT_EQ(FloatToF16(0x1p-25f), 0);    // Tie to even: zero.
  EXPECT_EQ(FloatToF16(0x1.8p-25f), 1);  // Above the tie.
  EXPECT_EQ(FloatToF16(0x1.8p-24f), 2);  // Tie, odd -> even.
}
#endif  // __FLT16_MAX__

}  // namespace
}  // namespace moeserve::kernels
