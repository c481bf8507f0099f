// Reference implementations of every Backend op: plain scalar loops, double
// accumulation, no threads, no SIMD. They define the semantics the optimised
// backends are tested against (ops_differential_test.cc); they are slow on
// purpose and never used for serving.
//
// REQUIRES: arguments valid for the matching Backend op (run the op_checks.h
// check first); these functions do not validate.
// Thread safety: pure functions.
#ifndef MOESERVE_KERNELS_CPU_REFERENCE_OPS_H_
#define MOESERVE_KERNELS_CPU_REFERENCE_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"

namespace moeserve::kernels::cpu::ref {

void Embedding(const Tensor& ids, const Tensor& table, const Tensor& out);
void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out);
void MatMul(const Tensor& x, const Tensor& w, const Tensor& bias,
            const Tensor& out);
void RopeRotateHalf(const Tensor& x, const Tensor& positions, float theta);
void KvWrite(const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
             const PagedKvCache& cache);
void Attention(const Tensor& q, const PagedKvCache& cache,
               const AttentionBatch& batch, const Tensor& out);
void RouterTopK(const Tensor& logits, int k, bool normalize,
                const Tensor& weights, const Tensor& ids);
void SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out);
void Add(const Tensor& a, const Tensor& b, const Tensor& out);
void GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out);
void ScaleAddRows(const Tensor& x, const Tensor& rows, const Tensor& weights,
                  const Tensor& y);
void SigmoidGatedAdd(const Tensor& x, const Tensor& gate, const Tensor& y);
// Computed the long way: three separate matrix products from the blob.
void ExpertFfn(const Tensor& x, const Tensor& blob, int64_t ffn,
               const Tensor& out);
// ExpertFfnInt4 the long way: each int4 weight dequantised ((u - z) * scale,
// Int4At: any layout, bf16 or fp16 scales, with or without zeros), three
// double-accumulated matrix products, gate and up rounded to fp32 before
// SiluMul as in ExpertFfn. blob U8[layout.bytes] on the host.
void ExpertFfnInt4(const Tensor& x, const Tensor& blob,
                   const Int4ExpertLayout& layout, const Tensor& out);
// ExpertFfnFp8 the long way: each fp8 weight dequantised (Fp8At: the
// table's value times its tile's scale, one fp32 product), three
// double-accumulated matrix products, gate and up rounded to fp32 before
// SiluMul as in ExpertFfn. blob U8[layout.bytes] on the host.
void ExpertFfnFp8(const Tensor& x, const Tensor& blob,
                  const Fp8ExpertLayout& layout, const Tensor& out);
void Softmax(const Tensor& x, const Tensor& out);
void Argmax(const Tensor& x, const Tensor& out);

// ---- int4 weights, reserved for a quantized draft model. Not a Backend op
// yet: the only kernel is CudaBackend::MatMulInt4 and these two define its
// format and semantics. Format: signed symmetric int4, two values a byte (low
// nibble = even column), value = (q - 8) * scale with q in [0, 15], one bf16
// scale per `group` consecutive columns of each weight row.

// Quantizes w (F32 or BF16 [n, k], host) into wq I4[n, k] (n rows of k/2
// bytes) and scales BF16[n, k / group]: scale = bf16(max|w| of the group / 7),
// q = clamp(round(w / scale), -8, 7) + 8 (an all-zero group: scale 0, q = 8).
// InvalidArgument naming the argument when group is not even and > 0, k is
// not a multiple of group, or a tensor has the wrong dtype, shape or device.
// Unlike the other functions here it validates: it is the converter a model
// loader will call.
absl::Status QuantizeInt4(const Tensor& w, int64_t group, const Tensor& wq,
                          const Tensor& scales);

// The dequantised weight (row, col) of wq / scales.
float Int4Weight(const Tensor& wq, const Tensor& scales, int64_t group,
                 int64_t row, int64_t col);

// out[m, n] = x[m, k] * dequant(wq)[n, k]^T, double accumulation.
// x F32[m, k], wq I4[n, k], scales BF16[n, k / group], out F32[m, n].
void MatMulInt4Reference(const Tensor& x, const Tensor& wq,
                         const Tensor& scales, int64_t group,
                         const Tensor& out);

}  // namespace moeserve::kernels::cpu::ref

#endif  // MOESERVE_KERNELS_CPU_REFERENCE_OPS_H_
