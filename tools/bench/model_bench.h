// Throughput of the MoE forward pass (engine/moe_model.h) on one model
// directory: prefill and decode tokens/s, and the weight bytes each forward
// pass reads, so a caller can set them against the memory roofline.
//
// Token ids are fed directly (no tokenizer): prompts and decode tokens are
// drawn uniformly from the vocabulary with a fixed seed, so routing varies
// from token to token as with real text, and runs are reproducible.
//
// Weight bytes read by one forward pass over n tokens =
//   every non-expert weight (attention, norms, routers, shared expert, final
//   norm, lm_head) once
//   + n embedding rows (the whole table when it is tied to lm_head)
//   + gate/up/down of every distinct (layer, expert) the routers selected
//     (counted by CountingExperts).
// KV-cache and activation traffic are not counted.
//
// Thread-compatible; one call at a time per backend.
#ifndef MOESERVE_TOOLS_BENCH_MODEL_BENCH_H_
#define MOESERVE_TOOLS_BENCH_MODEL_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::bench {

struct BenchOptions {
  int prompt_len = 128;
  int decode_steps = 32;  // Timed steps, after one untimed warm-up step.
  std::vector<int> decode_batches = {1, 8};
  std::vector<int> prefill_batches = {1, 4};  // Sequences of prompt_len.
  // Each phase is repeated (fresh KV cache and prompts) until its timed
  // seconds add up to min_phase_seconds, at most max_repeats times; the
  // median repeat (by tokens/s) is reported, with the min and max. Default:
  // 1 s, 20.
  double min_phase_seconds = 1.0;
  int max_repeats = 20;
  uint64_t seed = 1;
};

// One timed phase.
struct Measurement {
  std::string phase;  // "prefill" or "decode"
  int batch = 0;      // Sequences per forward pass.
  int64_t tokens = 0;
  int64_t forward_passes = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  double weight_bytes_per_pass = 0;   // Mean over the timed passes.
  double weight_bytes_per_token = 0;  // weight_bytes_per_pass * passes / tokens
  double weight_gbps = 0;             // Weight bytes read / seconds / 1e9.
  double experts_per_pass = 0;        // Distinct (layer, expert), mean.
  int repeats = 1;  // Repeats run; this is their median by tokens/s.
  double tokens_per_s_min = 0;  // The slowest and fastest repeat.
  double tokens_per_s_max = 0;
};

struct ModelReport {
  std::string name;  // Directory basename.
  std::string dir;
  std::string model_type;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, vocab = 0;
  int64_t experts = 0, top_k = 0, expert_ffn = 0, shared_expert_ffn = 0;
  uint64_t non_expert_bytes = 0;
  uint64_t expert_bytes = 0;  // All experts, unpadded.
  double load_seconds = 0;
  std::vector<Measurement> results;
};

// Loads `model_dir` (experts packed in memory) and measures every phase of
// `options` on `backend`.
absl::StatusOr<ModelReport> BenchModel(const std::string& model_dir,
                                       const BenchOptions& options,
                                       kernels::cpu::CpuBackend* backend);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_MODEL_BENCH_H_
