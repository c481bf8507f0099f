// utility: MoE-SpAc (seeds 004 §3.2-§3.4, Appendices C-D). Every expert
// carries a discrete utility level in 0..K, estimated from how often the
// target routes to it per verification step; a per-layer threshold tau
// splits each layer's experts into hot (level >= tau: moved to the fast
// tier, prefetched) and cold (level < tau: computed in place on the slow
// tier); prefetch and eviction both follow the utility.
//
// Speculative utility estimator (§3.2, Alg. 1), per (layer, expert):
//   f_t       the step's activation frequency: tokens routed to the expert
//             in step t (OnRoute's token_counts), normalised to a window of
//             gamma + 1 tokens and rounded: f = round(count * (gamma + 1) /
//             tokens), tokens = OnRoute's n (or ceil(sum(counts) / top-k)
//             when n is 0). For one sequence verifying gamma drafts this is
//             the seed's raw count; a prefill chunk or a batch lands on the
//             same scale instead of blowing the boundaries up.
//   Delta     f_t - f_{t-1} (f_0 = 0).
//   level     +1 (at most K) when Delta >= up, -1 (at least 0) when
//             -Delta >= down, else unchanged: one level per step (inertia).
//   up, down  start at max(1, floor(gamma / 2)); Delta > 0 moves
//             up <- floor((1 - lambda) * up + lambda * Delta), Delta < 0
//             moves down likewise with |Delta| (adaptive boundary
//             calibration). With integer f they never drop below 1.
// The estimator is committed at OnStepEnd, for the layers routed that step
// (ComputeInPlace'd experts included: they were routed), from the target's
// routing: what the seed observes at verification.
// The drafter's lookahead is a forecast of the next step's routing: at
// each COMPLETE OnLookahead (positions == planned_positions) every expert
// of the layers the window covers gets a provisional level: Alg. 1's
// transition applied to Delta = p - f_{t-1}, where p = round(positions
// predicting it * (gamma + 1) / positions), without touching the
// boundaries. The provisional levels are the policy's view (tau, cold
// decisions, prefetch, eviction) until the next OnStepEnd commits the real
// routing and drops them. Partial windows are ignored. (The seed drafts
// with a dense model and has no draft routing; this is the one place the
// drafter's router feeds the policy. The lookahead counts positions, not
// sequences: for a batch its p is larger than the normalised f.)
//
// Threshold tau per layer (§3.3, App. C), recomputed at every OnStepEnd
// and complete OnLookahead from the view's levels. For tau in 1..K:
//   hot(tau)    the layer's experts at level >= tau; n(tau) those of them
//               not resident (what would have to move).
//   R[u]        expected routed experts per step at level u: an EMA
//               (weight lambda on the new value; the first step sets it) of
//               the layer's routed experts whose view level was u at
//               OnRoute. The seed's r_c / r_g, learned online.
//   T_cpu       inplace_compute_seconds * sum_{u < tau} R[u]
//   T_gpu       fast_compute_seconds * sum_{u >= tau} R[u]
//   objective   |T_cpu - T_gpu| (Eq. 9)
//   I/O (10)    link_seconds * n(tau) <= max(T_cpu, T_gpu) + draft, with
//               draft = draft_seconds_per_position * planned positions of
//               the last complete lookahead / num_layers (0 without one)
//   memory (11) hot(tau) <= capacity_slots - (resident experts of the other
//               layers at or above their layer's current tau): the layer's
//               hot set fits beside the other layers' resident hot experts.
// tau = the feasible tau with the smallest objective, ties to the smaller
// tau; K when none is feasible (the seed's fallback). Every tau in 1..K is
// evaluated (K <= 16: as cheap as the seed's root-and-boundaries shortcut,
// and exact without relying on convexity). Costs are per expert acquire
// (what the residency measures, expert_costs()), where the seed has per
// token-activation CPU cost and per expert GPU cost.
// Modes, from the control:
//   balance     all three expert_costs() measured (> 0) and in-place not
//               refused: the optimisation above.
//   bootstrap   some cost not measured yet (0): tau = initial_tau for every
//               layer, so cold experts run in place and get measured.
//   no in-place ComputeInPlace refused once (a device fast tier; sticky):
//               nothing is computed in place any more; tau only selects
//               what is prefetched: the smallest tau meeting memory and
//               I/O, with T_total = fast_compute_seconds * sum_u R[u] (the
//               whole layer on the fast tier), the I/O constraint off while
//               link_seconds is not measured.
//
// Cold experts (§3.3): in OnRoute(l), every routed expert that is not
// resident and whose view level is below tau(l) is passed to
// control->ComputeInPlace (except in "no in-place"); the others are
// demand-loaded by the engine.
//
// Prefetch (§3.4, App. D), at every complete OnLookahead (after tau: while
// the draft runs, as the seed prefetches) and at OnStepBegin of a step that
// no complete lookahead preceded (no drafter, or k = 0): the candidates are the
// non-resident experts at level >= their layer's tau, ordered by level (K
// first), then layer (execution order, the seed's FIFO within a level), then
// expert. They are taken in that order while a slot can be had for them without
// displacing an equal or hotter expert: a free slot (capacity_slots -
// resident), else the coldest resident expert not yet counted as displaced, if
// its level is strictly below the candidate's (so marginal experts do not
// thrash); the first candidate that fails ends the list. Each level's chosen
// experts go as ONE PrefetchBatch with priority = level, levels
// descending. A prefetched expert counts as used for the LRU tie-break.
// At OnStepEnd this policy's prefetches still queued (the step did not
// need them) are cancelled (CancelPrefetch); the next plan decides again.
// Nothing is prefetched at OnStepEnd, so no load outlives the last step.
// Eviction (ChooseVictims): lowest view level first; ties least recently
// used (internal::RecencyTracker: OnAccess and prefetches stamp), then
// (layer, expert). Deviations: the seed's evictor also drops resident
// experts whose level fell below tau right away, and App. D sets an expert
// to 0 after its compute; here eviction happens only when a slot is
// needed, so an expert stays a free hit until something hotter needs its
// slot (the residency already protects in-use experts: the seed's "frozen"
// K + 1).
//
// Gauges (SetPolicyGauge, at OnStepEnd): moeserve_utility_cold_share (the
// step's routed experts computed in place / routed experts) and
// moeserve_utility_mean_tau (tau averaged over layers).
//
// Speculation defaults (Speculation, registered as the policy's traits):
// the drafter is the `drafter` config ("external": the seed drafts with a
// separate dense model; needs EngineSpec::draft_model_dir /
// --draft_model_dir); k is gamma (the seed's fixed draft length 8).
// ChooseDraftLength records draft_seconds_per_position and returns -1.
//
// Config keys:
//   gamma              draft length and the estimator's window (gamma + 1
//                      tokens), in [1, 16]. Default: 8.
//   max_utility        K, the top level, in [1, gamma] (the seed: K <=
//                      gamma). Default: min(4, gamma).
//   forgetting_factor  lambda, in (0, 1]. Default: 0.1.
//   initial_tau        tau while costs are not measured, in [1, K].
//                      Default: 1.
//   drafter            the default drafter (engine/spec_decode/ registry name).
//                      Default: external.
// Test config (PolicyTestConfig): drafter=int4, gamma=2, max_utility=2
// (no draft model dir in the invariance tests; a short k keeps them fast).
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h). The accessors are for the same thread.
#ifndef MOESERVE_POLICIES_UTILITY_H_
#define MOESERVE_POLICIES_UTILITY_H_

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

