// throughput: SpecMoEOff (seeds 002 §3, §4.2, §5.2-§5.3). Large-batch
// speculative decoding with experts offloaded: the draft is a separate,
// small model (the "external" drafter, engine/spec_decode/external_drafter.h,
// the seed's EAGLE head), the batch is large, and the target streams its
// experts over the link layer by layer while it computes. The policy
// chooses k per step from the batch and the prefix length, streams the
// next layer's experts during the current layer, and evicts by the sweep
// order of the layers.
//
// Speculative governor (§3.2 roofline, §5.3 estimator): ChooseDraftLength
// returns the k in [0, min(max_k, max_speculative_tokens,
// acceptance.size())] that maximises the expected emitted tokens per second
//   Theta(k) = num_seqs * E[tokens](k) / T(k),
//   E[tokens](k) = 1 + sum_{i=1..k} prod_{j<=i} p_j   (p = acceptance),
//   T(k) = k * draft(s) + Pipeline(c(k), x(k)),
// ties to the smaller k, where, with n = num_seqs, N = n * (k + 1) tokens in
// the verification, L layers, E experts, top-k K and S fast-tier slots:
//   coverage  D(N) = E * (1 - (1 - K/E)^N): the expected distinct experts
//             one layer's router picks for N tokens (uniform routing);
//   x(k)      link seconds per layer = link_seconds_per_expert * D(N) *
//             (1 - ResidentShare(L, E, S)): the touched experts that are
//             not already resident. ResidentShare is 1 when every expert
//             fits (S >= L * E), else (S - E) / (L * E): a uniform share of
//             the tier less one layer's slots, which the stream keeps
//             turning over (the next layer's loads take them);
//   c(k)      compute seconds per layer = (vb(s) + n * k * vd(s)) / L,
//             the measured verify timings at context s (below)
//             (verify_seconds_base for the plain batch,
//             verify_seconds_per_draft per draft token). The engine
//             measures them around the whole forward less the seconds its
//             acquires waited on the link, so c is compute and the link is
//             counted once, in x;
//   Pipeline  the seed's I/O / compute pipeline (§4.2, "while computing
//             layer i, the expert weights for layer i+1 are transferred"):
//             x + (L - 1) * max(c, x) + c (layer 0's load is exposed, then
//             each layer's compute overlaps the next layer's load).
// So a small batch pays link time for every draft token (each touches new
// experts: small k) while a large batch touches every expert anyway (D
// saturates at E: drafts are nearly free on a link-bound step: large k).
// Prefix length (§3.2: attention costs 2 * b * s * h): the measured
// timings are EMAs taken at the contexts of the last steps; each query's
// draft_seconds_per_position, verify_seconds_base and
// verify_seconds_per_draft are recorded with its mean_context_tokens (when
// they changed) and a least-squares slope (seconds per context token) is
// fitted over the last kFitWindow records (slope >= 0; 0 while the
// contexts span fewer than kMinContextSpread tokens). The model evaluates
// each timing at the query's mean_context_tokens, moved along its slope
// from the context of the newest record: draft(s), vb(s), vd(s). So a
// longer prefix makes drafting and verifying dearer and moves k.
// max_context_tokens is not used: the batch's attention cost is the sum
// over sequences (n * mean), not the longest one.
// Until the query has measurements (acceptance empty, verify_seconds_base
// <= 0, or draft_seconds_per_position <= 0) it returns
// num_speculative_tokens clamped to the same range. After kProbeInterval
// consecutive choices of 0 it returns 1 once, so acceptance keeps being
// measured. A zero link time (not measured yet) gives x = 0.
//
// Expert placement (§4.2, MoE-Lightning's layer pipeline): at OnStepBegin
// layer 0 and at OnRoute(l) layer l + 1 is prefetched (PrefetchBatch at
// prefetch_priority), while layer l computes. Which experts: when the
// step's expected coverage D(num_tokens) / E reaches stream_all_coverage the
// batch will touch (nearly) all of them (§3.2: "for large batch size, we
// assume all experts are activated"), so the whole layer streams; below it,
// the experts the router of l + 1 picks for layer l's hidden state
// (PredictExperts, top-K) plus those the drafter's lookahead (if any)
// predicts for l + 1. A layer is streamed only when it fits: at most
// capacity_slots - (experts of the routing layer) loads, so the layer being
// computed is never displaced.
// Eviction (ChooseVictims): the candidate whose next use in the layer sweep
// is farthest goes first. After OnRoute(c) layer j is next used at
// j - c (j > c) or j - c + L (j <= c: the next step); before the step's
// first OnRoute, at j + 1. Ties: least recently used (internal::
// RecencyTracker, stamped by OnAccess and by each prefetch), then (layer,
// expert). Deviation: the brief suggested LRU; on a cyclic sweep over the
// layers with a tier smaller than the loop, LRU evicts exactly the layer
// needed next (the oldest), so the sweep distance is used and LRU only
// breaks ties.
//
// Deviations from the seed: the seed keeps KV cache and attention on the
// CPU and the draft's KV split CPU/GPU (§5.1-§5.2); here attention runs
// where the engine runs it (the policy contract moves experts only): on
// the device, or with the engine's host_attention setting on the host over
// a host KV cache (engine/host_attention.h; no micro-batch overlap), and
// the memory-conscious draft execution reduces to the draft model being
// small and resident (no expert slots). The seed fixes b to the largest
// batch that fits and searches k offline (§5.3); here the engine's
// max_num_seqs is b and k is searched every step from online
// measurements; the offline search over (b, k) is moeserve_bench
// --optimize (tools/bench/optimizer.h). Micro-batches (m) are not modelled.
//
// Speculation defaults (Speculation, registered as the policy's traits):
// the drafter is the `drafter` config ("external": needs
// EngineSpec::draft_model_dir / --draft_model_dir); k is 0 (adaptive: the
// engine asks ChooseDraftLength every step). With host_attention=1 it also
// asks for SpecMoEOff's CPU attention over a KV cache in host memory (seed
// 002 §4; engine/host_attention.h): the engine builder turns the engine's
// host_attention setting on, so the device memory the KV cache would take
// holds experts instead.
//
// Config keys:
//   num_speculative_tokens  k before the governor has measurements, in
//                           [0, max_speculative_tokens]. Default: 4.
//   max_speculative_tokens  the largest k, in [0, 16]. Default: 8.
//   stream_all_coverage     expected share of a layer's experts a step
//                           touches from which the whole layer streams,
//                           in [0, 1] (0: always the whole layer; 1: only
//                           when certain, i.e. predicted experts only).
//                           Default: 0.9.
//   prefetch_priority       priority of the stream's prefetches, in
//                           [-1000, 1000]. Default: 1.
//   drafter                 the default drafter (engine/spec_decode/ registry
//                           name). Default: external.
//   host_attention          0 | 1: 1 asks for the KV cache and attention on
//                           the host (above). Default: 0.
// Test config (PolicyTestConfig): drafter=int4 (the invariance tests build
// engines without a draft_model_dir), num_speculative_tokens=2,
// max_speculative_tokens=4.
// Thread safety: none needed; every hook comes from the engine's step
// thread (offload_policy.h). The accessors are for the same thread.
#ifndef MOESERVE_POLICIES_THROUGHPUT_H_
#define MOESERVE_POLICIES_THROUGHPUT_H_

