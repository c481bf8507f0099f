// cpu_cold: an expert that misses is computed where it lives, on the host's
// CPU, when the batch sends it few rows, and copied to the fast tier
// otherwise (issue 32). The simple, per-miss form of MoE-SpAc's cold-expert
// offload (seeds 004 §3.3, "Heterogeneous Workload Balancer": cold experts
// processed on the CPU, hot ones moved to the GPU), and the rule of the
// systems that seed's Appendix G names: Fiddler and kTransformers run an
// expert on the CPU when it is not in the GPU cache, HybriMoE sends the
// experts with few tokens to the CPU. Where utility decides hot and cold by
// a learned utility level, this policy decides by the rows of this layer
// and the measured costs alone. llama.cpp's --n-cpu-moe (here
// cpu_moe_layers, EngineSpec) is the static variant: whole layers on the
// host whatever the batch.
//
// Caching and eviction are lru's (policies/lru.h): the same
// internal::RecencyTracker, stamped by OnAccess (every routed expert, the
// ones computed in place included, as lru stamps every acquire);
// ChooseVictims least recently used first, never-accessed ones first, ties
// by (layer, expert). Nothing is prefetched or pinned.
//
// In place: in OnRoute(layer, experts, token_counts), every routed expert
// that is not resident (IsResident: ready or loading) and whose
// token_counts[i] is in [1, threshold] is passed to
// control->ComputeInPlace; the others are demand-loaded by the engine (a
// miss, then cached as lru caches it). An expert without a count (a
// shorter token_counts) is loaded.
//
// Threshold (rows), recomputed at every OnRoute and OnStepEnd from
// control->expert_costs() (ExpertCosts):
//   copy(e)    = link_seconds + fast_compute_seconds (the latter 0 until
//                measured): moving one expert over the link, then computing
//                it on the fast side;
//   host(m)    = HostSeconds(m) = host_seconds_first_row +
//                (m - 1) x host_seconds_per_row: computing it on the host's
//                CPU from the slow tier for m rows (timed at start by the
//                residency, engine/host_experts.h);
//   threshold  = the largest m with host(m) < copy (ThresholdRows), capped
//                at max_rows (and at kMaxRows): computing there is cheaper
//                than copying for every count up to it (host(m) grows with
//                m). 0 (nothing in place, exactly lru) while link_seconds
//                is 0 (no transfer measured yet; the first misses measure
//                it) or host_seconds_first_row is 0 (no host compute: a
//                host fast tier, or a device one without it).
// The comparison is per expert and ignores that the host computes its
// in-place experts while the device computes the resident ones (MoeModel
// overlaps them): it says when one expert is cheaper there, not how to
// balance a layer (utility's tau does that).
// With `threshold_rows` the threshold is that number (capped at max_rows)
// and the costs are not read: static, as --n-cpu-moe is, and usable on any
// control that accepts ComputeInPlace (a host fast tier computes in place
// by its own CPU, with the emulated inplace_compute_ratio charge).
// Once ComputeInPlace is refused (a device fast tier without host compute;
// sticky, as in utility) the threshold is 0 for good: exactly lru.
//
// Gauge (SetPolicyGauge, at every OnStepEnd):
// moeserve_cpu_cold_threshold_rows, the threshold (0: nothing in place).
// The experts computed in place are the residency's
// moeserve_expert_requests_total{result="inplace"}.
//
// Config keys:
//   max_rows        caps the threshold, in [0, kMaxRows]. Default: kMaxRows.
//   threshold_rows  fixes the threshold (no cost model), in [0, kMaxRows].
//                   Default: measured.
// Test config (PolicyTestConfig): threshold_rows=1 (an expert one token
// routed to is computed in place, the others are loaded: both paths run in
// the invariance and fake-versus-residency tests, whatever the link timing
// on demo-sized experts).
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h). The accessors are for the same thread.
#ifndef MOESERVE_POLICIES_CPU_COLD_H_
#define MOESERVE_POLICIES_CPU_COLD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "policies/internal/recency.h"

namespace moeserve::policies {

class CpuColdPolicy : public engine::OffloadPolicy {
 public:
  // The largest threshold (and config value): more rows than any batch.
  static constexpr int kMaxRows = 1 << 20;

  struct Options {
    int max_rows = kMaxRows;
    std::optional<int> threshold_rows;  // unset: from the costs
  };

  // The largest m in [0, max_rows] with costs.HostSeconds(m) <
  // costs.link_seconds + costs.fast_compute_seconds; 0 when link_seconds or
  // host_seconds_first_row is not measured (<= 0).
  static int ThresholdRows(const engine::ExpertCosts& costs, int max_rows);

  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);

  explicit CpuColdPolicy(Options options) : options_(options) {}

  std::string_view name() const override { return "cpu_cold"; }
  void Attach(engine::ResidencyControl* control) override;
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> token_counts, const float* hidden,
               int64_t n) override;
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void OnStepEnd(const engine::StepStats& stats) override;
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override {
    recency_.ChooseLeastRecent(candidates, count, victims);
  }

  const Options& options() const { return options_; }
  // The threshold as last computed (OnRoute / OnStepEnd).
  int threshold_rows() const { return threshold_; }
  // False once ComputeInPlace was refused.
  bool inplace_available() const { return !inplace_refused_; }

 private:
  void UpdateThreshold();

  const Options options_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  int threshold_ = 0;
  bool inplace_refused_ = false;
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_CPU_COLD_H_
