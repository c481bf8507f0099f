// The offload-policy plugin contract (DESIGN.md "Policy hooks").
//
// A policy decides where expert weights are and when they move: what to
// prefetch, what to pin, what to evict. It never changes results: the engine
// computes exactly the experts the router chose, whatever the policy does.
//
// The engine never includes a concrete policy; policies (policies/) see the
// engine only through this header. Every hook but ChooseVictims has a
// default that does nothing.
//
// Threading and order: every hook is called from the engine's step thread,
// one at a time. Per step: OnStepBegin; then per MoE layer OnRoute, OnAccess
// (per routed expert, as it is acquired), OnLayerDone; then OnStepEnd.
// Layers come in ascending order; a layer may come twice in a row in one
// step: with host attention a large step runs as two micro-batches (engine/
// moe_model.h, seed 002 Figure 5) and each layer is routed for the first
// micro-batch's tokens, then for the second's, each with its own OnRoute ..
// OnLayerDone (token counts and `n` are the micro-batch's; they add up to
// the step's, and StepStats::activations counts every token once). A policy
// must stay correct under it (all registered ones do: results never depend
// on it), and may see the second pass mostly hit what the first loaded; one
// that drops a layer's experts at OnLayerDone (on_demand, lfu_static's
// unpinned) loads them again for the second pass.
// ChooseVictims comes whenever a slot is needed: during the demand loads
// that follow OnRoute, inside an acquire (after that expert's OnAccess), or
// nested inside a Prefetch or Pin the policy itself called.
//
// OnLoaded and OnEvicted report what happened to the fast tier. Loads
// complete on link worker threads and evictions happen inside whichever call
// needed the slot, so the residency queues both, in the order they
// happened, and delivers them on the step thread at these points only:
//   - just before OnStepBegin, OnRoute, OnLayerDone and OnStepEnd;
//   - at the end of each acquire, once its expert is ready (so a missed
//     expert's OnLoaded comes after its OnAccess and before it is computed).
// Never from inside another hook or a ResidencyControl call: the eviction of
// a victim that ChooseVictims chose, or of an expert the policy Evicts, is
// reported at the next point. For each expert, OnLoaded and OnEvicted
// alternate, OnLoaded first; a failed load reports neither. A view of the
// fast tier built from them may lag IsResident (which also counts loads in
// flight) until the next point.
//
// A policy may call back into the ResidencyControl from any hook.
#ifndef MOESERVE_ENGINE_OFFLOAD_OFFLOAD_POLICY_H_
#define MOESERVE_ENGINE_OFFLOAD_OFFLOAD_POLICY_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/model_weights.h"

namespace moeserve::engine {

// What one engine step is about to run.
struct StepInfo {
  int64_t step = 0;    // counts from 0 per engine
  int num_seqs = 0;    // sequences in the batch
  int num_tokens = 0;  // tokens run through the model this step
  int num_prefill_tokens = 0;
  // Tokens of speculative verify chunks (each sequence's last token plus
  // its draft tokens), included in num_tokens, not in num_prefill_tokens.
  int num_verify_tokens = 0;
};

// What one engine step did.
struct StepStats {
  int64_t step = 0;
  int num_layers = 0;
  int num_experts = 0;
  // Tokens routed to (layer, expert) this step: [layer * num_experts + e].
  std::span<const uint32_t> activations;
};

// What a drafter expects the target to need over the coming verification
// (DESIGN.md "on_lookahead"; MoE-SpeQ's expert lookahead buffer): per draft
// position (0 = the first draft token's forward) and layer, the distinct
// experts the draft's router chose for any speculating sequence, ascending.
struct ExpertLookahead {
  std::vector<std::vector<std::vector<int>>> experts;  // [position][layer]
  // k of this draft: experts.size() < planned_positions while drafting is
  // still in progress. The engine delivers OnLookahead after EACH draft
  // position (a growing window) and once more when complete.
  int planned_positions = 0;

