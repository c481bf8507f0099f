// SelfDrafter ("self", seed 000 §III-B, SpecMoE): the target model itself,
// restricted to its draft experts: those the offload policy names
// (OffloadPolicy::IsDraftExpert: self_spec's pinned hot experts in the
// paper's mode, every expert under other policies) that are also ready in
// the fast tier when each layer of each draft position runs (held in use
// while each is computed, so none is evicted under the draft; asked per
// layer because the policy may prefetch, and so evict, between draft
// positions). A token the router sends to any other expert goes to the draft
// expert of that layer nearest to it by L2 distance between the experts'
// weights (ExpertAffinity); a layer with no draft expert is skipped. So
// drafting moves no bytes over the link: with the self_spec policy pinning
// each layer's temporally hottest experts, the draft is a small MoE made of
// the experts the target uses most.
//
// Drafting itself (positions, sampling, lookahead) is ModelDrafter's; the
// lookahead is what the target's router chose before remapping.
//
// Owns its affinity table; borrows everything in DrafterContext.
#ifndef MOESERVE_ENGINE_SPEC_DECODE_SELF_DRAFTER_H_
#define MOESERVE_ENGINE_SPEC_DECODE_SELF_DRAFTER_H_

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/spec_decode/expert_affinity.h"
#include "engine/spec_decode/model_drafter.h"

namespace moeserve::engine::spec_decode {

class SelfDrafter final : public ModelDrafter {
 public:
  static absl::StatusOr<std::unique_ptr<Drafter>> Create(
      const DrafterContext& context);

  std::string_view name() const override { return "self"; }

 private:
  SelfDrafter(const DrafterContext& context, ExpertAffinity affinity);
  // Sizes the per-layer tables.
  void BeginDraft() override;
  // Which experts of `layer` the draft may use (ready now and draft experts),
  // and where every expert of it maps to.
  void RefreshLayer(int layer);
  void Remap(int layer, int64_t n, int k, std::span<int32_t> ids,
             std::span<float> weights) override;

  const ExpertAffinity affinity_;
  std::vector<std::vector<int>> usable_;  // [layer] ascending
  std::vector<int32_t> remap_;            // [layer * E + e] -> usable or -1
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_SELF_DRAFTER_H_
