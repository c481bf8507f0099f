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

#include "kernels/backend.h"

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
void Softmax(const Tensor& x, const Tensor& out);
void Argmax(const Tensor& x, const Tensor& out);

}  // namespace moeserve::kernels::cpu::ref

#endif  // MOESERVE_KERNELS_CPU_REFERENCE_OPS_H_
