// The FP8 (float8 e4m3fn) expert format: the experts of an FP8 checkpoint
// (Qwen3 / DeepSeek "quant_method": "fp8" with 128 x 128 scale blocks, or
// compressed-tensors FP8 with per-channel or per-tensor scales) kept in FP8
// in the slow tier, moved over the link as FP8 (about half the bf16 bytes)
// and computed from directly (Backend::ExpertFfnFp8).
//
// One expert is one blob (offsets in Fp8ExpertLayout):
//   gate q [ffn, hidden] | up q [ffn, hidden] | down q [hidden, ffn]   (e4m3)
//   | gate scales | up scales | down scales                            (F32)
// q parts: one e4m3fn byte per weight, row-major (a weight row is an output
// channel, as the checkpoint's `weight` [out, in]). Scales: one F32 per tile
// of tile_rows x tile_cols weights, row-major over the grid
// [ceil(rows / tile_rows), ceil(cols / tile_cols)]; the last tile of a row or
// column of the grid may be partial. Dequantised weight:
//   w[r][c] = Fp8E4M3ToFloat(q[r][c]) * scale[r / tile_rows][c / tile_cols]
// (one fp32 product, rounded to nearest even). Every part starts 64-byte
// aligned and `bytes` is a multiple of 64, so experts stack back to back.
//
// Tiles: the layout is made from one requested tile (block_rows,
// block_cols) and each part uses it clamped to the part's shape:
// tile_rows = min(block_rows, rows), tile_cols = min(block_cols, cols).
// So (128, 128) is the "fp8" method's block (partial edge tiles where 128
// does not divide a dimension), (1, kFp8Whole) one scale per output channel
// and (kFp8Whole, kFp8Whole) one scale per part (per tensor).
//
// e4m3fn: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities;
// S.1111.111 is NaN; exponent 0 is subnormal (m * 2^-9); the largest finite
// magnitude is 448 (S.1111.110).
//
// Thread safety: pure functions.
#ifndef MOESERVE_KERNELS_FP8_EXPERT_H_
#define MOESERVE_KERNELS_FP8_EXPERT_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace moeserve::kernels {

// Alignment of each part of an fp8 expert, and of its total size.
inline constexpr int64_t kFp8ExpertAlign = 64;
// A tile dimension that covers the whole part (clamped to it).
inline constexpr int64_t kFp8Whole = std::numeric_limits<int64_t>::max();
// Largest finite e4m3fn magnitude.
inline constexpr float kFp8E4M3Max = 448.0f;

// Byte offsets of the parts of one fp8 expert (see the file comment).
// block_rows / block_cols are the requested tile, stored clamped to
// max(hidden, ffn) (so kFp8Whole and any larger value give one layout).
struct Fp8ExpertLayout {
  int64_t hidden = 0, ffn = 0, block_rows = 0, block_cols = 0;
  int64_t gate_q = 0, up_q = 0, down_q = 0, gate_scales = 0, up_scales = 0,
          down_scales = 0;
  int64_t bytes = 0;

  friend bool operator==(const Fp8ExpertLayout&,
                         const Fp8ExpertLayout&) = default;
};

// The layout of an expert of the given shape with the requested scale tile
// (clamped per part, see the file comment). InvalidArgument when hidden, ffn,
// block_rows or block_cols is <= 0. Backends check a caller's layout against
// it. Examples: (256, 96, 128, 128): gate/up scales [1, 2], down [2, 1];
// (256, 96, 1, kFp8Whole): gate/up [96, 1], down [256, 1].
absl::StatusOr<Fp8ExpertLayout> MakeFp8ExpertLayout(int64_t hidden, int64_t ffn,
                                                    int64_t block_rows,
                                                    int64_t block_cols);

// The three weight matrices of an fp8 expert.
enum class Fp8Part { kGate, kUp, kDown };

// One part of an fp8 expert in place: rows x cols e4m3 bytes and the F32
// scale grid [scale_rows(), scale_cols()]. Pointer arithmetic only, so it
// also describes device memory.
struct Fp8Matrix {
  const uint8_t* q = nullptr;
  const float* scales = nullptr;
  int64_t rows = 0, cols = 0, tile_rows = 0, tile_cols = 0;

  int64_t scale_rows() const { return (rows + tile_rows - 1) / tile_rows; }
  int64_t scale_cols() const { return (cols + tile_cols - 1) / tile_cols; }
  // The scale of weight (row, col).
  float ScaleAt(int64_t row, int64_t col) const {
    return scales[(row / tile_rows) * scale_cols() + col / tile_cols];
  }
};
Fp8Matrix Fp8ExpertPart(const std::byte* expert, const Fp8ExpertLayout& layout,
                        Fp8Part part);

// e4m3fn -> float, exact (every e4m3fn value is an fp32 value; NaN codes
// give a quiet NaN with the code's sign).
float Fp8E4M3ToFloat(uint8_t code);

// float -> e4m3fn, round to nearest even, saturating: |f| beyond 448 (and
// infinities) give +-448; NaN gives the NaN code of f's sign (0x7f / 0xff);
// -0 gives 0x80.
uint8_t FloatToFp8E4M3(float f);

// The 256 decoded values, index = code (a decode table for kernels).
const float* Fp8E4M3Table();

// Dequantised weight (row, col) of a part in host memory.
inline float Fp8At(const Fp8Matrix& w, int64_t row, int64_t col) {
  return Fp8E4M3Table()[w.q[row * w.cols + col]] * w.ScaleAt(row, col);
}

// Quantizes one packed bf16 expert blob (engine layout: Wg [ffn, hidden],
// Wu [ffn, hidden], Wd [hidden, ffn], row-major, contiguous) into `out`
// (layout.bytes bytes; the alignment padding is zeroed). Per tile:
// scale = max|w| / 448 (fp32), q = FloatToFp8E4M3(w / scale); a tile of
// zeros stores scale 0 and q 0. For tests and benchmarks (checkpoints come
// quantized; engine/quant/fp8_import.h imports them).
// REQUIRES: layout from MakeFp8ExpertLayout, blob 3 * ffn * hidden elements,
// out layout.bytes bytes (host memory).
void QuantizeExpertFp8(const bf16* blob, const Fp8ExpertLayout& layout,
                       std::byte* out);

// Dequantizes row `row` of `part` of a host fp8 expert into out[0, cols)
// (cols = hidden for gate/up, ffn for down). For tests and references.
void DequantizeFp8ExpertRow(const std::byte* expert,
                            const Fp8ExpertLayout& layout, Fp8Part part,
                            int64_t row, float* out);

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_FP8_EXPERT_H_
