// lfu_static: MoE-Caching (seeds 000 §II-A "Caching frequently accessed
// experts", §IV "we keep the top 10% most frequently accessed experts on
// GPU memory").
//
// Pins the top-N% most used experts, by a profiled activation count, for the
// life of the policy; every other expert is handled as on_demand: fetched
// when routed, and evicted in OnLayerDone(layer) (Evict, in ascending order,
// on each non-pinned expert of that layer that OnLoaded reported and
// OnEvicted has not).
//   - With `profile`: the counts come from that file; the pins are made at
//     the first OnStepBegin.
//   - Without: the policy counts StepStats::activations over the first
//     `profile_steps` OnStepEnd calls (behaving on-demand meanwhile), then
//     pins at the end of that step.
// Which experts: the N with the highest count, ties by (layer, expert)
// ascending. N = floor(top_percent% of num_layers * num_experts), at least 1
// when top_percent > 0, at most capacity_slots - experts_per_token (so a
// layer's demand loads still find slots), never negative. A Pin that fails
// leaves that expert unpinned.
// ChooseVictims: lowest profiled count first, ties by (layer, expert).
//
// Config keys:
//   top_percent    percent of all experts to pin, in [0, 100]. Default: 10.
//   profile        path of a JSON profile (see WriteProfile). Default: none.
//                  A file whose shape does not match the model is ignored
//                  (logged) and the policy profiles instead.
//   profile_steps  steps to count when there is no profile, >= 1.
//                  Default: 32.
// Test config (PolicyTestConfig): profile_steps=2, so tests that run every
// policy for a few steps see the pins.
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h).
#ifndef MOESERVE_POLICIES_LFU_STATIC_H_
#define MOESERVE_POLICIES_LFU_STATIC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/loaded_experts.h"

namespace moeserve::policies {

// Activation counts per (layer, expert). File format (JSON):
//   {"num_layers": L, "num_experts": E, "counts": [[c x E] x L]}
struct ExpertProfile {
  int num_layers = 0;
  int num_experts = 0;
  std::vector<uint64_t> counts;  // [layer * num_experts + expert]

  static ExpertProfile Zeros(int num_layers, int num_experts);
  // Adds one step's activations. INVALID_ARGUMENT if the shape differs.
  absl::Status Add(const engine::StepStats& stats);
};

absl::Status WriteProfile(const std::string& path,
                          const ExpertProfile& profile);
absl::StatusOr<ExpertProfile> ReadProfile(const std::string& path);

class LfuStaticPolicy : public engine::OffloadPolicy {
 public:
  struct Options {
    double top_percent = 10;
    std::optional<ExpertProfile> profile;  // from the `profile` file
    int profile_steps = 32;
  };

  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);

  explicit LfuStaticPolicy(Options options);

  std::string_view name() const override { return "lfu_static"; }
  void Attach(engine::ResidencyControl* control) override;
  void OnStepBegin(const engine::StepInfo& info) override;
  void OnLayerDone(int layer) override;
  void OnLoaded(engine::ExpertId id) override { loaded_.OnLoaded(id); }
  void OnEvicted(engine::ExpertId id) override { loaded_.OnEvicted(id); }
  void OnStepEnd(const engine::StepStats& stats) override;
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override;

  // The experts this policy pinned (empty until the pins are made).
  const std::vector<engine::ExpertId>& pinned() const { return pinned_; }
  // The counts used to choose the pins (loaded or being profiled); what a
  // profiling run writes with WriteProfile.
  const ExpertProfile& counts() const { return counts_; }

 private:
  // How many experts to pin for the attached model.
  int PinBudget() const;
  void PinTop();
  bool IsPinned(engine::ExpertId id) const;

  Options options_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  ExpertProfile counts_;
  bool from_file_ = false;
  int steps_counted_ = 0;
  bool pins_made_ = false;
  std::vector<engine::ExpertId> pinned_;
  std::vector<bool> is_pinned_;  // [layer * num_experts + expert]
  internal::LoadedExperts loaded_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_LFU_STATIC_H_
