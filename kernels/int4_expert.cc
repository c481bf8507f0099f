#include "kernels/int4_expert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::kernels {
namespace {

int64_t AlignUp(int64_t v) {
  return (v + kInt4ExpertAlign - 1) / kInt4ExpertAlign * kInt4ExpertAlign;
}

// `v` rounded to a scale of type t (nearest even), as its bits.
uint16_t RoundScale(float v, Int4ScaleType t) {
  return t == Int4ScaleType::kF16 ? FloatToF16(v) : FloatToBf16(v);
}

// Quantizes rows x cols bf16 weights into q (rows x cols/2 bytes), scales
// (bits of type t) and, when non-null, zeros (all kInt4ImplicitZero).
void QuantizeMatrix(const bf16* w, int64_t rows, int64_t cols, int64_t group,
                    Int4ScaleType t, uint8_t* q, uint16_t* scales,
                    uint8_t* zeros) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols / group; ++g) {
      const int64_t c0 = r * cols + g * group;
      double absmax = 0;
      for (int64_t c = 0; c < group; ++c) {
        absmax = std::max(absmax, std::fabs(double{Bf16ToFloat(w[c0 + c])}));
      }
      // Quantize against the rounded scale: what dequantisation uses.
      const uint16_t s = RoundScale(static_cast<float>(absmax / 7), t);
      scales[r * (cols / group) + g] = s;
      if (zeros != nullptr) zeros[r * (cols / group) + g] = kInt4ImplicitZero;
      const double scale = Int4ScaleToFloat(s, t);
      for (int64_t c = 0; c < group; c += 2) {
        uint8_t byte = 0;
        for (int64_t h = 0; h < 2; ++h) {
          const double v = Bf16ToFloat(w[c0 + c + h]);
          const double qv =
              scale > 0 ? std::clamp(std::round(v / scale), -8.0, 7.0) : 0.0;
          byte |= static_cast<uint8_t>(static_cast<int>(qv) + 8) << (4 * h);
        }
        q[(c0 + c) / 2] = byte;
      }
    }
  }
}

}  // namespace

const char* Int4ScaleTypeName(Int4ScaleType t) {
  switch (t) {
    case Int4ScaleType::kBf16:
      return "bf16";
    case Int4ScaleType::kF16:
      return "f16";
  }
  return "?";
}

absl::StatusOr<int64_t> Int4GroupFor(int64_t k, int64_t max_group) {
  if (max_group != 16 && max_group != 32 && max_group != 64 &&
      max_group != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "int4 max_group must be 16, 32, 64 or 128, got ", max_group));
  }
  if (k <= 0 || k % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "int4 rows need an even, positive number of columns, got ", k));
  }
  for (int64_t g : {128, 64, 32, 16}) {
    if (g <= max_group && k % g == 0) return g;
  }
  if (k <= max_group) return k;
  return absl::InvalidArgumentError(
      absl::StrCat("no int4 group <= ", max_group, " divides ", k));
}

absl::StatusOr<Int4ExpertLayout> Int4ExpertLayoutWithGroups(int64_t hidden,
                                                            int64_t ffn,
                                                            int64_t group_in,
                                                            int64_t group_out) {
  return Int4ExpertLayoutWithOptions(hidden, ffn, group_in, group_out, {});
}

