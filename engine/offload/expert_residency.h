// ExpertResidency: the fast tier as the engine and the policy see it. It is
// the ExpertProvider the forward pass uses and the ResidencyControl the
// policy steers, and it puts together the parts that do the work:
//   SlotPool             which expert each slot holds, slot states, pins,
//                        in-use counts, victim choice (slot_pool.h);
//   SlotMemory           the slots' bytes, host or device, and load fences
//                        (slot_memory.h);
//   Link                 the transfers slow -> fast (link.h);
//   ResidencyAccounting  hits, misses, prefetch outcomes, stall time and
//                        the metrics (residency_accounting.h);
//   HookQueue            OnLoaded / OnEvicted on their way to the policy
//                        (hook_queue.h).
//
// Ownership: owns all five. Borrows the ModelWeights, the registry and the
// optional device backend (all must outlive it); the SlowTier and the
// policy are borrowed or, from the owning Create, owned. Create() calls
// policy->Attach(this).
//
// Slots: slots = min(capacity_bytes / blob bytes, layers x experts), each
// empty | loading | ready (SlotPool has the state machine and its
// invariants). A slot is evictable when ready, not in use and not pinned.
//
// Semantics:
//  - SpeculationAdvisor: OnLookahead -> policy->OnLookahead (a drafter's
//    expectation); ChooseDraftLength -> policy->ChooseDraftLength (its
//    governor); link_seconds_per_transfer: the measured EMA.
//  - PredictExperts: the attached RouterProbe's (the target model's
//    routers); empty before one is attached.
//  - BeginStep: policy->OnStepBegin. EndStep: policy->OnStepEnd with the
//    step's per-(layer, expert) token counts (summed from BeginLayer).
//  - BeginLayer(layer, experts, ...): `experts` become the protected set;
//    policy->OnRoute; then a demand load for each expert of the set that is
//    not resident, as far as slots can be had without waiting (free slot, or
//    a ChooseVictims victim among evictable, unprotected slots), all
//    submitted to the link as one batch in its demand lane; an expert of
//    the set still loading by a queued prefetch is promoted to the demand
//    lane.
//  - Acquire(id): policy->OnAccess(id), then SlotPool::Acquire: resident
//    (ready: hit; loading: hit_loading, and a queued prefetch load of it is
//    promoted to the link's demand lane) -> used as is; otherwise a demand load
//    into a free slot or a victim (unprotected evictable slots first; protected
//    ones only when nothing else is evictable, so that one slot always makes
//    progress); when no slot is evictable but one is loading it waits for
//    that load and retries; when every slot is pinned or in use:
//    RESOURCE_EXHAUSTED "fast tier of N slots too small: ...". Then blocks
//    until ready. in_use++.
//  - Release(id): in_use--. EndLayer: clear the protected set;
//    policy->OnLayerDone.
//  - Prefetch(id[, priority]): if not resident and a slot can be had
//    without waiting (free, or a victim among evictable unprotected slots)
//    start a load marked prefetched, in the link's prefetch lane with
//    `priority` (default 0; higher starts first); returns whether one
//    started. Demand loads always start before queued prefetches.
//  - PrefetchBatch(ids, priority): Prefetch(id, priority) for each id, in
//    order, started as one batched link submission; returns the loads
//    started.
//  - CancelPrefetch(id): a prefetch load of `id` still queued on the link
//    (not started, not promoted, not pinned, nobody waiting) is cancelled:
//    the slot is empty again, no bytes move, prefetch_cancelled counts it,
//    and the policy hears neither OnLoaded nor OnEvicted. False otherwise.
//  - Pin(id): pins++ (a non-resident expert is loaded first, as a prefetch
//    transfer; false, and no pin, when no slot can be had without waiting).
//    Unpin: pins-- (no-op at 0). Evict: drops a ready, unpinned, unused
//    expert (no-op otherwise, also while loading). IsResident: ready or
//    loading. IsReady: ready.
//  - ComputeInPlace(id) (offload_policy.h): from OnRoute only, for an
//    expert of the route that is not resident, on a host fast tier: it is
//    left out of BeginLayer's demand loads, and its Acquire (if it is still
//    not resident then) returns the slow tier's bytes: the host arena's
//    blob, or for the disk tier a pread into a scratch blob owned by the
//    residency. No slot, no link transfer, no hit or miss: `inplace`.
//    OnAccess is called for it as for any acquire. A device fast tier
//    refuses (false): its compute stream cannot read host memory.
//    Emulated heterogeneous compute (LinkOptions::inplace_compute_ratio R):
//    on a host fast tier both tiers' experts run on this CPU, one after the
//    other. The emulation stands for a slow processor (the CPU) computing
//    the layer's in-place experts WHILE the fast one (the GPU) does the
//    rest, as MoE-SpAc and Fiddler run them: with t_in = the in-place
//    experts' Acquire-to-Release seconds (and rd their disk reads, not
//    scaled) and elapsed = BeginLayer's submission to EndLayer, the slow
//    side takes R x t_in + rd, the fast side elapsed - t_in - rd, and
//    EndLayer sleeps until max(slow side, fast side) has passed since
//    the submission (nothing when the fast side is longer; the real t_in
//    cannot be given back, so a layer is never shorter than elapsed).
//    Each in-place expert counts R x t + rd as inplace_seconds and in
//    expert_costs(); the sleeps count in inplace_wait_seconds.
//  - expert_costs(): EMAs (weight 0.1) of link_seconds_per_transfer, of the
//    Acquire-to-Release time of target acquires served from the fast tier,
//    and of the emulated slow-side time of in-place acquires (R x t + rd).
//  - SetPolicyGauge(name, help, value): a gauge labelled policy=engine name
//    in the registry (nothing without one).
//  - draft_experts(): an ExpertProvider over the same slots for a
//    self-drafting engine (owned by the residency). Its Acquire(id) returns
//    the blob of a resident expert (waiting while it loads, promoting
//    nothing), FAILED_PRECONDITION naming the expert when it is not
//    resident (it never loads); the expert is in use until its Release, so
//    it is not evicted. It counts in no statistic (no hit, miss, stall or
//    prefetch use) and calls no policy hook: its BeginStep, BeginLayer,
//    EndLayer and EndStep do nothing, and queued OnLoaded / OnEvicted wait
//    for the target's next delivery point. It must compute on the target's
//    stream (AttachCompute refuses another one).
//  - OnLoaded / OnEvicted: queued as they happen (loads complete on link
//    workers) and delivered at the start of BeginStep, BeginLayer, EndLayer
//    and EndStep (before the hook each of those calls) and at the end of
//    Acquire; never from a ResidencyControl call (offload_policy.h).
//  Policy hooks, ChooseVictims included, run without any residency lock, so
//  a policy may call back into ResidencyControl from any hook.
//
// Accounting: stats() (residency_accounting.h says what each counter
// means). Bytes moved per transfer = the padded blob size
// (ExpertBlob::bytes): link_transfers == misses + prefetch_loads -
// prefetch_cancelled - failed_transfers, and link_bytes == link_transfers x
// slot_bytes (failed and cancelled transfers move no accounted bytes).
// link_busy_seconds: time the link spent on transfers (link.h).
//
// Thread safety: every method may be called from any thread. The engine
// calls the ExpertProvider side from its step thread; policy hooks are then
// one at a time. With concurrent callers the policy must be thread-safe, and
// OnLoaded / OnEvicted come from whichever caller reaches a delivery point
// first (one at a time, in order).
// The locks are base::Mutex (std::mutex underneath, so TSan sees them;
// Debian's Abseil is not TSan-instrumented) and clang checks their
// annotations (--config=clang_tsa).
#ifndef MOESERVE_ENGINE_OFFLOAD_EXPERT_RESIDENCY_H_
#define MOESERVE_ENGINE_OFFLOAD_EXPERT_RESIDENCY_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "engine/expert_provider.h"
#include "engine/host_experts.h"
#include "engine/model_weights.h"
#include "engine/offload/hook_queue.h"
#include "engine/offload/link.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/residency_accounting.h"
#include "engine/offload/slot_memory.h"
#include "engine/offload/slot_pool.h"
#include "engine/offload/slow_tier.h"
#include "engine/offload/speculation_advisor.h"
#include "kernels/backend.h"
#include "metrics/registry.h"

