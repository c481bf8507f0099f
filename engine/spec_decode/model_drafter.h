// ModelDrafter: the common part of drafters that draft by running the
// target model's forward pass with other experts: the self drafter (the
// target's own experts, restricted to those resident in the fast tier) and
// the int4 drafter (an int4 copy of every expert). Both share the target's
// non-expert weights and its KV cache (keys and values at the draft
// positions are written by the draft and overwritten by the verify pass).
//
// Per draft position it runs one forward pass over every speculating
// sequence (one token each), with the subclass's ExpertProvider and a
// routing filter that records the router's choices in the lookahead (the
// experts the target is expected to need) and then lets the subclass remap
// them. After each position it notifies the lookahead listener, so a policy
// can prefetch while the rest of the window is drafted.
//
// Draft tokens: for greedy requests the argmax of the processed draft
// distribution (penalties included, with the drafts so far in the history);
// for sampled requests a draw from it with the drafter's own generator,
// returned as q.
#ifndef MOESERVE_ENGINE_SPEC_DECODE_MODEL_DRAFTER_H_
#define MOESERVE_ENGINE_SPEC_DECODE_MODEL_DRAFTER_H_

#include <span>
#include <vector>

#include "engine/spec_decode/drafter.h"

namespace moeserve::engine::spec_decode {

class ModelDrafter : public Drafter, private RoutingFilter {
 public:
  absl::Status Propose(std::span<const DraftInput> inputs,
                       std::vector<DraftOutput>* outputs,
                       ExpertLookahead* lookahead) final;

 protected:
  // `experts`: where the draft's experts come from (borrowed; outlives the
  // drafter). Null: the target's own provider.
  ModelDrafter(const DrafterContext& context, ExpertProvider* experts);

  const DrafterContext& context() const { return context_; }
  int num_layers() const { return num_layers_; }
  int num_experts() const { return num_experts_; }

  // Once per Propose, before the first draft forward.
  virtual void BeginDraft() {}
  // Rewrites one layer's routing ([n, k] ids and weights) after it was
  // recorded in the lookahead; MoeModel's RoutingFilter contract (-1 drops
  // a choice). Default: unchanged.
  virtual void Remap(int layer, int64_t n, int k, std::span<int32_t> ids,
                     std::span<float> weights) {
    (void)layer, (void)n, (void)k, (void)ids, (void)weights;
  }

 private:
  void Filter(int layer, int64_t n, int k, std::span<int32_t> ids,
              std::span<float> weights) override;

  const DrafterContext context_;
  ExpertProvider* const experts_;
  const int num_layers_;
  const int num_experts_;
  // Of the Propose() in progress.
  ExpertLookahead* lookahead_ = nullptr;
  int position_ = 0;
  std::vector<float> logits_;
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_MODEL_DRAFTER_H_