absl::StatusOr<Int4ExpertLayout> Int4ExpertLayoutWithOptions(
    int64_t hidden, int64_t ffn, int64_t group_in, int64_t group_out,
    const Int4ExpertOptions& options) {
  auto bad = [](const char* what, int64_t k, int64_t group) {
    return absl::InvalidArgumentError(
        absl::StrCat("int4 expert: ", what, " ", group,
                     " must be even, > 0 and divide ", k));
  };
  if (hidden <= 0 || ffn <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "int4 expert: hidden ", hidden, " and ffn ", ffn, " must be > 0"));
  }
  if (group_in <= 0 || group_in % 2 != 0 || hidden % group_in != 0) {
    return bad("group_in", hidden, group_in);
  }
  if (group_out <= 0 || group_out % 2 != 0 || ffn % group_out != 0) {
    return bad("group_out", ffn, group_out);
  }
  if (options.scale_type != Int4ScaleType::kBf16 &&
      options.scale_type != Int4ScaleType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "int4 expert: scale_type ", static_cast<int32_t>(options.scale_type),
        " is neither bf16 nor f16"));
  }
  Int4ExpertLayout l;
  l.hidden = hidden;
  l.ffn = ffn;
  l.group_in = group_in;
  l.group_out = group_out;
  const int64_t q_bytes = ffn * hidden / 2;  // Each of the three q parts.
  l.gate_q = 0;
  l.up_q = AlignUp(l.gate_q + q_bytes);
  l.down_q = AlignUp(l.up_q + q_bytes);
  l.gate_scales = AlignUp(l.down_q + q_bytes);
  l.up_scales = AlignUp(l.gate_scales + 2 * ffn * (hidden / group_in));
  l.down_scales = AlignUp(l.up_scales + 2 * ffn * (hidden / group_in));
  l.bytes = AlignUp(l.down_scales + 2 * hidden * (ffn / group_out));
  l.scale_type = options.scale_type;
  l.has_zeros = options.zeros;
  if (options.zeros) {
    // One byte per group, after everything the draft's format has.
    l.gate_zeros = l.bytes;
    l.up_zeros = AlignUp(l.gate_zeros + ffn * (hidden / group_in));
    l.down_zeros = AlignUp(l.up_zeros + ffn * (hidden / group_in));
    l.bytes = AlignUp(l.down_zeros + hidden * (ffn / group_out));
  }
  return l;
}

absl::StatusOr<Int4ExpertLayout> MakeInt4ExpertLayout(int64_t hidden,
                                                      int64_t ffn,
                                                      int64_t max_group) {
  absl::StatusOr<int64_t> group_in = Int4GroupFor(hidden, max_group);
  if (!group_in.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden: ", group_in.status().message()));
  }
  absl::StatusOr<int64_t> group_out = Int4GroupFor(ffn, max_group);
  if (!group_out.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ffn: ", group_out.status().message()));
  }
  return Int4ExpertLayoutWithGroups(hidden, ffn, *group_in, *group_out);
}

Int4Matrix Int4ExpertPart(const std::byte* expert,
                          const Int4ExpertLayout& layout, Int4Part part) {
  auto* base = reinterpret_cast<const uint8_t*>(expert);
  Int4Matrix w;
  switch (part) {
    case Int4Part::kGate:
    case Int4Part::kUp: {
      const bool gate = part == Int4Part::kGate;
      w.q = base + (gate ? layout.gate_q : layout.up_q);
      w.scales = reinterpret_cast<const uint16_t*>(
          base + (gate ? layout.gate_scales : layout.up_scales));
      if (layout.has_zeros) {
        w.zeros = base + (gate ? layout.gate_zeros : layout.up_zeros);
      }
      w.rows = layout.ffn;
      w.cols = layout.hidden;
      w.group = layout.group_in;
      break;
    }
    case Int4Part::kDown:
      w.q = base + layout.down_q;
      w.scales = reinterpret_cast<const uint16_t*>(base + layout.down_scales);
      if (layout.has_zeros) w.zeros = base + layout.down_zeros;
      w.rows = layout.hidden;
      w.cols = layout.ffn;
      w.group = layout.group_out;
      break;
  }
  w.scale_type = layout.scale_type;
  return w;
}

void QuantizeExpertInt4(const bf16* blob, const Int4ExpertLayout& layout,
                        std::byte* out) {
  std::memset(out, 0, layout.bytes);
  const int64_t part_elems = layout.ffn * layout.hidden;
  auto* base = reinterpret_cast<uint8_t*>(out);
  const Int4Part parts[] = {Int4Part::kGate, Int4Part::kUp, Int4Part::kDown};
  for (int i = 0; i < 3; ++i) {
    const Int4Matrix w = Int4ExpertPart(out, layout, parts[i]);
    // Int4Matrix views are const; the parts live in `out`.
    uint8_t* q = base + (w.q - base);
    auto* scales = reinterpret_cast<uint16_t*>(
        base + (reinterpret_cast<const uint8_t*>(w.scales) - base));
    uint8_t* zeros = w.zeros != nullptr ? base + (w.zeros - base) : nullptr;
    QuantizeMatrix(blob + i * part_elems, w.rows, w.cols, w.group,
                   layout.scale_type, q, scales, zeros);
  }
}

void DequantizeInt4ExpertRow(const std::byte* expert,
                             const Int4ExpertLayout& layout, Int4Part part,
                             int64_t row, float* out) {
  const Int4Matrix w = Int4ExpertPart(expert, layout, part);
  for (int64_t c = 0; c < w.cols; ++c) out[c] = Int4At(w, row, c);
}

}  // namespace moeserve::kernels