  void Clear() { experts.clear(); }
  bool empty() const { return experts.empty(); }
};

// What the governor knows when the engine asks for this step's k
// (OffloadPolicy::ChooseDraftLength; MoE-SpeQ's speculative governor).
struct DraftLengthQuery {
  int max_k = 0;     // the most the engine allows
  int num_seqs = 0;  // sequences that will speculate
  // Their context (prompt + generated tokens), mean and longest: the
  // verification's attention cost grows with it (SpecMoEOff's k depends on
  // batch and prefix length).
  double mean_context_tokens = 0;
  int64_t max_context_tokens = 0;
  // [i]: P(draft i+1 accepted | drafts 1..i accepted), EMA, size >= max_k
  // (may be empty before any verification).
  std::span<const double> acceptance;
  double draft_seconds_per_position = 0;  // measured, EMA (0: unknown yet)
  // Target pass with no drafts (plain decode of the batch), EMA, and what
  // each draft token adds: compute time, the pass's wall time less the
  // seconds its acquires waited on the link (a policy models the link
  // itself, with link_seconds_per_expert).
  double verify_seconds_base = 0;
  double verify_seconds_per_draft = 0;
  double link_seconds_per_expert = 0;  // one expert transfer, measured, EMA
  // A target pass that carried a prefill chunk (the pass that computes a new
  // request's first token), wall time with its stalls, EMA (0: none yet).
  // For latency SLOs on TTFT.
  double prefill_seconds = 0;
};

// What moving or computing one expert costs, measured by the residency
// (EMAs over the run; 0 = not measured yet). For policies that weigh moving
// an expert against computing it where it lives (utility; MoE-SpAc's
// workload balancer).
struct ExpertCosts {
  // One transfer slow -> fast on the link (emulation included).
  double link_seconds = 0;
  // One expert computed from the fast tier: Acquire of a ready expert to
  // its Release (on an asynchronous device: the host-side enqueue only).
  double fast_compute_seconds = 0;
  // One expert computed in place on the slow tier (ComputeInPlace),
  // Acquire to Release, the emulated compute charge included.
  double inplace_compute_seconds = 0;
  // Hybrid execution (a device fast tier with host compute attached,
  // engine/host_experts.h): one expert computed by the host's CPU kernels
  // from the slow tier costs about host_seconds_first_row +
  // (rows - 1) x host_seconds_per_row. Measured at start (the residency
  // times one expert at 1 and at 8 rows), then the first-row figure follows
  // an EMA of the single-row experts computed. 0: no host compute.
  double host_seconds_first_row = 0;
  double host_seconds_per_row = 0;
  // The host compute of one expert on `rows` tokens by the figures above
  // (0 when not measured).
  double HostSeconds(int64_t rows) const {
    if (host_seconds_first_row <= 0) return 0;
    return host_seconds_first_row +
           static_cast<double>(rows > 1 ? rows - 1 : 0) * host_seconds_per_row;
  }
};

// The levers and gauges a policy gets. Implemented by ExpertResidency.
class ResidencyControl {
 public:
  virtual ~ResidencyControl() = default;

  virtual int num_layers() const = 0;
  virtual int num_experts() const = 0;
  // The router's top-k.
  virtual int experts_per_token() const = 0;
  // Fast-tier slots (each holds one expert).
  virtual int capacity_slots() const = 0;

  // Ready in the fast tier, or on its way there.
  virtual bool IsResident(ExpertId id) const = 0;
  // Ready in the fast tier (resident and not loading). Default: IsResident
  // (a control whose loads complete at once).
  virtual bool IsReady(ExpertId id) const { return IsResident(id); }

  // Starts moving `id` into the fast tier if it is not resident and a slot
  // can be had without evicting an expert that is in use or pinned (victims
  // come from ChooseVictims). Returns false when nothing was started.
  virtual bool Prefetch(ExpertId id) = 0;
  // Prefetch with a priority among queued prefetches: higher starts first,
  // FIFO within equal priority; Prefetch(id) is priority 0. Demand loads
  // always start before queued prefetches. Default: Prefetch(id).
  virtual bool Prefetch(ExpertId id, int priority) {
    (void)priority;
    return Prefetch(id);
  }
  // Prefetch(id, priority) for each of `ids`, in order, submitted to the
  // link as one batch (SP-MoE's batched I/O: one submission per layer);
  // returns the number of loads started. An id that is resident, or for
  // which no slot can be had, starts nothing and the rest still go.
  // Default: loops Prefetch(id, priority).
  virtual int PrefetchBatch(std::span<const ExpertId> ids, int priority) {
    int started = 0;
    for (const ExpertId& id : ids) started += Prefetch(id, priority) ? 1 : 0;
    return started;
  }
  // Cancels a prefetch load of `id` that is still queued (has not started
  // moving bytes; not pinned, not waited for by an acquire): the slot is
  // empty again, no bytes move, and neither OnLoaded nor OnEvicted is
  // reported. Returns false when there was no such load. Default: false.
  virtual bool CancelPrefetch(ExpertId id) {
    (void)id;
    return false;
  }

  // Pinned experts are loaded (if needed) and never evicted until Unpin.
  // Returns false when no slot could be had for it.
  virtual bool Pin(ExpertId id) = 0;
  virtual void Unpin(ExpertId id) = 0;

  // Drops `id` from the fast tier unless it is in use or pinned.
  virtual void Evict(ExpertId id) = 0;

