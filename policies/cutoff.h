// cutoff: SP-MoE (seeds 003 §4.2). The draft is a separate, smaller model
// (the "external" drafter, engine/spec_decode/external_drafter.h) whose
// attention output at each draft layer is fed to the target's routers (the
// seed's cross-model predictor, §4.2.1); what they choose per draft position
// and layer reaches this policy as an ExpertLookahead, after EACH draft
// position (a growing window) and once more when the draft is complete.
// This policy turns it into prefetches bounded by the cutoff layer L.
//
// Prefetch (Alg. 1, §4.2.2 batched I/O): at every OnLookahead, per layer
// l = 0..L in ascending order, the experts any known position predicts for
// l that are not resident (IsResident: ready or loading) go to the link as
// ONE ResidencyControl::PrefetchBatch(ids ascending, prefetch_priority);
// a layer with nothing missing issues no batch. Layers > L get nothing.
//
// Cutoff layer L (§4.2.1.2): the largest layer in [0, cap] such that, with
// missing(l) = the layer's window experts not resident and
// N(L) = sum_{l <= L} missing(l),
//   (a) memory: N(L) <= capacity_slots - needed, where needed = the window's
//       experts (any layer) that are already resident: what the coming
//       verification needs stays, the prefetches use the free and the
//       evictable-not-needed slots (pins and in-use slots are not known to
//       the policy and are ignored);
//   (b) time: N(L) * link_seconds_per_expert <=
//       draft_seconds_per_position * (planned_positions - positions known),
//       the draft compute still to come that hides the I/O (a complete
//       window has none left: only layers with nothing missing qualify).
// cap = min(num_layers - 1, max_cutoff_layer). N is non-decreasing in L, so
// L is the last layer before a constraint breaks; -1 when layer 0 already
// breaks one (nothing is prefetched). Until both timings are known (> 0)
// the time constraint is off: L = cap, bounded by memory only.
// Each OnLookahead exports L as the gauge moeserve_spec_cutoff_layer
// (ResidencyControl::SetPolicyGauge, labelled with the engine).
// Timings are measured online: ChooseDraftLength records the query's
// draft_seconds_per_position and link_seconds_per_expert (each when > 0)
// and returns -1 (this policy does not choose k).
//
// Eviction: LRU for everything (internal::RecencyTracker). OnAccess stamps
// an expert; so does each OnLookahead for the window's resident experts and
// for every expert it prefetches (in ascending layer order, just before the
// batch), so a prediction counts as a use and the batch's victims are the
// least recently used experts outside the window first.
//
// Speculation defaults (Speculation, registered as the policy's traits):
// the drafter is the `drafter` config ("external": needs
// EngineSpec::draft_model_dir / --draft_model_dir, which names the draft
// model; the engine fails to build without it); k is 0 (adaptive: the
// engine's own k).
//
// Config keys:
//   max_cutoff_layer   the largest L allowed, >= 0. Default: all layers.
//   prefetch_priority  the priority of the prefetch batches (higher starts
//                      first among queued prefetches), in [-1000, 1000].
//                      Default: 1.
//   drafter            the default drafter (engine/spec_decode/ registry name).
//                      Default: external.
// Test config (PolicyTestConfig): drafter=int4 (the invariance tests build
// engines without a draft_model_dir; the int4 drafter fills the same
// lookahead from the target's own quantized experts).
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h). The accessors are for the same thread.
#ifndef MOESERVE_POLICIES_CUTOFF_H_
#define MOESERVE_POLICIES_CUTOFF_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/recency.h"

namespace moeserve::policies {

class CutoffPolicy : public engine::OffloadPolicy {
 public:
  struct Options {
    int max_cutoff_layer = -1;  // -1: all layers
    int prefetch_priority = 1;
  };

  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);
  // The speculation this policy brings under `config` (its registered
  // PolicyTraits::speculation): the `drafter` key's drafter, k 0.
  static absl::StatusOr<engine::SpeculationDefaults> Speculation(
      const engine::PolicyConfig& config);

  explicit CutoffPolicy(Options options) : options_(std::move(options)) {}

  std::string_view name() const override { return "cutoff"; }

  void Attach(engine::ResidencyControl* control) override;
  void OnLookahead(const engine::ExpertLookahead& lookahead) override;
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override {
    recency_.ChooseLeastRecent(candidates, count, victims);
  }
  // Records the timings (see the header comment); returns -1.
  int ChooseDraftLength(const engine::DraftLengthQuery& q) override;

  const Options& options() const { return options_; }
  // L of the last OnLookahead; -1 before the first one (or when it
  // prefetched no layer).
  int cutoff_layer() const { return cutoff_layer_; }
  // The timings recorded so far (0: not measured yet).
  double draft_seconds_per_position() const { return draft_seconds_; }
  double link_seconds_per_expert() const { return link_seconds_; }

 private:
  Options options_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  int num_layers_ = 0;
  int num_experts_ = 0;
  int cutoff_layer_ = -1;
  double draft_seconds_ = 0;
  double link_seconds_ = 0;
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_CUTOFF_H_
