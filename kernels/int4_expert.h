// The int4 expert format of a quantized draft model (MoE-SpeQ): every expert
// of the model quantized at load time to signed symmetric int4, round to
// nearest, one bf16 scale per group of consecutive columns of a weight row.
// Backend::ExpertFfnInt4 (backend.h) runs one such expert.
//
// Byte layout of one int4 expert (Int4ExpertLayout gives the offsets):
//   gate q  [ffn, hidden/2]    up q [ffn, hidden/2]    down q [hidden, ffn/2]
//   gate scales [ffn, hidden/group_in]   up scales [ffn, hidden/group_in]
//   down scales [hidden, ffn/group_out]
// q parts: signed int4 two a byte, low nibble = even column, stored offset by
// 8 (nibble = q + 8, q in [-8, 7]): the packing of CudaBackend::MatMulInt4 and
// kernels/cpu/reference_ops.h QuantizeInt4. Scales are bf16 bits. Every part
// starts 64-byte aligned and `bytes` is a multiple of 64, so experts can be
// stacked back to back. Dequantised weight = q * scale, exact in fp32.
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

// Byte offsets of the parts of one int4 expert (see the file comment).
struct Int4ExpertLayout {
  int64_t hidden = 0, ffn = 0, group_in = 0, group_out = 0;
  int64_t gate_q = 0, up_q = 0, down_q = 0, gate_scales = 0, up_scales = 0,
          down_scales = 0;
  int64_t bytes = 0;

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

// The layout with explicit groups (each even, > 0 and dividing its k).
// Backends check a caller's layout against it.
absl::StatusOr<Int4ExpertLayout> Int4ExpertLayoutWithGroups(int64_t hidden,
                                                            int64_t ffn,
                                                            int64_t group_in,
                                                            int64_t group_out);

// Quantizes one packed bf16 expert blob (engine layout: Wg [ffn, hidden],
// Wu [ffn, hidden], Wd [hidden, ffn], row-major, contiguous) into `out`
// (layout.bytes bytes; the alignment padding is zeroed). Per group:
// scale = bf16(max|w| / 7) (round to nearest even), q = clamp(round(w /
// scale), -8, 7) with round half away from zero; a group with scale 0 stores
// q = 0. Bit-identical to reference_ops QuantizeInt4 on each part.
// REQUIRES: layout from MakeInt4ExpertLayout / Int4ExpertLayoutWithGroups,
// blob 3 * ffn * hidden elements, out layout.bytes bytes (host memory).
void QuantizeExpertInt4(const bf16* blob, const Int4ExpertLayout& layout,
                        std::byte* out);

// The three weight matrices of an int4 expert.
enum class Int4Part { kGate, kUp, kDown };

// One part of an int4 expert in place: rows x cols weights, q rows of
// cols / 2 bytes, scales rows x cols / group. Pointer arithmetic only, so it
// also describes device memory.
struct Int4Matrix {
  const uint8_t* q = nullptr;
  const bf16* scales = nullptr;
  int64_t rows = 0, cols = 0, group = 0;
};
Int4Matrix Int4ExpertPart(const std::byte* expert,
                          const Int4ExpertLayout& layout, Int4Part part);

// Dequantised weight (row, col) of a part in host memory.
inline float Int4At(const Int4Matrix& w, int64_t row, int64_t col) {
  const uint8_t byte = w.q[row * (w.cols / 2) + col / 2];
  const int q = (col % 2 == 0 ? byte & 0xf : byte >> 4) - 8;
  return static_cast<float>(q) *
         Bf16ToFloat(w.scales[row * (w.cols / w.group) + col / w.group]);
}

// Dequantizes row `row` of `part` of a host int4 expert into out[0, cols)
// (cols = hidden for gate/up, ffn for down). For tests and references.
void DequantizeInt4ExpertRow(const std::byte* expert,
                             const Int4ExpertLayout& layout, Int4Part part,
                             int64_t row, float* out);

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_INT4_EXPERT_H_