#include <cstdint>
#include <deque>
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

// The share of the experts a step touches that are resident when it
// touches them (see x(k) in the header comment).
double ResidentShare(int layers, int experts, int slots);

class ThroughputPolicy : public engine::OffloadPolicy {
 public:
  struct Options {
    int num_speculative_tokens = 4;
    int max_speculative_tokens = 8;
    double stream_all_coverage = 0.9;
    int prefetch_priority = 1;
  };
  // The governor's step model for one k (see the header comment).
  struct StepEstimate {
    double tokens = 0;             // E[tokens] per sequence
    double draft_seconds = 0;      // k * draft
    double link_per_layer = 0;     // x
    double compute_per_layer = 0;  // c
    double seconds = 0;            // T(k)
    double tokens_per_second = 0;  // Theta(k)
  };

  static constexpr int kProbeInterval = 8;
  static constexpr int kFitWindow = 32;
  static constexpr double kMinContextSpread = 16;

  static absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> Create(
      const engine::PolicyConfig& config);
  // The speculation this policy brings under `config` (its registered
  // PolicyTraits::speculation): the `drafter` key's drafter, k 0.
  static absl::StatusOr<engine::SpeculationDefaults> Speculation(
      const engine::PolicyConfig& config);

  explicit ThroughputPolicy(Options options) : options_(std::move(options)) {}

  std::string_view name() const override { return "throughput"; }

  void Attach(engine::ResidencyControl* control) override;
  void OnStepBegin(const engine::StepInfo& info) override;
  void OnLookahead(const engine::ExpertLookahead& lookahead) override;
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> token_counts, const float* hidden,
               int64_t n) override;
  void OnAccess(engine::ExpertId id) override { recency_.Touch(id); }
  void OnStepEnd(const engine::StepStats& stats) override;
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override;
  int ChooseDraftLength(const engine::DraftLengthQuery& q) override;

  const Options& options() const { return options_; }
  // D(tokens) / E: the expected share of one layer's experts `tokens`
  // tokens touch (0 before Attach).
  double Coverage(double tokens) const;
  // The model for `k` under `q` (see the header comment); uses the fitted
  // context slopes.
  StepEstimate Estimate(const engine::DraftLengthQuery& q, int k) const;
  // Whether the current step streams whole layers.
  bool streaming_all() const { return stream_all_; }
  // The fitted slopes (seconds per context token; see the header comment).
  double draft_slope() const { return draft_slope_; }
  double base_slope() const { return base_slope_; }
  double per_draft_slope() const { return per_draft_slope_; }

 private:
  // Records q's verify timings against its mean context and refits.
  void Record(const engine::DraftLengthQuery& q);
  // Prefetches `layer`: all of it or `predicted`, as the header says.
  void StreamLayer(int layer, int routing_layer_experts,
                   std::vector<int> predicted);
  // Sweep distance of `layer` from the cursor (see the header comment).
  int NextUse(int layer) const;

  Options options_;
  engine::ResidencyControl* control_ = nullptr;  // not owned
  int num_layers_ = 0;
  int num_experts_ = 0;
  int top_k_ = 0;
  int cursor_ = -1;  // the layer routed last this step; -1 before
  bool stream_all_ = false;
  // The drafter's last complete lookahead: [layer] -> experts (any
  // position), until the step that verifies it ends.
  std::vector<std::vector<int>> lookahead_;
  // (context, draft, vb, vd) records and the fitted slopes per context
  // token.
  struct Sample {
    double context, draft, base, per_draft;
  };
  std::deque<Sample> samples_;
  double draft_slope_ = 0, base_slope_ = 0, per_draft_slope_ = 0;
  int zero_streak_ = 0;
  internal::RecencyTracker recency_;
};

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_THROUGHPUT_H_