namespace moeserve::engine {

class ExpertResidency final : public ExpertProvider,
                              public ResidencyControl,
                              public SpeculationAdvisor,
                              private SlotPool::Loader {
 public:
  // InvalidArgument when capacity_bytes holds no blob (or an argument is
  // null); ResourceExhausted when the slot memory cannot be allocated.
  // `registry` may be null (no metrics); `engine_name` is the `policy` label.
  // `device` (may be null = host RAM, SlowTier::Read straight into the
  // slots; must outlive the residency): the backend whose memory holds the
  // slots, filled through its copy streams and events. Any backend works
  // (the CPU backend exercises the device path in tests).
  static absl::StatusOr<std::unique_ptr<ExpertResidency>> Create(
      const ModelWeights* weights, SlowTier* slow, uint64_t capacity_bytes,
      const LinkOptions& link, OffloadPolicy* policy,
      metrics::Registry* registry, std::string engine_name,
      kernels::Backend* device = nullptr);
  // As above, owning `slow` and `policy` (an engine's residency: the engine
  // owns it, and with it its policy and slow tier).
  static absl::StatusOr<std::unique_ptr<ExpertResidency>> Create(
      const ModelWeights* weights, std::unique_ptr<SlowTier> slow,
      uint64_t capacity_bytes, const LinkOptions& link,
      std::unique_ptr<OffloadPolicy> policy, metrics::Registry* registry,
      std::string engine_name, kernels::Backend* device = nullptr);

  ~ExpertResidency() override;  // REQUIRES: nothing acquired.

  // Hybrid execution (issue 32; engine/host_experts.h). Set once, after
  // Create and before the model attaches (MoeModel::Create), by the builder.
  struct HybridOptions {
    // A CPU backend (its own thread pool) that computes the in-place
    // experts next to their weights while the device computes the resident
    // ones; owned by the residency from here on. Only on a fast tier in a
    // backend's memory (a GPU, or the CPU backend standing in for one):
    // there ComputeInPlace is then allowed, and nothing is emulated
    // (inplace_compute_ratio is not applied; the host's measured seconds
    // are the in-place costs). Null: no host compute (on a device fast tier
    // ComputeInPlace keeps refusing).
    std::unique_ptr<kernels::Backend> host;
    // The experts of the first cpu_moe_layers MoE layers stay in the slow
    // tier and are computed there (llama.cpp's --n-cpu-moe): every routed
    // expert of those layers is in place, and Prefetch / PrefetchBatch / Pin
    // refuse them. In [0, num_layers]. On a device fast tier it needs
    // `host`; on a host fast tier those experts are read where they are.
    int cpu_moe_layers = 0;
  };
  // InvalidArgument for a layer count out of range, for a host backend
  // that is not a CPU one or that a host fast tier cannot use, and for
  // cpu_moe_layers on a device fast tier without host compute;
  // FailedPrecondition once set. Times one expert on the host (1 and 8
  // rows) for expert_costs().
  absl::Status EnableHybrid(HybridOptions options);

  // ExpertProvider.
  kernels::Device device() const override;
  absl::Status AttachCompute(kernels::Backend* backend,
                             kernels::Stream* stream) override;
  // The target model's routers, for PredictExperts (null: none).
  void AttachRouterProbe(RouterProbe* probe) override;
  void BeginStep(const StepInfo& info) override;
  void EndStep() override;
  void BeginLayer(int layer, std::span<const int> experts,
                  std::span<const int> token_counts, const float* hidden,
                  int64_t n) override;
  const kernels::Int4ExpertLayout* int4_layout() const override {
    return int4_layout_;
  }
  const kernels::Fp8ExpertLayout* fp8_layout() const override {
    return fp8_layout_;
  }
  // Ready in a slot (IsReady): Acquire takes no slot and does not wait.
  bool IsReadyForCompute(ExpertId id) const override { return IsReady(id); }
  // The hybrid path (EnableHybrid): in place this layer and not ready.
  HostExperts* host_compute() const override { return host_.get(); }
  bool ComputesOnHost(ExpertId id) const override;
  void RecordHostCompute(ExpertId id, int64_t rows, double seconds) override;
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override;
  void Release(ExpertId id) override;
  void EndLayer(int layer) override;

  // ResidencyControl.
  int num_layers() const override { return num_layers_; }
  int num_experts() const override { return num_experts_; }
  int experts_per_token() const override { return top_k_; }
  int capacity_slots() const override { return pool_.num_slots(); }
  bool IsResident(ExpertId id) const override;
  bool Prefetch(ExpertId id) override;
  bool Pin(ExpertId id) override;
  void Unpin(ExpertId id) override;
  void Evict(ExpertId id) override;
  std::vector<int> PredictExperts(int layer, const float* hidden, int64_t n,
                                  int k) override;
  bool ComputeInPlace(ExpertId id) override;
  ExpertCosts expert_costs() const override;
  void SetPolicyGauge(std::string_view name, std::string_view help,
                      double value) override;

  // ResidencyControl, lanes and cancellation (see above).
  bool IsReady(ExpertId id) const override;
  bool Prefetch(ExpertId id, int priority) override;
  // One SlotPool::LoadManyNoWait (kPrefetch, `priority`): one link
  // submission for the batch.
  int PrefetchBatch(std::span<const ExpertId> ids, int priority) override;
  bool CancelPrefetch(ExpertId id) override;

  // SpeculationAdvisor: the policy's answers.
  void OnLookahead(const ExpertLookahead& lookahead) override;
  int ChooseDraftLength(const DraftLengthQuery& query) override;
  double link_seconds_per_transfer() const override;
  double link_stall_seconds() const override {
    return accounting_.stall_seconds();
  }

  // The policy steering this residency.
  OffloadPolicy* policy() const { return policy_; }

  // The draft model's view of the fast tier (see above); owned by this.
  ExpertProvider* draft_experts() { return &draft_; }

  ResidencyStats stats() const;
  // Blocks until no slot is loading (for tests and benchmarks).
  void WaitIdle() const;
  bool link_emulation_on() const { return link_->emulation_on(); }

 private:
  // draft_experts(): resident experts only, no statistics, no hooks.
  class DraftView final : public ExpertProvider {
   public:
    explicit DraftView(ExpertResidency* r) : r_(r) {}
    kernels::Device device() const override { return r_->device(); }
    absl::Status AttachCompute(kernels::Backend* backend,
                               kernels::Stream* stream) override;
    bool IsReadyForCompute(ExpertId id) const override {
      return r_->IsReady(id);
    }
    const kernels::Int4ExpertLayout* int4_layout() const override {
      return r_->int4_layout();
    }
    const kernels::Fp8ExpertLayout* fp8_layout() const override {
      return r_->fp8_layout();
    }
    absl::StatusOr<const std::byte*> Acquire(ExpertId id) override;
    void Release(ExpertId id) override;

   private:
    ExpertResidency* const r_;
  };

  // What the link knows of one slot's current load (under load_mu_).
  struct SlotLoad {
    uint64_t seq = 0;          // Load number last submitted (0: none).
    TransferId transfer = 0;   // Its link transfer.
    uint64_t promote_seq = 0;  // Promoted before it was submitted.
    uint64_t cancel_seq = 0;   // Cancelled before it was submitted.
  };

  ExpertResidency(const ModelWeights* weights, SlowTier* slow, int slots,
                  OffloadPolicy* policy);
  absl::Status Init(const LinkOptions& link, metrics::Registry* registry,
                    const std::string& engine_name, kernels::Backend* device);

  // SlotPool::Loader: Link transfers into the slots' memory.
  void StartLoad(int slot, ExpertId id) override;
  void StartLoads(std::span<const SlotPool::LoadStart> loads) override
      ABSL_LOCKS_EXCLUDED(load_mu_);
  void PromoteLoad(int slot, uint64_t seq) override
      ABSL_LOCKS_EXCLUDED(load_mu_);
  bool CancelLoad(int slot, uint64_t seq) override
      ABSL_LOCKS_EXCLUDED(load_mu_);
  void Released(int slot) override;

  // Set by the owning Create only; declared first so that they outlive
  // everything below that borrows them.
  std::unique_ptr<SlowTier> owned_slow_;
  std::unique_ptr<OffloadPolicy> owned_policy_;

  SlowTier* const slow_;
  OffloadPolicy* const policy_;
  // The target model's routers (AttachRouterProbe); null: no predictions.
  std::atomic<RouterProbe*> probe_{nullptr};
  // The checkpoint's int4 layout when its experts are int4 (the weights',
  // which outlive this); null for bf16.
  const kernels::Int4ExpertLayout* const int4_layout_;
  const kernels::Fp8ExpertLayout* const fp8_layout_;
  const int num_layers_;
  const int num_experts_;
  const int top_k_;
  const size_t slot_bytes_;

  std::unique_ptr<SlotMemory> memory_;  // Set by Init, then read-only.
  ResidencyAccounting accounting_;
  HookQueue hooks_;
  SlotPool pool_;  // Reports to accounting_ and hooks_.

  DraftView draft_{this};
  // The compute stream the target attached (the draft must use the same).
  std::atomic<kernels::Stream*> compute_stream_{nullptr};
  std::atomic<bool> compute_attached_{false};

  // Slot -> its load's link transfer; lock order: pool, then load_mu_, then
  // the Link's.
  base::Mutex load_mu_;
  std::vector<SlotLoad> loads_ ABSL_GUARDED_BY(load_mu_);

  // Serves an in-place acquire: the blob in the slow tier's host arena, or
  // read into a scratch blob of its own.
  absl::StatusOr<const std::byte*> AcquireInPlace(ExpertId id);
  // Whether Acquire(id) serves `id` in place: committed to the host
  // (ComputesOnHost said so), or marked in place and not ready.
  bool InPlaceNow(ExpertId id) const ABSL_LOCKS_EXCLUDED(inplace_mu_);
  // A layer whose experts all stay in the slow tier (cpu_moe_layers).
  bool HostLayer(int layer) const { return layer < cpu_moe_layers_; }
  // Times one expert on host_ for expert_costs() (EnableHybrid).
  absl::Status CalibrateHost();
  // The routed_ entry of `id` when it belongs to the running layer (between
  // BeginLayer and EndLayer), else null.
  uint8_t* RunningLayerState(ExpertId id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(inplace_mu_);
  // One blob's bytes (64-byte aligned) for a disk read to compute from.
  using ScratchBlob = std::unique_ptr<std::byte, void (*)(void*)>;
  absl::StatusOr<ScratchBlob> NewScratchBlob() const;

  // One in-place expert between its Acquire and its Release.
  struct InPlaceHold {
    ExpertId id;
    std::chrono::steady_clock::time_point since;
    double read_seconds = 0;  // its disk read
    double host_seconds = 0;  // RecordHostCompute's (hybrid path)
    int scratch = -1;         // its scratch blob (disk tier), or -1
  };

  // In-place compute and the measured costs (step thread; a mutex because
  // the ResidencyControl side may be called from any thread).
  mutable base::Mutex inplace_mu_;
  int routing_layer_ ABSL_GUARDED_BY(inplace_mu_) = -1;  // inside OnRoute
  // This layer's routed experts: 1 routed, 2 routed and to compute in
  // place, 3 computed on the host (ComputesOnHost answered true: final).
  mutable std::vector<uint8_t> routed_ ABSL_GUARDED_BY(inplace_mu_);
  // The fast-tier expert acquired last and when (its Acquire-to-Release
  // time is fast_compute_seconds).
  ExpertId held_ ABSL_GUARDED_BY(inplace_mu_) = {-1, -1};
  // The in-place experts held now (several at once on the hybrid path).
  std::vector<InPlaceHold> inplace_held_ ABSL_GUARDED_BY(inplace_mu_);
  // The disk tier's in-place reads land here; grown on demand, never shrunk.
  std::vector<ScratchBlob> scratch_ ABSL_GUARDED_BY(inplace_mu_);
  std::vector<bool> scratch_used_ ABSL_GUARDED_BY(inplace_mu_);
  int layer_ ABSL_GUARDED_BY(inplace_mu_) = -1;  // BeginLayer to EndLayer
  // The running layer: when its demand loads were submitted, and its
  // in-place experts' real compute and read seconds.
  std::chrono::steady_clock::time_point layer_started_
      ABSL_GUARDED_BY(inplace_mu_);
  double layer_inplace_compute_ ABSL_GUARDED_BY(inplace_mu_) = 0;
  double layer_inplace_read_ ABSL_GUARDED_BY(inplace_mu_) = 0;
  bool inplace_used_ ABSL_GUARDED_BY(inplace_mu_) = false;
  std::chrono::steady_clock::time_point held_since_
      ABSL_GUARDED_BY(inplace_mu_);
  ExpertCosts costs_ ABSL_GUARDED_BY(inplace_mu_);
  double inplace_compute_ratio_ = 8;            // Set by Init.
  kernels::Backend* device_backend_ = nullptr;  // Set by Init; may be null.
  // Set by EnableHybrid before any step, then read-only.
  std::unique_ptr<kernels::Backend> host_backend_;
  std::unique_ptr<HostExperts> host_;
  int cpu_moe_layers_ = 0;
  int64_t hidden_size_ = 0;  // the model's, for CalibrateHost
  int64_t ffn_ = 0;
  metrics::Registry* registry_ = nullptr;  // Set by Init; may be null.
  std::string engine_name_;                // Set by Init.
  base::Mutex gauges_mu_;
  std::map<std::string, metrics::Gauge*, std::less<>> policy_gauges_
      ABSL_GUARDED_BY(gauges_mu_);

  // The running step's token counts per (layer, expert), for OnStepEnd.
  base::Mutex step_mu_;
  int64_t step_ ABSL_GUARDED_BY(step_mu_) = 0;
  std::vector<uint32_t> activations_ ABSL_GUARDED_BY(step_mu_);

  // Last member: destroyed first, so no completion runs into a dead object.
  std::unique_ptr<Link> link_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_EXPERT_RESIDENCY_H_