  // Asks that `id` be computed where it lives (the slow tier's host memory,
  // by the CPU) instead of being moved to the fast tier: MoE-SpAc's
  // in-place compute of cold experts. Only from OnRoute, for an expert of
  // that route that is not resident: BeginLayer starts no demand load for
  // it, and its Acquire is served from the slow tier unless it has become
  // ready meanwhile (then it is an ordinary hit). Counted as `inplace`, not
  // as a hit or a miss; moves no bytes on the link. Holds for this layer
  // only. Returns false, and changes nothing, when the control cannot
  // compute in place (a device fast tier without host compute, see
  // ExpertResidency::EnableHybrid; `id` not routed this layer or resident;
  // outside OnRoute). Default: false.
  virtual bool ComputeInPlace(ExpertId id) {
    (void)id;
    return false;
  }
  // The measured costs (ExpertCosts). Default: nothing measured.
  virtual ExpertCosts expert_costs() const { return {}; }

  // Publishes a policy-specific gauge (e.g. cutoff's
  // moeserve_spec_cutoff_layer) with the engine's `policy` label; the first
  // call for a name registers it with `help`. A name that is not a valid
  // metric name, or clashes with another metric, is logged once and
  // ignored. Default: ignored (no metrics).
  virtual void SetPolicyGauge(std::string_view name, std::string_view help,
                              double value) {
    (void)name, (void)help, (void)value;
  }

  // Applies `layer`'s router to `hidden` (F32 row-major [n, hidden_size],
  // already normalised as the router expects) and returns the distinct
  // experts of the top-k choices of all rows, ascending. For predicting the
  // experts of layers that have not run yet.
  virtual std::vector<int> PredictExperts(int layer, const float* hidden,
                                          int64_t n, int k) = 0;
};

class OffloadPolicy {
 public:
  virtual ~OffloadPolicy() = default;

  virtual std::string_view name() const = 0;

  // (The drafter and k a speculative policy brings are its registration's
  // traits, read without building it: policy_registry.h, PolicyTraits.)

  // The draft length k for this step, in [0, q.max_k]; -1: the engine's own
  // k.
  virtual int ChooseDraftLength(const DraftLengthQuery& q) {
    (void)q;
    return -1;
  }

  // Whether the self drafter (engine/spec_decode/self_drafter.h) may draft
  // with `id`, which it also needs ready in the fast tier. Default: yes,
  // every ready expert. self_spec in the paper's mode (seed 000 §III-B)
  // answers yes only for its pinned draft experts. Asked from the step
  // thread while drafting.
  virtual bool IsDraftExpert(ExpertId id) const {
    (void)id;
    return true;
  }

  // Called once before the first step. `control` outlives the policy's use.
  virtual void Attach(ResidencyControl* control) { (void)control; }

  virtual void OnStepBegin(const StepInfo& info) { (void)info; }

  // A drafter finished this step's drafts: what it expects the target to
  // route to while verifying them. Comes before OnStepBegin of the step that
  // verifies them (the drafts run first), only on steps with drafts. Also
  // after each draft position while drafting (lookahead.experts.size() <
  // lookahead.planned_positions: a growing window).
  virtual void OnLookahead(const ExpertLookahead& lookahead) {
    (void)lookahead;
  }

  // The router of `layer` chose `experts` (ascending); token_counts[i]
  // tokens go to experts[i]. `hidden` is the router's input, F32 [n, d].
  // After this returns, every expert in `experts` that is not resident is
  // demand-loaded as far as slots can be had without waiting (victims from
  // outside `experts`), then each is acquired.
  virtual void OnRoute(int layer, std::span<const int> experts,
                       std::span<const int> token_counts, const float* hidden,
                       int64_t n) {
    (void)layer, (void)experts, (void)token_counts, (void)hidden, (void)n;
  }

  // `id` is being acquired for compute (hit or miss).
  virtual void OnAccess(ExpertId id) { (void)id; }

  // Every expert of `layer` has been computed and released.
  virtual void OnLayerDone(int layer) { (void)layer; }

  virtual void OnStepEnd(const StepStats& stats) { (void)stats; }

  // A load of `id` into the fast tier completed: a demand load, a Prefetch
  // or a Pin's load. `id` is ready (unless evicted since; then OnEvicted
  // follows). Delivered as the header comment says.
  virtual void OnLoaded(ExpertId id) { (void)id; }

  // `id` left the fast tier: a victim taken to make room, or Evict().
  // Delivered as the header comment says.
  virtual void OnEvicted(ExpertId id) { (void)id; }

  // Required. `candidates` are resident experts that may be evicted (not in
  // use, not pinned, not loading); append exactly min(count,
  // candidates.size()) of them to `victims`, most evictable first.
  virtual void ChooseVictims(std::span<const ExpertId> candidates, int count,
                             std::vector<ExpertId>* victims) = 0;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_OFFLOAD_POLICY_H_
