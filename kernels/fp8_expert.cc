#include "kernels/fp8_expert.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moeserve::kernels {
namespace {

int64_t AlignUp(int64_t v) {
  return (v + kFp8ExpertAlign - 1) / kFp8ExpertAlign * kFp8ExpertAlign;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

float Decode(uint8_t code) {
  const bool negative = (code & 0x80) != 0;
  const int e = (code >> 3) & 0xf, m = code & 0x7;
  float v;
  if (e == 0xf && m == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -9);  // Subnormal: m/8 * 2^-6.
  } else {
    v = std::ldexp(static_cast<float>(8 + m), e - 10);  // (1 + m/8) 2^(e-7).
  }
  return negative ? -v : v;
}

// Bytes of the scale grid of a rows x cols part with the requested tile.
int64_t ScaleBytes(int64_t rows, int64_t cols, int64_t block_rows,
                   int64_t block_cols) {
  return 4 * CeilDiv(rows, std::min(block_rows, rows)) *
         CeilDiv(cols, std::min(block_cols, cols));
}

// Quantizes the rows x cols bf16 weights w into q and the scale grid of `m`
// (whose pointers point into the output blob).
void QuantizeMatrix(const bf16* w, const Fp8Matrix& m, uint8_t* q,
                    float* scales) {
  for (int64_t tr = 0; tr < m.scale_rows(); ++tr) {
    for (int64_t tc = 0; tc < m.scale_cols(); ++tc) {
      const int64_t r0 = tr * m.tile_rows,
                    r1 = std::min(m.rows, r0 + m.tile_rows);
      const int64_t c0 = tc * m.tile_cols,
                    c1 = std::min(m.cols, c0 + m.tile_cols);
      float absmax = 0;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          absmax = std::max(absmax, std::fabs(Bf16ToFloat(w[r * m.cols + c])));
        }
      }
      const float scale = absmax / kFp8E4M3Max;
      scales[tr * m.scale_cols() + tc] = scale;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float v = Bf16ToFloat(w[r * m.cols + c]);
          q[r * m.cols + c] = scale > 0 ? FloatToFp8E4M3(v / scale) : 0;
        }
      }
    }
  }
}

}  // namespace

absl::StatusOr<Fp8ExpertLayout> MakeFp8ExpertLayout(int64_t hidden, int64_t ffn,
                                                    int64_t block_rows,
                                                    int64_t block_cols) {
  if (hidden <= 0 || ffn <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fp8 expert: hidden ", hidden, " and ffn ", ffn, " must be > 0"));
  }
  if (block_rows <= 0 || block_cols <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fp8 expert: scale tile ", block_rows, " x ", block_cols,
                     " must be > 0 in both dimensions"));
  }
  Fp8ExpertLayout l;
  l.hidden = hidden;
  l.ffn = ffn;
  const int64_t largest = std::max(hidden, ffn);
  l.block_rows = std::min(block_rows, largest);
  l.block_cols = std::min(block_cols, largest);
  const int64_t q_bytes = ffn * hidden;  // Each of the three q parts.
  l.gate_q = 0;
  l.up_q = AlignUp(l.gate_q + q_bytes);
  l.down_q = AlignUp(l.up_q + q_bytes);
  l.gate_scales = AlignUp(l.down_q + q_bytes);
  const int64_t in_scales = ScaleBytes(ffn, hidden, l.block_rows, l.block_cols);
  l.up_scales = AlignUp(l.gate_scales + in_scales);
  l.down_scales = AlignUp(l.up_scales + in_scales);
  l.bytes = AlignUp(l.down_scales +
                    ScaleBytes(hidden, ffn, l.block_rows, l.block_cols));
  return l;
}

Fp8Matrix Fp8ExpertPart(const std::byte* expert, const Fp8ExpertLayout& layout,
                        Fp8Part part) {
  auto* base = reinterpret_cast<const uint8_t*>(expert);
  Fp8Matrix w;
  int64_t q = 0, scales = 0;
  switch (part) {
    case Fp8Part::kGate:
    case Fp8Part::kUp: {
      const bool gate = part == Fp8Part::kGate;
      q = gate ? layout.gate_q : layout.up_q;
      scales = gate ? layout.gate_scales : layout.up_scales;
      w.rows = layout.ffn;
      w.cols = layout.hidden;
      break;
    }
    case Fp8Part::kDown:
      q = layout.down_q;
      scales = layout.down_scales;
      w.rows = layout.hidden;
      w.cols = layout.ffn;
      break;
  }
  w.q = base + q;
  w.scales = reinterpret_cast<const float*>(base + scales);
  w.tile_rows = std::min(layout.block_rows, w.rows);
  w.tile_cols = std::min(layout.block_cols, w.cols);
  return w;
}

const float* Fp8E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int c = 0; c < 256; ++c) t[c] = Decode(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

float Fp8E4M3ToFloat(uint8_t code) { return Fp8E4M3Table()[code]; }

uint8_t FloatToFp8E4M3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint8_t sign = (bits >> 24) & 0x80;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7f;  // NaN.
  const float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7e;  // Saturate (and infinities).
  if (a < 0x1p-6f) {
    // Subnormal range: units of 2^-9 (exact scaling), round half to even
    // (the default rounding mode); 8 units is the smallest normal, 0x08.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  }
  // Normal: keep 3 of the 23 mantissa bits, round to nearest even; a carry
  // moves into the exponent, which is the next code up.
  const int e = static_cast<int>(abs_bits >> 23) - 127 + 7;  // 1..15
  const uint32_t mantissa = abs_bits & 0x7fffffu;
  uint32_t code = (static_cast<uint32_t>(e) << 3) | (mantissa >> 20);
  const uint32_t rest = mantissa & 0xfffffu, half = 0x80000u;
  if (rest > half || (rest == half && (code & 1) != 0)) ++code;
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7e));
}

void QuantizeExpertFp8(const bf16* blob, const Fp8ExpertLayout& layout,
                       std::byte* out) {
  std::memset(out, 0, layout.bytes);
  const int64_t part_elems = layout.ffn * layout.hidden;
  auto* base = reinterpret_cast<uint8_t*>(out);
  const Fp8Part parts[] = {Fp8Part::kGate, Fp8Part::kUp, Fp8Part::kDown};
  for (int i = 0; i < 3; ++i) {
    const Fp8Matrix w = Fp8ExpertPart(out, layout, parts[i]);
    // Fp8Matrix views are const; the parts live in `out`.
    uint8_t* q = base + (w.q - base);
    float* scales = reinterpret_cast<float*>(
        base + (reinterpret_cast<const uint8_t*>(w.scales) - base));
    QuantizeMatrix(blob + i * part_elems, w, q, scales);
  }
}

void DequantizeFp8ExpertRow(const std::byte* expert,
                            const Fp8ExpertLayout& layout, Fp8Part part,
                            int64_t row, float* out) {
  const Fp8Matrix w = Fp8ExpertPart(expert, layout, part);
  for (int64_t c = 0; c < w.cols; ++c) out[c] = Fp8At(w, row, c);
}

}  // namespace moeserve::kernels
