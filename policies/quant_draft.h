// quant_draft: MoE-SpeQ (seeds 001 §3.2-§3.3). The draft is an int4 copy of
// the target (the "int4" drafter, engine/spec_decode/); its router's choices
// per draft position and layer reach this policy as an ExpertLookahead (the
// seed's Expert Lookahead Buffer, ELB), which drives prefetch, eviction and
// the draft length.
//
// Expert Lookahead Buffer: OnLookahead comes after each draft position (a
// growing window, experts.size() < planned_positions) and once more when the
// draft is complete. The window is kept until OnStepEnd of the step that
// verifies it (the verification is the step right after the drafts), then
// dropped: a step without a lookahead sees no window.
//
// Three-phase prefetch (§3.3.2), decided at each OnLookahead from
// n = experts.size() and k = planned_positions (0: treated as n, complete):
//   phase I    n < phase2_start * k: nothing is prefetched; the cache serves
//              what it already has (locality-aware priming).
//   phase II   n < k: every expert of the known positions that is not
//              resident is prefetched at kLowPriority.
//   phase III  n >= k (window complete): everything still missing at
//              kHighPriority; an expert this policy prefetched at
//              kLowPriority that is still queued (resident, not ready) is
//              cancelled and queued again at kHighPriority, so the whole
//              window loads in use order.
// Use order (both phases): a verification runs all k + 1 rows through the
// target in one pass, layer by layer, so an expert of layer l is next used
// at layer l whatever its position: ascending layer, then the earliest
// position predicting it, then expert id. Prefetches go out in that order
// and stop once the window's experts resident or prefetched fill
// capacity_slots (a further one could only displace a window expert needed
// sooner), or at the first Prefetch the residency refuses (no victim).
//
// Eviction (ChooseVictims), Belady over the known window: a candidate is "in
// the window" when the window predicts it at a layer the current step has
// not routed yet (before the step's first OnRoute: any layer; after
// OnRoute(c): layers > c; so the current step's remaining layers are what
// the window covers). Candidates not in the window go first; then those
// whose next use is farthest: the highest layer, then the latest earliest
// position. Ties (all candidates outside the window among them) go least
// recently used first (internal::RecencyTracker, stamped by OnAccess), then
// by (layer, expert). Without a window this is `lru`.
// (The brief that specified this policy ordered next uses by position, then
// layer; the verification pass is layer-major, which is the order the fast
// tier actually sees, so layer comes first and position breaks ties.)
//
// At OnStepEnd, prefetches this policy issued that are still queued (the
// verification did not need them) are cancelled (CancelPrefetch).
//
// Speculative governor (§3.2, the amortization roofline): ChooseDraftLength
// returns the k in [0, min(max_k, k_SLO, acceptance.size())] that maximises
// eq. (2),
//   Theta(k) = E[tokens](k) / T_cycle(k)
//   E[tokens](k) = 1 + sum_{i=1..k} prod_{j<=i} p_j   (p = acceptance)
// (the seed's k_accept(k) plus the token the verification emits after the
// last accepted draft, which plain decoding emits too: with it k = 0 scores
// 1 / T_cycle(0) instead of 0, so "do not speculate" stays comparable),
// with the cycle time of eq. (3), the draft overlapping the first fetch:
//   T_cycle(k) = max(T_draft(k), T_pcie,init) + T_pcie,new(k)
//                + T_verify(k + 1)
//   T_draft(k)      = k * draft_seconds_per_position (measured per
//                     position; the seed's T_d,base is not separable from
//                     it and is taken as 0)
//   T_pcie,init     = link * min(E_new(k), 1): the first of the window's
//                     fetches (none when nothing is expected to load)
//   T_pcie,new(k)   = link * max(E_new(k) - 1, 0): the additional ones
//   T_verify(k + 1) = verify_seconds_base + k * verify_seconds_per_draft
// where link = link_seconds_per_expert (the link's measured seconds per
// transfer, latency included: the seed's T_pcie,overhead + S_expert /
// B_PCIe) and E_new(k) = ExpectedNewExperts(k): the sum over positions
// 0..k of new(p), an EMA (weight kNewExpertsDecay on the old value) of the
// distinct experts first predicted at position p of a window that were not
// resident when p arrived (position p's forward is the verification's row
// p; row k, after the last draft, is estimated by the last position
// measured; no lookahead yet: 0). Ties go to the smaller k.
//
// k_SLO (eq. (5)'s bound; §3.2.3 bounds k by a TTFT budget): a request
// admitted while the batch speculates waits for the cycle under way, then
// for its own prefill pass, so
//   TTFT(k) = prefill_seconds + T_cycle(k)
// (prefill_seconds: the measured pass carrying a prefill chunk; 0 until
// measured). k_SLO is
//   - max_speculative_tokens when that key is given (the seed's offline
//     profiled bound), further held to ttft_slo_ms when that is given too;
//   - else the largest k with TTFT(k) <= ttft_slo_ms when that is given
//     (0 when even k = 0 misses it);
//   - else (neither key) the largest k with TTFT(k) <= kTtftSlack x TTFT(0):
//     speculation may at most double the TTFT plain decoding would give,
//     from the measured prefill, decode and link times alone.
// T_cycle grows with k, so "largest k" is the first k + 1 that misses.
//
// Until the query has measurements (acceptance empty,
// draft_seconds_per_position <= 0 or verify_seconds_base <= 0) it returns
// num_speculative_tokens, clamped to [0, max_k], except that once
// acceptance and draft time are measured but verify_seconds_base is not,
// every kProbeInterval-th such call (the first at once) returns 0: the
// engine measures the plain pass only on a step without drafts, which
// k = num_speculative_tokens every step never gives. After kProbeInterval
// consecutive choices of 0 it returns 1 once (when k_SLO allows 1), so
// acceptance keeps being measured. num_seqs does not move the optimum (the
// timings are the batch's) and is ignored.
//
// Speculation defaults (Speculation, registered as the policy's traits):
// drafter "int4"; k 0 (adaptive: the engine asks ChooseDraftLength every
// step).
//
// Config keys:
//   num_speculative_tokens  k before the governor has measurements, in
//                           [0, max_speculative_tokens, or 8 without it].
//                           Default: 4 (at most max_speculative_tokens).
//   max_speculative_tokens  k_SLO, in [0, 16]. Default: none (k_SLO from
//                           the TTFT budget, above).
//   ttft_slo_ms             the TTFT budget bounding k, in milliseconds, in
//                           [0.001, 3600000]. Default: none (kTtftSlack x
//                           the measured TTFT at k = 0, when
//                           max_speculative_tokens is absent too).
//   phase2_start            where phase II starts, as a fraction of the
//                           planned positions, in [0, 1]. Default: 1/3.
// Test config (PolicyTestConfig): num_speculative_tokens=2,
// max_speculative_tokens=4.
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h). The accessors are for the same thread.
#ifndef MOESERVE_POLICIES_QUANT_DRAFT_H_
#define MOESERVE_POLICIES_QUANT_DRAFT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/recency.h"

