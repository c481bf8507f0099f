// Drafter: the plugin seam of speculative decoding (DESIGN.md "Drafter").
//
// Each engine step, before the target's forward pass, the engine hands the
// drafter every sequence that speculates this step. The drafter proposes up
// to k draft tokens per sequence (and, for sampled requests, the processed
// distribution q each was drawn from) and, per draft position and layer, the
// experts it expects the target to route to (the lookahead, for offload
// policies that prefetch from it). The target then verifies all drafts in
// one forward pass (a verify chunk per sequence) and keeps the longest run
// the verifier accepts (engine/spec_decode/verifier.h): the output is the
// target's whatever the drafter proposes, so a drafter changes speed, never
// results.
//
// Drafters register by name (drafter_registry.h) like offload policies.
// Threading: called from the engine's step thread only, one call at a time.
#ifndef MOESERVE_ENGINE_SPEC_DECODE_DRAFTER_H_
#define MOESERVE_ENGINE_SPEC_DECODE_DRAFTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/offload/offload_policy.h"
#include "engine/sampling/sampler.h"
#include "kernels/backend.h"

namespace moeserve::engine::spec_decode {

// One sequence that speculates this step.
struct DraftInput {
  // Prompt and generated tokens; the last one is not in the KV cache yet
  // (it is position tokens.size() - 1, the first row of the verify chunk).
  std::span<const int32_t> tokens;
  // Covers positions [0, tokens.size() - 1 + k]. A drafter that runs the
  // target (or a model sharing its cache layout) may write keys and values
  // at positions >= tokens.size() - 1: the verify pass overwrites them.
  const BlockTable* blocks = nullptr;
  int k = 0;  // draft tokens wanted, >= 1
  // The request's sampler: Distribution() gives a drafter q rows processed
  // like the target's (penalties, temperature, filters). A drafter may
  // Accept() its draft tokens provisionally and must Unaccept() them before
  // returning; it must never draw from the sampler's generator.
  Sampler* sampler = nullptr;
  // Seeds the drafter's own generator for sampled drafts, so a seeded
  // request is reproducible for a fixed drafter and k.
  uint64_t draft_seed = 0;
  // Names the sequence for the engine's lifetime (a drafter with state of
  // its own per sequence, e.g. its own KV cache, keys it by this; Forget()
  // says when it may drop it).
  uint64_t sequence_id = 0;
};

// What the drafter proposes for one sequence.
struct DraftOutput {
  // At most k tokens; fewer (or none) ends this sequence's draft early.
  std::vector<int32_t> tokens;
  // For sampled requests: q[i] is the processed distribution tokens[i] was
  // drawn from. Empty: the drafter is deterministic (q a point mass on each
  // token), which speculative sampling handles exactly too.
  std::vector<TokenDistribution> q;
};

// One draft token from the draft model's `logits` row for a sequence whose
// request samples with `sampler`: the processed distribution's argmax for
// greedy requests, else a draw from it with the drafter's own `rng` (the
// distribution then goes to out->q). Appends the token to out->tokens and
// Accept()s it provisionally on `sampler`, so later draft positions see it
// in the penalties (the drafter Unaccept()s its tokens before returning).
int32_t ChooseDraftToken(Sampler& sampler, std::span<float> logits,
                         std::mt19937_64& rng, DraftOutput* out);

// Records `layer`'s router choices `ids` at draft `position` in
// `lookahead` (struct in engine/offload/offload_policy.h), merged and kept
// ascending.
void AddToLookahead(ExpertLookahead* lookahead, int position, int layer,
                    int num_layers, std::span<const int> ids);

class Drafter {
 public:
  virtual ~Drafter() = default;

  virtual std::string_view name() const = 0;

  // Fills outputs->at(i) for inputs[i] (outputs is resized to
  // inputs.size()) and `lookahead` (cleared first) for this step. An error
  // fails the step's speculation only: the engine then decodes normally.
  virtual absl::Status Propose(std::span<const DraftInput> inputs,
                               std::vector<DraftOutput>* outputs,
                               ExpertLookahead* lookahead) = 0;

  // The sequence finished (or was cancelled): state kept for it may go.
  virtual void Forget(uint64_t sequence_id) { (void)sequence_id; }

  // Called by a drafter that fills the lookahead position by position after
  // each position but the last (a growing window, planned_positions set),
  // so an offload policy can prefetch while the rest is drafted; the engine
  // delivers the complete window after Propose. The engine sets it.
  using LookaheadListener = std::function<void(const ExpertLookahead&)>;
  void SetLookaheadListener(LookaheadListener listener) {
    listener_ = std::move(listener);
  }

 protected:
  void NotifyLookahead(const ExpertLookahead& lookahead) const {
    if (listener_) listener_(lookahead);
  }

 private:
  LookaheadListener listener_;
};

// What a drafter may use of the engine it drafts for (all borrowed; they
// outlive the drafter).
struct DrafterContext {
  const ModelWeights* weights = nullptr;
  // The target's forward pass (a self drafter runs it with a routing filter
  // and its own expert provider), and its KV cache.
  MoeModel* target = nullptr;
  KvCache* kv = nullptr;
  // Draft-time expert access that is never counted as the target's hits or
  // misses and never moves bytes, and which experts are ready in the fast
  // tier. Both null when every expert is resident (no offload).
  ExpertProvider* draft_experts = nullptr;
  const ResidencyControl* residency = nullptr;
  // The engine's offload policy (null without offload): a policy may steer
  // its drafter (e.g. self_spec's pinned experts).
  OffloadPolicy* policy = nullptr;
  // The compute backend (a drafter with weights of its own puts them in
  // its memory).
  kernels::Backend* backend = nullptr;
  // A separate draft model's directory (EngineSpec::draft_model_dir; the
  // external drafter), or empty.
  std::string draft_model_dir;
};

using DrafterFactory = std::function<absl::StatusOr<std::unique_ptr<Drafter>>(
    const DrafterContext& context)>;

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_DRAFTER_H_
