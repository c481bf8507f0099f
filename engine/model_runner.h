// ModelRunner: runs one engine step's plan on the model (vLLM v1's model
// runner): asks the drafter for the granted draft tokens, builds the batch
// (prefill chunks, decode tokens, verify chunks of the last token plus its
// drafts), runs the target's forward pass, and turns each request's logits
// rows into tokens: a sample for a decode or a finished prefill, or the
// verification of a verify chunk (the longest accepted run of drafts plus
// one token of the target's; the rejected positions roll back in the KV
// cache). Greedy output is identical to the non-speculative engine's;
// sampled output has the same distribution. Tokens reach the request
// through the output processor.
//
// Ownership: owns the model, the drafter and the step's scratch (batch,
// logits, lookahead). Borrows the KV cache, the output processor, the
// governor (null without a drafter), the advisor (may be null) and the
// metrics.
// Thread-safety: the step thread only, except spec_stats() (any thread).
#ifndef MOESERVE_ENGINE_MODEL_RUNNER_H_
#define MOESERVE_ENGINE_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "engine/engine_metrics.h"
#include "engine/engine_stats.h"
#include "engine/kv_cache.h"
#include "engine/moe_model.h"
#include "engine/offload/speculation_advisor.h"
#include "engine/output_processor.h"
#include "engine/request_state.h"
#include "engine/spec_decode/drafter.h"
#include "engine/speculation_governor.h"

namespace moeserve::engine {

class ModelRunner {
 public:
  // `drafter` null: no speculation (then `governor` is null too).
  ModelRunner(std::string engine_name, std::unique_ptr<MoeModel> model,
              KvCache* kv, OutputProcessor* output,
              std::unique_ptr<spec_decode::Drafter> drafter,
              SpeculationGovernor* governor, SpeculationAdvisor* advisor);

  // Before the threads start (metrics are created last).
  void set_metrics(EngineMetrics* metrics) { metrics_ = metrics; }
  MoeModel* model() const { return model_.get(); }

  // Drafts for the requests granted k > 0, then runs the target over the
  // step's batch. On error every request of the step fails with it.
  absl::Status Run(std::span<RequestState* const> scheduled);
  // The outcome of Run for scheduled[i]: its tokens sampled or verified and
  // delivered (nothing for a prefill chunk that is not the last).
  Delivery Deliver(size_t i, RequestState* state);
  // Folds the step's speculation totals into spec_stats().
  void EndStep() ABSL_LOCKS_EXCLUDED(mu_);

  SpecStats spec_stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Asks the drafter for every request granted k > 0. A failed or
  // malformed proposal costs only this step's speculation.
  void Draft(std::span<RequestState* const> scheduled);
  // Verifies `state`'s drafts against the target's rows (one per draft,
  // then the bonus row), row by row so penalties and min_new_tokens see the
  // true history. Stops, EOS, length and the time limit apply token by
  // token.
  Delivery Verify(RequestState* state, const float* rows);

  const std::string engine_name_;
  std::unique_ptr<MoeModel> model_;
  KvCache* const kv_;
  OutputProcessor* const output_;
  std::unique_ptr<spec_decode::Drafter> drafter_;  // null: no speculation
  SpeculationGovernor* const governor_;
  SpeculationAdvisor* const advisor_;
  EngineMetrics* metrics_ = nullptr;

  // Per-step scratch, reused so a step allocates nothing for them.
  std::vector<SequenceChunk> batch_;
  std::vector<int64_t> first_row_;  // batch_[i]'s first logits row
  std::vector<float> logits_;
  ExpertLookahead lookahead_;
  bool verifying_ = false;
  double forward_seconds_ = 0;
  // This step's speculation totals, folded into spec_stats_ under one lock
  // at the end of the step.
  SpecStats step_spec_;

  mutable base::Mutex mu_;
  SpecStats spec_stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_MODEL_RUNNER_H_
