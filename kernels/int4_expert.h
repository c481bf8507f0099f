// The int4 expert format: one expert's three weight matrices as 4-bit
// integers with a scale (and, optionally, a zero point) per group of
// consecutive columns of a weight row. Two producers: the quantized draft
// model (MoE-SpeQ), every expert quantized at load time to signed symmetric
// int4 with bf16 scales (QuantizeExpertInt4); and int4 checkpoints as users
// download them (GPTQ, AWQ, compressed-tensors: engine/quant/int4_import.h),
// often asymmetric, with fp16 scales. Backend::ExpertFfnInt4 (backend.h) runs
// one such expert, whatever its options.
//
// Byte layout of one int4 expert (Int4ExpertLayout gives the offsets):
//   gate q  [ffn, hidden/2]    up q [ffn, hidden/2]    down q [hidden, ffn/2]
//   gate scales [ffn, hidden/group_in]   up scales [ffn, hidden/group_in]
//   down scales [hidden, ffn/group_out]
//   with zeros only: gate zeros [ffn, hidden/group_in]   up zeros (same)
//                    down zeros [hidden, ffn/group_out]
// q parts: unsigned nibbles u in [0, 15], two a byte, low nibble = even
// column. Scales: 16-bit, bf16 or fp16 bits (Int4ScaleType, one for the whole
// expert). Zeros: one uint8 per group, z in [0, 16] (16 only arises from a
// GPTQ "gptq" checkpoint's stored nibble 15, zero - 1 = 15); a layout without
// zeros has z = 8 for every group. Dequantised weight = (u - z) * scale,
// exact in fp32 (|u - z| <= 16 times an 11-bit significand). A layout with
// bf16 scales and no zeros is the draft's format, byte for byte as before
// the options existed: q = u - 8 is signed int4 stored offset by 8, the
// packing of CudaBackend::MatMulInt4 and reference_ops.h QuantizeInt4.
// Every part starts 64-byte aligned and `bytes` is a multiple of 64, so
// experts can be stacked back to back.
//
// Thread safety: pure functions.
#ifndef MOESERVE_KERNELS_INT4_EXPERT_H_
#define MOESERVE_KERNELS_INT4_EXPERT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace moeserve::kernels {

// Alignment of each part of an int4 expert, and of its total size.
inline constexpr int64_t kInt4ExpertAlign = 64;

// The element type of an int4 expert's scales.
enum class Int4ScaleType : int32_t { kBf16 = 0, kF16 = 1 };

// "bf16" / "f16" ("?" for a value outside the enum).
const char* Int4ScaleTypeName(Int4ScaleType t);

// A scale (raw bits of type t) as float; exact.
inline float Int4ScaleToFloat(uint16_t bits, Int4ScaleType t) {
  return t == Int4ScaleType::kF16 ? F16ToFloat(bits) : Bf16ToFloat(bits);
}

// What an int4 expert stores besides its nibbles.
struct Int4ExpertOptions {
  // Default: bf16 (the draft's quantizer).
  Int4ScaleType scale_type = Int4ScaleType::kBf16;
  // Default: false, every zero point is 8 (symmetric int4).
  bool zeros = false;
};

// The zero point of every group of a layout without zeros.
inline constexpr int kInt4ImplicitZero = 8;
// The largest zero point a layout with zeros may hold (see the file comment).
inline constexpr int kInt4MaxZero = 16;

// Byte offsets of the parts of one int4 expert (see the file comment).
// Without zeros the *_zeros offsets are 0 and the other offsets and `bytes`
// are those of the draft's format.
struct Int4ExpertLayout {
  int64_t hidden = 0, ffn = 0, group_in = 0, group_out = 0;
  int64_t gate_q = 0, up_q = 0, down_q = 0, gate_scales = 0, up_scales = 0,
          down_scales = 0;
  int64_t bytes = 0;
  Int4ScaleType scale_type = Int4ScaleType::kBf16;
  bool has_zeros = false;
  int64_t gate_zeros = 0, up_zeros = 0, down_zeros = 0;

  Int4ExpertOptions options() const { return {scale_type, has_zeros}; }

  friend bool operator==(const Int4ExpertLayout&,
                         const Int4ExpertLayout&) = default;
};

// The group size for rows of k columns: 128 when it divides k, else the
// largest of 64, 32, 16 that divides k, else k itself when k <= 128 (never
// above max_group). InvalidArgument when k is odd or <= 0 (two columns a
// byte), when nothing fits, or when max_group is not 16, 32, 64 or 128.
// Example: the demo models' ffn = 96 gives the down rows group 32.
absl::StatusOr<int64_t> Int4GroupFor(int64_t k, int64_t max_group = 128);

