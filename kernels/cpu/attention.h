// Paged KV cache write and causal GQA attention on the CPU (layouts in
// kernels/backend.h). The scalar kernel computes one (query, head) pair per
// work item with an online softmax over one cache block at a time, so the
// only scratch is a block of scores and one head_dim accumulator on the
// stack. `isa` other than kScalar (every x86-64 CPU with AVX2+FMA the backend
// picks) runs the AVX2 variant when head_dim is a multiple of 8: one work
// item per (query, KV head, up to 4 of its query heads), walking the KV
// head's cache once for all of them, with vector dots and a vectorised exp
// (ExpAvx2, within 2 ulp of std::exp) instead of a libm call per cached
// position; checked against the scalar reference by ops_differential_test.
//
// REQUIRES: arguments passed CheckKvWrite / CheckAttention and the CPU value
// checks (slots, positions and the block-table entries they reach are in
// range), head_dim <= kMaxHeadDim, block_size <= kMaxBlockSize.
// Thread safety: pure functions.
#ifndef MOESERVE_KERNELS_CPU_ATTENTION_H_
#define MOESERVE_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace moeserve::kernels::cpu {

inline constexpr int64_t kMaxBlockSize = 1024;

void KvWriteRows(ThreadPool& pool, const Tensor& k, const Tensor& v,
                 const int32_t* slot_mapping, const PagedKvCache& cache);

void PagedAttention(ThreadPool& pool, Isa isa, const Tensor& q,
                    const PagedKvCache& cache, const AttentionBatch& batch,
                    const Tensor& out);

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_ATTENTION_H_
