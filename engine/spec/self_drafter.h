// SelfDrafter ("self", seed 000 §III-B, SpecMoE): the target model itself,
// restricted to the experts that are ready in the fast tier when the draft
// starts. A token the router sends to a non-resident expert goes to the
// resident expert of that layer nearest to it by L2 distance between the
// experts' weights (ExpertAffinity); a layer with no resident expert is
// skipped. So drafting moves no bytes over the link: with the self_spec
// policy pinning each layer's temporally hottest experts, the draft is a
// small MoE made of the experts the target uses most.
//
// The draft runs the target's forward pass one token per sequence per draft
// position, writing keys and values into the target's own KV cache at the
// draft positions (the verify pass overwrites them). Its lookahead is what
// the target's router chose before remapping, per draft position and layer.
//
// Owns its affinity table; borrows everything in DrafterContext.
#ifndef MOESERVE_ENGINE_SPEC_SELF_DRAFTER_H_
#define MOESERVE_ENGINE_SPEC_SELF_DRAFTER_H_

#include <memory>
#include <random>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/spec/drafter.h"
#include "engine/spec/expert_affinity.h"

namespace moeserve::engine::spec {

class SelfDrafter final : public Drafter, private RoutingFilter {
 public:
  static absl::StatusOr<std::unique_ptr<Drafter>> Create(
      const DrafterContext& context);

  std::string_view name() const override { return "self"; }
  absl::Status Propose(std::span<const DraftInput> inputs,
                       std::vector<DraftOutput>* outputs,
                       ExpertLookahead* lookahead) override;

 private:
  SelfDrafter(const DrafterContext& context, ExpertAffinity affinity);
  // RoutingFilter: records the router's choices in the lookahead, then
  // remaps each to a usable expert (or drops it).
  void Filter(int layer, int64_t n, int k, std::span<int32_t> ids,
              std::span<float> weights) override;
  // Which experts of each layer the draft may use (ready now).
  void SnapshotUsable();

  const DrafterContext context_;
  const ExpertAffinity affinity_;
  const int num_layers_;
  const int num_experts_;
  std::vector<std::vector<int>> usable_;  // [layer] ascending
  std::vector<int32_t> remap_;            // [layer * E + e] -> usable or -1
  // Of the Propose() in progress.
  ExpertLookahead* lookahead_ = nullptr;
  int position_ = 0;
  std::vector<float> logits_;
};

}  // namespace moeserve::engine::spec

#endif  // MOESERVE_ENGINE_SPEC_SELF_DRAFTER_H_
