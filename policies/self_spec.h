// self_spec: SpecMoE (seeds 000 §III-B, "Self-Assisted Speculative
// Decoding"). The draft model is the target itself restricted to N "draft
// experts" per MoE layer that stay pinned in the fast tier; the drafter
// ("self", engine/spec_decode/) routes each token among them, remapping a
// non-draft choice to the nearest draft expert by the affinity table
// (engine/spec_decode/expert_affinity.h). This policy owns the fast-tier side:
// which experts are pinned as draft experts (IsDraftExpert, what the drafter
// asks), and the eviction order of the rest.
//
// Draft experts (key draft_from):
//   pinned  the paper's mode (default): the draft uses only the pinned
//           draft experts, so its size is N per layer whatever the cache
//           holds, and a layer without pins (before the first verification
//           ends) is skipped in the draft.
//   ready   every expert ready in the fast tier (the pins and whatever the
//           LRU cache holds): a larger draft when the cache is larger than
//           the pins, so more acceptance for more draft compute; what this
//           policy did before the paper's mode was built.
//
// HotTemporal replacement (§III-B "Expert replacement policy", Table II):
// at every OnStepEnd (the end of a verification) each (layer, expert) gets
//   hotness = hotness * hotness_decay + tokens routed to it this step
// (StepStats::activations), a short exponentially decayed memory so the
// pins follow shifting hotness (hotness_decay = 0: the last step only, as
// in the seed). Then, per layer, the draft experts become the first
// pins_per_layer() experts of that layer ranked by hotness (descending,
// ties by lower id, hotness > 0 only) that are pinned already or resident
// (IsResident: ready or loading). A ranked expert that is not resident is
// skipped and the next one considered: pinning never causes a transfer —
// as in the seed, new draft experts are the ones the verification just
// brought in. Pins that drop out are Unpinned first, then the newcomers
// are Pinned (ascending ids). A Pin that fails leaves the expert unpinned.
//
// Pin budget: total pins <= capacity_slots - max_union, where max_union is
// the largest number of distinct experts one layer routed to in one step
// seen so far (OnRoute's experts.size(); at least experts_per_token), so
// that a layer's demand loads always find slots beside the pins.
//   pins_per_layer() = min(draft_experts, num_experts,
//                          max(0, capacity_slots - max_union) / num_layers)
// When OnRoute raises max_union, the pins over the new per-layer allowance
// (the coldest of each layer) are Unpinned at once, before that layer's
// demand loads.
//
// Everything else is cached as by `lru` (internal::RecencyTracker: OnAccess
// stamps; ChooseVictims least recently used first, never-accessed first,
// ties by (layer, expert)); pinned experts are never candidates.
//
// Speculation settings, for the engine builder: this policy only stores
// them. Speculation (registered as the policy's traits) gives drafter
// "self" and k = num_speculative_tokens (0 = adaptive); the builder uses
// them when the engine spec names neither (DESIGN.md: "a speculative policy
// brings its own default").
//
// Config keys:
//   draft_experts           N, draft experts per layer, in [0, 1 << 20].
//                           Default: min(num_experts, 2 * experts_per_token).
//                           Why not max(top_k, ceil(E / 8)): the seed's
//                           study (Table III, NLLB-MoE, top-2, 128 experts)
//                           has the best throughput at N = 4 = 2 * top_k;
//                           N = 16 = E / 8 was the second worst (more
//                           acceptance, slower drafting). N = top_k leaves
//                           the draft router no choice at all (Fig. 8a),
//                           which hurts models with little hotness
//                           (Mixtral: max(2, 1) = 2 would pin exactly 2 of
//                           8). For fine-grained models the two agree
//                           (128 experts, top-8: 16 either way).
//   num_speculative_tokens  k, draft tokens per step, in [0, 16]; 0 =
//                           adaptive. Default: 4.
//   hotness_decay           the decay above, in [0, 1). Default: 0.5.
//   draft_from              pinned | ready, see above. Default: pinned.
// Test config (PolicyTestConfig): hotness_decay=0 (the pins move with each
// step, so tests that run every policy for a few steps see pins replaced).
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h). The accessors are for the same thread (or
// before the engine starts).
#ifndef MOESERVE_POLICIES_SELF_SPEC_H_
#define MOESERVE_POLICIES_SELF_SPEC_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/recency.h"

namespace moeserve::policies {

class SelfSpecPolicy : public engine::OffloadPolicy {
 public:
  enum class DraftFrom { kPinned, kReady };
  struct Options {
    DraftFrom draft_from = DraftFrom::kPinned;
    int draft_experts = -1;  // -1: the model's default (see above)
    int num_speculative_tokens = 4;
    double hotness_decay = 0.5;
  };

  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);
  // The speculation this policy brings under `config` (its registered
  // PolicyTraits::speculation): the drafter it is designed for, "self", and
  // the `num_speculative_tokens` key's k.
  static absl::StatusOr<engine::SpeculationDefaults> Speculation(
      const engine::PolicyConfig& config);

  explicit SelfSpecPolicy(Options options) : options_(options) {}

  std::string_view name() const override { return "self_spec"; }
  void Attach(engine::ResidencyControl* control) override;
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> token_counts, const float* hidden,
               int64_t n) override;
  // draft_from=pinned: `id` is one of its layer's pins; ready: always.
  bool IsDraftExpert(engine::ExpertId id) const override;
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void OnStepEnd(const engine::StepStats& stats) override;
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override {
    recency_.ChooseLeastRecent(candidates, count, victims);
  }

  // k for the engine builder: draft tokens per step; 0 = adaptive.
  int num_speculative_tokens() const { return options_.num_speculative_tokens; }

  // N after Attach (the configured value or the model's default), before
  // the pin budget; the configured value (-1: default) before Attach.
  int draft_experts() const { return draft_experts_; }
  // N reduced to the pin budget (see the header comment); 0 before Attach.
  int pins_per_layer() const;
  // capacity_slots - max_union, at least 0; 0 before Attach.
  int pin_budget() const;
  int max_union() const { return max_union_; }
  // The pinned draft experts of `layer`, ascending: what the self drafter
  // routes among in the paper's mode. Empty before the first OnStepEnd, for a
  // layer out of range, or with no pin budget.
  std::vector<int> DraftExperts(int layer) const;
  // Pins held in all layers.
  int total_pins() const { return total_pins_; }
  // The decayed activation count of `id` (0 when out of range).
  double Hotness(engine::ExpertId id) const;

 private:
  size_t Index(int layer, int expert) const {
    return static_cast<size_t>(layer) * num_experts_ + expert;
  }
  // Experts of `layer` with hotness > 0, hottest first, ties by lower id.
  std::vector<int> Ranked(int layer) const;
  // Unpins the coldest pins of every layer over pins_per_layer().
  void ShrinkToBudget();

  Options options_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  int num_layers_ = 0;
  int num_experts_ = 0;
  int draft_experts_ = -1;
  int max_union_ = 0;
  int total_pins_ = 0;
  std::vector<double> hotness_;           // [layer * E + expert]
  std::vector<std::vector<int>> pinned_;  // per layer, ascending
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_SELF_SPEC_H_
