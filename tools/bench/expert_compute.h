// ExpertComputeMicros: how long one routed expert takes to compute for one
// token on a backend, measured. The policy bench prints it next to the cost
// of a miss so "a transfer costs N expert computations" is a number.
//
// Valid on any backend: the blobs it cycles over are read from the model's
// slow tier (packed host arena, or the safetensors files when the weights
// were loaded without packed experts) and copied into memory from
// Backend::Allocate, so on CUDA the kernel reads VRAM as it would from a
// fast-tier slot. Only a bounded number of distinct experts is uploaded (at
// most 64, and about 1 GiB), spread over the layers, so a large model fits
// and the working set still exceeds the caches.
//
// Owns nothing after it returns (buffers and stream are freed).
// Thread-compatible.
#ifndef MOESERVE_TOOLS_BENCH_EXPERT_COMPUTE_H_
#define MOESERVE_TOOLS_BENCH_EXPERT_COMPUTE_H_

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"

namespace moeserve::bench {

struct ExpertComputeTiming {
  // Mean time of the checkpoint's expert kernel (ExpertFfn, ExpertFfnInt4
  // or ExpertFfnFp8), one token.
  double micros_per_expert = 0;
  int distinct_experts = 0;  // Blobs uploaded and cycled over.
};

absl::StatusOr<ExpertComputeTiming> ExpertComputeMicros(
    const engine::ModelWeights& weights, kernels::Backend* backend);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_EXPERT_COMPUTE_H_
