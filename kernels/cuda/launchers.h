// Raw-pointer CUDA launchers behind CudaBackend (flashinfer style): each takes
// device pointers and a stream (CUstream_st*, the type cudaStream_t names),
// enqueues its kernel(s) and returns the launch's cudaError_t as an int
// (0 = cudaSuccess). The header includes only std types (see runtime_shim.h
// for why). bf16 is passed as its raw uint16_t bits.
//
// REQUIRES: arguments already validated by kernels/op_checks.h. Index values
// (ids, rows, slots, block ids) live on the device and are not range-checked
// on the host; the kernels guard them instead: an out-of-range index yields
// zeros (Embedding, GatherRows) or is skipped (KvWrite, ScaleAddRows,
// Attention blocks), never an out-of-bounds access.
#ifndef MOESERVE_KERNELS_CUDA_LAUNCHERS_H_
#define MOESERVE_KERNELS_CUDA_LAUNCHERS_H_

#include <cstdint>

#include "kernels/cuda/runtime_shim.h"

namespace moeserve::kernels::cuda {

// Limits of the simple kernels (checked by CudaBackend before launching).
inline constexpr int64_t kMaxHeadDim = 512;  // Attention: 16 floats a lane.
inline constexpr int64_t kMaxTopK = 64;      // RouterTopK picks per row.

int LaunchEmbedding(const int32_t* ids, int64_t n, const uint16_t* table,
                    int64_t vocab, int64_t d, float* out, Strm stream);
int LaunchRmsNorm(const float* x, int64_t n, int64_t d, const uint16_t* w,
                  float eps, float* out, Strm stream);
// out[m, n] = x[m, k] * w[n, k]^T (+ bias[n]); fp32 accumulation.
int LaunchMatMulBf16(const float* x, int64_t m, int64_t k, const uint16_t* w,
                     int64_t n, const uint16_t* bias, float* out, Strm stream);
// int4 weights (CudaBackend::MatMulInt4 and ExpertFfnInt4, the format of
// kernels/int4_expert.h): out[m, n] = x[m, k] * dequant(wq)[n, k]^T, fp32
// accumulation. wq holds nibbles u, two a byte (low nibble = even column), n
// rows of k/2 bytes; value = (u - z) * scales[j, c / group] with scales
// n x k/group bf16 bits (f16_scales false) or fp16 bits (true), z =
// zeros[j, c / group] (n x k/group bytes) or 8 when zeros is null.
// LaunchGemvInt4 with one group; 16-byte loads when 32 | group and wq is
// 16-byte aligned.
// REQUIRES: group even, k % group == 0.
int LaunchMatMulInt4(const float* x, int64_t m, int64_t k, const uint8_t* wq,
                     const uint16_t* scales, bool f16_scales,
                     const uint8_t* zeros, int64_t group, int64_t n, float* out,
                     Strm stream);
// fp8 e4m3fn weights (CudaBackend::ExpertFfnFp8, the format of
// kernels/fp8_expert.h): out[m, n] = x[m, k] * dequant(wq)[n, k]^T, fp32
// accumulation. wq holds n rows of k e4m3 bytes; scales is the F32 grid
// [ceil(n / tile_rows), ceil(k / tile_cols)]; value = e4m3(q) *
// scales[j / tile_rows][c / tile_cols], one fp32 product (bit for bit the
// CPU's dequantised weight). LaunchGemvFp8 with one group; 16-byte loads
// when 16 | k, 16 | tile_cols and wq is 16-byte aligned.
// REQUIRES: tile_rows, tile_cols > 0.
int LaunchMatMulFp8(const float* x, int64_t m, int64_t k, const uint8_t* wq,
                    const float* scales, int64_t tile_rows, int64_t tile_cols,
                    int64_t n, float* out, Strm stream);

// The quantized GEMVs of ExpertFfnInt4 / ExpertFfnFp8 / ExpertFfnGrouped
// (matmul_int4.cu, matmul_fp8.cu; design in README.md): one kernel serves a
// single matrix and a layer's experts, so an expert's rows come out bit for
// bit the same whichever launch computes them. Each group (expert) is a base
// address (its blob; 0 when the offsets below are absolute addresses) and its
// rows [begin, begin + count) of x [R, k] and out [R, n] (row stride n).
// Groups go kQuantGroupsPerLaunch to a launch, their table passed by value,
// one launch for each of the 1, 2, 4 or 8 rows a group's size has a warp
// take at a time.
struct QuantGroup {
  const void* base = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
};
inline constexpr int kQuantGroupsPerLaunch = 128;

// One int4 matrix (kernels/int4_expert.h): byte offsets from a group's base
// of its nibbles [rows, k/2], scales [rows, k/group] (bf16 or fp16 bits) and
// zeros [rows, k/group] (uint8; unused without zeros: z = 8).
struct Int4PartRef {
  int64_t q = 0, scales = 0, zeros = 0;
};
// out[r, j] = x[r, :] . dequant(W)[j, :] for j < n, where weight row j is
// row j of part a for j < split and row j - split of part b otherwise (gate
// and up in one launch: split = ffn, n = 2 ffn; one matrix: split = n).
struct Int4GemvSpec {
  int64_t k = 0, n = 0, split = 0, group = 0;
  bool f16_scales = false;
  bool zeros = false;
  Int4PartRef a, b;
};
// REQUIRES: group even, k % group == 0, 0 < split <= n.
int LaunchGemvInt4(const float* x, const Int4GemvSpec& spec,
                   const QuantGroup* groups, int64_t num_groups, float* out,
                   Strm stream);

// One fp8 matrix (kernels/fp8_expert.h): byte offsets of its e4m3 bytes
// [rows, k] and F32 scale grid [ceil(rows / tile_rows), ceil(k /
// tile_cols)] from a group's base.
struct Fp8PartRef {
  int64_t q = 0, scales = 0;
  int64_t tile_rows = 1, tile_cols = 1;
};
// As Int4GemvSpec, for fp8 parts: value = e4m3(q) * scale, one fp32 product.
struct Fp8GemvSpec {
  int64_t k = 0, n = 0, split = 0;
  Fp8PartRef a, b;
};
// REQUIRES: tile_rows, tile_cols > 0, 0 < split <= n.
int LaunchGemvFp8(const float* x, const Fp8GemvSpec& spec,
                  const QuantGroup* groups, int64_t num_groups, float* out,
                  Strm stream);
int LaunchRopeRotateHalf(float* x, int64_t n, int64_t heads, int64_t hd,
                         const int32_t* positions, float theta, Strm stream);
int LaunchKvWrite(const float* k, const float* v, int64_t n, int64_t row,
                  const int32_t* slots, int64_t num_slots, float* k_pool,
                  float* v_pool, Strm stream);
// q [n_q, heads, hd]; pools [num_blocks, block_size, kv_heads, hd].
int LaunchPagedAttention(const float* q, int64_t n_q, int64_t heads,
                         int64_t kv_heads, int64_t hd, const float* k_pool,
                         const float* v_pool, int64_t num_blocks,
                         int64_t block_size, const int32_t* query_start,
                         int64_t num_seqs, const int32_t* positions,
                         const int32_t* block_tables, int64_t max_blocks,
                         float* out, Strm stream);
int LaunchRouterTopK(const float* logits, int64_t n, int64_t e, int k,
                     bool normalize, float* weights, int32_t* ids, Strm stream);
// out[i, j] = silu(gate[i*ldg + j]) * up[i*ldu + j], out row stride f.
int LaunchSiluMul(const float* gate, int64_t ldg, const float* up, int64_t ldu,
                  int64_t m, int64_t f, float* out, Strm stream);
int LaunchAdd(const float* a, const float* b, int64_t count, float* out,
              Strm stream);
int LaunchGatherRows(const float* x, int64_t n, int64_t d, const int32_t* rows,
                     int64_t m, float* out, Strm stream);
// rows may be null (rows[i] = i).
int LaunchScaleAddRows(const float* x, int64_t m, int64_t d,
                       const int32_t* rows, const float* weights, float* y,
                       int64_t n, Strm stream);
// One expert of a grouped GEMV: its blob and its rows [begin, begin + count).
struct GemvGroup {
  const uint16_t* w = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
};
// For every group: out[r, :] = x[r, :] * W^T for r in its rows, where W
// [n, k] starts w_offset elements into the group's blob; bit for bit what
// LaunchMatMulBf16 gives on those rows and that W. x [R, k], out [R, n].
// Groups go 128 to a launch, their table passed by value.
int LaunchGroupedGemvBf16(const float* x, int64_t k, const GemvGroup* groups,
                          int64_t num_groups, int64_t w_offset, int64_t n,
                          float* out, Strm stream);
// CombineExpertRows (backend.h): y[t, :] += weights[p] * x[p, :] over
// p = pairs[t, 0..] until an entry outside [0, pairs_total).
int LaunchCombineExpertRows(const float* x, int64_t pairs_total, int64_t d,
                            const float* weights, const int32_t* pairs,
                            int64_t n, int64_t k, float* y, Strm stream);
int LaunchSigmoidGatedAdd(const float* x, int64_t n, int64_t d,
                          const float* gate, float* y, Strm stream);
int LaunchSoftmax(const float* x, int64_t n, int64_t v, float* out,
                  Strm stream);
int LaunchArgmax(const float* x, int64_t n, int64_t v, int32_t* out,
                 Strm stream);

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_LAUNCHERS_H_