// The layout of an expert of the given shape with the groups of Int4GroupFor:
// group_in for the gate/up rows (k = hidden), group_out for the down rows
// (k = ffn). Demo models: hidden 256 / ffn 96 -> group_in 128, group_out 32;
// hidden 256 / ffn 128 -> 128 and 128. InvalidArgument naming the dimension
// when hidden or ffn has no group (odd, or <= 0).
absl::StatusOr<Int4ExpertLayout> MakeInt4ExpertLayout(int64_t hidden,
                                                      int64_t ffn,
                                                      int64_t max_group = 128);

// The layout with explicit groups (each even, > 0 and dividing its k; a
// group equal to k is one group per row) and default options (bf16 scales,
// no zeros).
absl::StatusOr<Int4ExpertLayout> Int4ExpertLayoutWithGroups(int64_t hidden,
                                                            int64_t ffn,
                                                            int64_t group_in,
                                                            int64_t group_out);

// The layout with explicit groups and options. Backends check a caller's
// layout against it. InvalidArgument naming the field for a bad group or a
// scale type outside the enum.
absl::StatusOr<Int4ExpertLayout> Int4ExpertLayoutWithOptions(
    int64_t hidden, int64_t ffn, int64_t group_in, int64_t group_out,
    const Int4ExpertOptions& options);

// Quantizes one packed bf16 expert blob (engine layout: Wg [ffn, hidden],
// Wu [ffn, hidden], Wd [hidden, ffn], row-major, contiguous) into `out`
// (layout.bytes bytes; the alignment padding is zeroed). Symmetric, per
// group: scale = max|w| / 7 rounded to the layout's scale type (nearest
// even), q = clamp(round(w / scale), -8, 7) with round half away from zero,
// stored u = q + 8 (zero points, where the layout has them, are all 8); a
// group with scale 0 stores q = 0. With the default options bit-identical to
// reference_ops QuantizeInt4 on each part.
// REQUIRES: layout from one of the factories above, blob 3 * ffn * hidden
// elements, out layout.bytes bytes (host memory).
void QuantizeExpertInt4(const bf16* blob, const Int4ExpertLayout& layout,
                        std::byte* out);

// The three weight matrices of an int4 expert.
enum class Int4Part { kGate, kUp, kDown };

// One part of an int4 expert in place: rows x cols weights, q rows of
// cols / 2 bytes, scales (bits of scale_type) and zeros rows x cols / group.
// zeros null: every zero point is kInt4ImplicitZero. Pointer arithmetic
// only, so it also describes device memory.
struct Int4Matrix {
  const uint8_t* q = nullptr;
  const uint16_t* scales = nullptr;  // bf16 or fp16 bits (scale_type)
  const uint8_t* zeros = nullptr;
  Int4ScaleType scale_type = Int4ScaleType::kBf16;
  int64_t rows = 0, cols = 0, group = 0;

  int64_t groups_per_row() const { return cols / group; }
  // Scale and zero point of group g of `row` (host memory).
  float ScaleAt(int64_t row, int64_t g) const {
    return Int4ScaleToFloat(scales[row * groups_per_row() + g], scale_type);
  }
  int ZeroAt(int64_t row, int64_t g) const {
    return zeros != nullptr ? zeros[row * groups_per_row() + g]
                            : kInt4ImplicitZero;
  }
};
Int4Matrix Int4ExpertPart(const std::byte* expert,
                          const Int4ExpertLayout& layout, Int4Part part);

// Nibble u of (row, col) of a part in host memory.
inline int Int4NibbleAt(const Int4Matrix& w, int64_t row, int64_t col) {
  const uint8_t byte = w.q[row * (w.cols / 2) + col / 2];
  return col % 2 == 0 ? byte & 0xf : byte >> 4;
}

// Dequantised weight (row, col) of a part in host memory: (u - z) * scale.
inline float Int4At(const Int4Matrix& w, int64_t row, int64_t col) {
  const int64_t g = col / w.group;
  return static_cast<float>(Int4NibbleAt(w, row, col) - w.ZeroAt(row, g)) *
         w.ScaleAt(row, g);
}

// Dequantizes row `row` of `part` of a host int4 expert into out[0, cols)
// (cols = hidden for gate/up, ffn for down). For tests and references.
void DequantizeInt4ExpertRow(const std::byte* expert,
                             const Int4ExpertLayout& layout, Int4Part part,
                             int64_t row, float* out);

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_INT4_EXPERT_H_