class UtilityPolicy : public engine::OffloadPolicy {
 public:
  struct Options {
    int gamma = 8;
    int max_utility = 4;             // K
    double forgetting_factor = 0.1;  // lambda
    int initial_tau = 1;
  };

  // One expert's estimator state (Alg. 1).
  struct Estimate {
    int level = 0;
    int up = 0;    // boundary to move up
    int down = 0;  // boundary to move down
    int last_frequency = 0;
  };
  // The level Alg. 1's transition gives for frequency `f` (no state change).
  static int NextLevel(const Estimate& e, int f, int max_utility);
  // Alg. 1 for one step: level and boundaries from frequency `f`.
  static void Observe(Estimate* e, int f, int max_utility, double lambda);

  // One layer's threshold problem (see the header comment).
  struct TauProblem {
    int max_utility = 0;            // K
    std::vector<int> experts_at;    // [u], u in 0..K
    std::vector<int> missing_at;    // [u]: of those, not resident
    std::vector<double> routed_at;  // [u]: R[u]
    int64_t slots_left = 0;         // capacity - others' resident hot
    double link_seconds = 0;
    double fast_seconds = 0;
    double inplace_seconds = 0;
    double draft_seconds = 0;  // draft time per layer
    bool balance = true;       // false: the "no in-place" mode
  };
  static int SolveTau(const TauProblem& p);

  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);
  // The speculation this policy brings under `config` (its registered
  // PolicyTraits::speculation): the `drafter` key's drafter, k = gamma.
  static absl::StatusOr<engine::SpeculationDefaults> Speculation(
      const engine::PolicyConfig& config);

  explicit UtilityPolicy(Options options) : options_(std::move(options)) {}

  std::string_view name() const override { return "utility"; }
  int ChooseDraftLength(const engine::DraftLengthQuery& q) override;

  void Attach(engine::ResidencyControl* control) override;
  void OnLookahead(const engine::ExpertLookahead& lookahead) override;
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> token_counts, const float* hidden,
               int64_t n) override;
  void OnStepBegin(const engine::StepInfo& info) override;
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void OnStepEnd(const engine::StepStats& stats) override;
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override;

  const Options& options() const { return options_; }
  // The view's level (provisional after a complete lookahead).
  int utility(engine::ExpertId id) const { return view_[Index(id)]; }
  const Estimate& estimate(engine::ExpertId id) const {
    return estimates_[Index(id)];
  }
  int tau(int layer) const { return tau_[layer]; }
  // False once ComputeInPlace was refused.
  bool inplace_available() const { return !inplace_refused_; }

 private:
  size_t Index(engine::ExpertId id) const {
    return static_cast<size_t>(id.layer) * num_experts_ + id.expert;
  }
  void UpdateTaus();
  void PlanPrefetch();

  Options options_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  int num_layers_ = 0;
  int num_experts_ = 0;
  std::vector<Estimate> estimates_;  // [layer * num_experts + expert]
  std::vector<int> view_;            // levels the decisions use
  std::vector<int> tau_;             // [layer]
  std::vector<double> routed_at_;    // [layer * (K + 1) + u]
  std::vector<bool> routed_seen_;    // [layer]: R has a first value
  // This step's routing: raw counts and tokens per layer.
  std::vector<int64_t> step_counts_;
  std::vector<int64_t> step_tokens_;  // 0: layer not routed this step
  int64_t step_routed_ = 0;
  int64_t step_inplace_ = 0;
  bool inplace_refused_ = false;
  bool lookahead_this_step_ = false;      // a complete one since OnStepEnd
  std::vector<engine::ExpertId> issued_;  // prefetched since OnStepEnd
  double draft_seconds_ = 0;  // per position, from ChooseDraftLength
  int draft_positions_ = 0;   // of the last complete lookahead
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_UTILITY_H_
