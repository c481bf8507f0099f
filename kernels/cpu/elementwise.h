// Row-wise and elementwise CPU kernels (everything but MatMul and attention).
// Raw-pointer functions called by CpuBackend after its checks; each splits
// rows (or columns) over the pool when the work is large enough to pay for a
// wake-up. Inner loops are plain and written to auto-vectorise.
//
// REQUIRES (all): shapes as documented on the matching Backend op in
// kernels/backend.h, index values already range-checked.
// Thread safety: pure functions.
#ifndef MOESERVE_KERNELS_CPU_ELEMENTWISE_H_
#define MOESERVE_KERNELS_CPU_ELEMENTWISE_H_

#include <cstdint>

#include "kernels/cpu/thread_pool.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cpu {

// Limits of the kernels that keep per-row scratch on the stack.
inline constexpr int64_t kMaxHeadDim = 512;
inline constexpr int64_t kMaxExperts = 1024;

// The RoPE inverse frequency of pair i, as HF computes it in fp32.
float RopeInvFreq(float theta, int64_t i, int64_t head_dim);

void EmbeddingRows(ThreadPool& pool, const int32_t* ids, int64_t n,
                   const bf16* table, int64_t d, float* out);
void RmsNormRows(ThreadPool& pool, const float* x, int64_t n, int64_t d,
                 const bf16* w, float eps, float* out);
void RopeRotateHalfRows(ThreadPool& pool, float* x, int64_t n, int64_t heads,
                        int64_t head_dim, const int32_t* positions,
                        float theta);
void RouterTopKRows(ThreadPool& pool, const float* logits, int64_t n,
                    int64_t experts, int k, bool normalize, float* weights,
                    int32_t* ids);
// out[i] = silu(gate[i * gate_stride + j]) * up[i * up_stride + j], j < f.
void SiluMulRows(ThreadPool& pool, const float* gate, int64_t gate_stride,
                 const float* up, int64_t up_stride, int64_t m, int64_t f,
                 float* out);
void AddElems(ThreadPool& pool, const float* a, const float* b, int64_t count,
              float* out);
void GatherRowsF32(ThreadPool& pool, const float* x, int64_t d,
                   const int32_t* rows, int64_t m, float* out);
// rows may be null (identity).
void ScaleAddRowsF32(ThreadPool& pool, const float* x, int64_t m, int64_t d,
                     const int32_t* rows, const float* weights, float* y);
// y[t, :] += weights[p] * x[p, :] for p = pairs[t * k + j], j = 0.. up to
// the first negative entry (CombineExpertRows). The same expression as
// ScaleAddRowsF32, so a token's sum is bit-identical to ScaleAddRowsF32
// applied expert by expert in the same order.
void CombineRowsF32(ThreadPool& pool, const float* x, int64_t d,
                    const float* weights, const int32_t* pairs, int64_t n,
                    int64_t k, float* y);
void SigmoidGatedAddRows(ThreadPool& pool, const float* x, int64_t n, int64_t d,
                         const float* gate, float* y);
void SoftmaxRows(ThreadPool& pool, const float* x, int64_t n, int64_t v,
                 float* out);
void ArgmaxRows(ThreadPool& pool, const float* x, int64_t n, int64_t v,
                int32_t* out);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_ELEMENTWISE_H_
