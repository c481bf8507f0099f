// ExternalDrafter ("external", DESIGN.md `--drafter=external`,
// `--draft_model_dir`): a separate, small draft model (e.g. models/demo-draft,
// a 3-layer qwen3_moe distilled from the demo models) with its own weights,
// forward pass and KV cache, drafting for the target.
//
// Weights: loaded from DrafterContext::draft_model_dir (InvalidArgument
// naming draft_model_dir when it is empty or does not load), refused with
// FailedPrecondition when its vocabulary differs from the target's. Every
// draft expert is resident (the draft is small) and its forward pass runs on
// the engine's backend, in that backend's memory: on a CPU backend from the
// weights' host arena (ResidentExperts); on any other device (CUDA) its
// experts are copied once into one device arena (BackendResidentExperts),
// its dense weights into device memory by its MoeModel, and its KV cache is
// allocated there too. Options::experts_in_backend_memory takes the device
// path on a CPU backend (tests). None of it is charged to the engine's
// fast-tier budget (the drafter has no fast_memory_bytes trait: the budget
// is sized before the draft model is read); it sits beside the target's
// non-expert weights and KV cache.
//
// KV cache: its own, with the target cache's block size and 5/4 of its block
// count (+1): every speculating sequence holds at most its target length
// plus k positions in it, so the draft fits wherever the target does; the
// slack covers sequences the engine preempted but has not finished yet.
// Without a target cache: 64 MiB. On exhaustion, the states of sequences not
// drafting this step are dropped (least recently used first) and, if that is
// not enough, that sequence's draft is left empty; nobody else fails.
//
// Per sequence (keyed by DraftInput::sequence_id): its draft block table and
// the tokens whose keys and values are in it. Each Propose catches up: the
// longest prefix of those tokens that still equals the sequence's tokens
// (capped at tokens.size() - 1) stays valid, positions past it are stale
// (drafts the verifier rejected); the missing tokens and the last one run as
// one chunk (one batched forward pass over every sequence; logits only for
// the last token, which gives draft 1), then one forward per further draft
// position, like ModelDrafter: greedy drafts are the argmax of the processed
// draft distribution, sampled ones a draw from it with the drafter's own
// generator (seeded by draft_seed), returned as q. Forget() releases a
// sequence's blocks.
//
// Lookahead (SP-MoE cross-model expert prediction, seed 003 §4.2.1;
// cross_model_predictor.h): at each draft layer i of D, the router input of
// each sequence's drafting row is fed to the TARGET's routers of target
// layers [i*L/D, (i+1)*L/D) (top num_experts_per_tok, the computation of
// MoeModel::PredictExperts), on the draft model's stream in the backend's
// memory, filling the lookahead for that draft position and those target
// layers once the position's pass is done. Needs the same hidden size as
// the target; otherwise the lookahead stays empty. The listener is notified
// after each draft position but the last.
//
// Host<->device waits per draft position (one batched pass over every
// drafting sequence): one per draft MoE layer (the draft model reads its own
// routing on the host, as every MoeModel pass does) and one for the logits
// of the drafting rows (the host chooses the draft tokens with the
// request's sampler and hands them to the verifier); the prediction adds
// none (its ids come back in one asynchronous copy covered by the logits'
// wait). demo-draft: 3 + 1.
//
// Borrows everything in DrafterContext; owns its weights, model, experts,
// predictor and cache. Thread-compatible (the engine calls it from its step
// thread).
#ifndef MOESERVE_ENGINE_SPEC_DECODE_EXTERNAL_DRAFTER_H_
#define MOESERVE_ENGINE_SPEC_DECODE_EXTERNAL_DRAFTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/spec_decode/cross_model_predictor.h"
#include "engine/spec_decode/drafter.h"

namespace moeserve::engine::spec_decode {

class ExternalDrafter final : public Drafter {
 public:
  // Draft cache size when the context has no target cache to scale from.
  static constexpr uint64_t kDefaultCacheBytes = 64ull << 20;

  struct Options {
    // Copy the draft's experts into the backend's memory even on a CPU
    // backend (the device path without a device: tests). A non-CPU backend
    // always does. Default: false.
    bool experts_in_backend_memory = false;
  };

  static absl::StatusOr<std::unique_ptr<ExternalDrafter>> Create(
      const DrafterContext& context, const Options& options);
  static absl::StatusOr<std::unique_ptr<ExternalDrafter>> Create(
      const DrafterContext& context) {
    return Create(context, Options());
  }
  ~ExternalDrafter() override;

  std::string_view name() const override { return "external"; }
  absl::Status Propose(std::span<const DraftInput> inputs,
                       std::vector<DraftOutput>* outputs,
                       ExpertLookahead* lookahead) override;
  void Forget(uint64_t sequence_id) override;

  // For tests and metrics.
  const ModelWeights& draft_weights() const { return *weights_; }
  const KvCache& draft_cache() const { return *cache_; }
  // Whether the draft's experts were copied into the backend's memory
  // (BackendResidentExperts) rather than read from the weights' host arena.
  bool experts_in_backend_memory() const { return experts_in_backend_memory_; }
  size_t num_sequences() const { return states_.size(); }
  // Tokens with valid draft keys and values for the sequence (0 if unknown).
  int64_t computed_tokens(uint64_t sequence_id) const;

 private:
  class HookedExperts;
  struct SequenceState {
    BlockTable blocks;
    std::vector<int32_t> computed;  // tokens at positions [0, size)
    uint64_t last_used = 0;
  };

  ExternalDrafter(const DrafterContext& context,
                  std::unique_ptr<ModelWeights> weights);

  // BeginLayer of the draft's expert provider: cross-model prediction.
  void OnDraftLayer(int layer, const float* hidden, int64_t n);
  // Grows `state` to `tokens` positions, dropping idle sequences' states
  // when the cache is full.
  absl::Status GrowFor(SequenceState* state, int64_t tokens,
                       std::span<const DraftInput> inputs);

  const DrafterContext context_;
  const std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<HookedExperts> experts_;
  std::unique_ptr<MoeModel> model_;
  // Null without a target of the draft's hidden size. After model_: it is
  // destroyed first, while model_'s stream still exists.
  std::unique_ptr<CrossModelPredictor> predictor_;
  std::unique_ptr<KvCache> cache_;
  std::map<uint64_t, SequenceState> states_;
  uint64_t clock_ = 0;
  bool experts_in_backend_memory_ = false;

  // Of the Propose() in progress.
  std::vector<int64_t> predict_rows_;  // rows of the batch to predict from
  std::vector<float> logits_;
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_EXTERNAL_DRAFTER_H_