namespace moeserve::policies {

class QuantDraftPolicy : public engine::OffloadPolicy {
 public:
  struct Options {
    int num_speculative_tokens = 4;
    std::optional<int> max_speculative_tokens;  // k_SLO, when configured
    std::optional<double> ttft_slo_seconds;     // the TTFT budget, when set
    double phase2_start = 1.0 / 3.0;
  };
  enum class Phase { kNone, kI, kII, kIII };

  static constexpr int kLowPriority = 1;
  static constexpr int kHighPriority = 2;
  static constexpr double kNewExpertsDecay = 0.75;
  static constexpr int kProbeInterval = 8;
  // Without a configured SLO, speculation may make TTFT at most this many
  // times what it would be at k = 0.
  static constexpr double kTtftSlack = 2.0;

  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);
  // The speculation this policy brings (its registered
  // PolicyTraits::speculation): drafter int4, k 0, under every config.
  static absl::StatusOr<engine::SpeculationDefaults> Speculation(
      const engine::PolicyConfig& config);

  explicit QuantDraftPolicy(Options options) : options_(options) {}

  std::string_view name() const override { return "quant_draft"; }

  void Attach(engine::ResidencyControl* control) override;
  void OnLookahead(const engine::ExpertLookahead& lookahead) override;
  void OnStepBegin(const engine::StepInfo& info) override;
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> token_counts, const float* hidden,
               int64_t n) override;
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void OnStepEnd(const engine::StepStats& stats) override;
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override;
  int ChooseDraftLength(const engine::DraftLengthQuery& q) override;

  const Options& options() const { return options_; }
  // The phase of the last OnLookahead (kNone: no window).
  Phase phase() const { return phase_; }
  // The earliest position of the window predicting `id`, or -1 (not in the
  // window, whatever the current layer).
  int FirstPosition(engine::ExpertId id) const;
  // The governor's estimate of the experts a verification with k drafts
  // loads (see the header comment).
  double ExpectedNewExperts(int k) const;
  // T_cycle(k), eq. (3) of the seed (see the header comment).
  double CycleSeconds(const engine::DraftLengthQuery& q, int k) const;
  // k_SLO for `q` (see the header comment), at most `max_k`. REQUIRES: `q`
  // has measurements.
  int SloDraftLength(const engine::DraftLengthQuery& q, int max_k) const;

 private:
  size_t Index(int layer, int expert) const {
    return static_cast<size_t>(layer) * num_experts_ + expert;
  }
  // The window's experts at layers > cursor_, in use order.
  std::vector<engine::ExpertId> UseOrder() const;
  // Phase II (high = false) or III (high = true).
  void PrefetchWindow(bool high);

  Options options_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  int num_layers_ = 0;
  int num_experts_ = 0;
  // The window: [layer * E + expert] -> earliest position, -1 when absent.
  std::vector<int> first_pos_;
  std::vector<engine::ExpertId> window_ids_;  // entries of first_pos_ >= 0
  int positions_seen_ = 0;
  Phase phase_ = Phase::kNone;
  // The layer the current step routed last; -1 before its first OnRoute.
  int cursor_ = -1;
  // Prefetches issued for the current window, and those at kLowPriority.
  absl::flat_hash_set<std::pair<int, int>> issued_, issued_low_;
  // new(p) EMA per position (see the header comment); measured_[p]: set.
  std::vector<double> new_experts_;
  std::vector<bool> measured_;
  int zero_streak_ = 0;
  int base_probe_wait_ = 0;  // unmeasured calls until the next k = 0 probe
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_QUANT_DRAFT_H_
