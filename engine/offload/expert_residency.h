// ExpertResidency: the fast tier (a fixed pool of expert slots), its state
// machine, and the levers an offload policy pulls. It is the ExpertProvider
// the forward pass uses and the ResidencyControl the policy sees.
//
// Ownership: owns the slot memory (one allocation of slots x blob bytes;
// real memory, real copies) and the Link. The slots live in host RAM, or in
// device memory when Create() is given a non-CPU backend: then the Link
// copies into them on its own streams (link_transport.h), each slot has an
// event recorded on the compute stream at every Release, and a copy into a
// slot first waits on the device for that event, so a blob is never
// overwritten while kernels enqueued before its Release may still read it.
// Borrows the ModelWeights, the SlowTier, the policy and the registry (all must
// outlive it). Create() calls policy->Attach(this).
//
// Slots: slots = min(capacity_bytes / blob bytes, layers x experts). Each
// slot is empty | loading | ready, holds one expert, and has a pin count, an
// in-use count (Acquires not yet Released, including ones still waiting for
// the load), a "prefetched, not yet used" flag and a "demand-loaded, not yet
// acquired" flag. A slot is evictable when ready && in_use == 0 && pins == 0.
//
// Semantics:
//  - BeginStep: policy->OnStepBegin. EndStep: policy->OnStepEnd with the
//    step's per-(layer, expert) token counts (summed from BeginLayer).
//  - BeginLayer(layer, experts, ...): `experts` become the protected set;
//    policy->OnRoute; then a demand load for each expert of the set that is
//    not resident, as far as slots can be had without waiting (free slot, or
//    a ChooseVictims victim among evictable, unprotected slots).
//  - Acquire(id): policy->OnAccess(id). Resident (ready or loading) -> used
//    as is; otherwise a demand load into a free slot or a victim (unprotected
//    evictable slots first; protected ones only when nothing else is
//    evictable, so that one slot always makes progress); when no slot is
//    evictable but one is loading it waits for that load and retries; when
//    every slot is pinned or in use: RESOURCE_EXHAUSTED "fast tier of N slots
//    too small: ...". Then blocks until ready. in_use++.
//  - Release(id): in_use--. EndLayer: clear the protected set;
//    policy->OnLayerDone.
//  - Prefetch(id): if not resident and a slot can be had without waiting
//    (free, or a victim among evictable unprotected slots) start a load
//    marked prefetched; returns whether one started.
//  - Pin(id): pins++ (a non-resident expert is loaded first, as a prefetch
//    transfer; false, and no pin, when no slot can be had without waiting).
//    Unpin: pins-- (no-op at 0). Evict: drops a ready, unpinned, unused
//    expert (no-op otherwise, also while loading). IsResident: ready or
//    loading.
//  Policy hooks, ChooseVictims included, run without the residency's lock, so
//  a policy may call back into ResidencyControl from any hook.
//
// Accounting (stats(); the metrics move with it):
//  - A demand load (by BeginLayer or Acquire) is a miss. An Acquire that
//    finds its expert demand-loaded and not yet acquired consumes that miss;
//    any other Acquire that finds its expert resident is a hit. An Acquire
//    that fails before starting a load (RESOURCE_EXHAUSTED) is neither and
//    counts in acquire_failures. Hence hits + misses == Acquires that got
//    a slot (successful ones, plus ones whose load then failed) +
//    demand_evicted_unused (demand loads evicted before their Acquire; only
//    when a tier smaller than a layer's experts forces it).
//  - Bytes moved per transfer = the padded blob size (ExpertBlob::bytes).
//    link_bytes == (misses + prefetch_loads) x slot_bytes, minus failed
//    transfers (which move no accounted bytes).
//  - prefetch_loads = transfers started by Prefetch or Pin. A prefetched
//    expert's first Acquire counts prefetch_used; evicting it before any
//    Acquire counts prefetch_wasted. prefetch_used + prefetch_wasted +
//    prefetched_unused_resident == prefetch_loads (minus failed ones).
//  - stall_seconds: wall time Acquire spent blocked (waiting for its load or
//    for a loading slot to become evictable).
//  - link_busy_seconds: wall time the link workers spent on transfers.
//
// Thread safety: every method may be called from any thread. The engine
// calls the ExpertProvider side from its step thread; policy hooks are then
// one at a time. With concurrent callers the policy must be thread-safe.
// std::mutex + std::condition_variable rather than absl::Mutex: Debian's
// Abseil is not TSan-instrumented, so TSan would not see absl::Mutex's
// synchronisation (same choice as kernels/cpu/thread_pool).
#ifndef MOESERVE_ENGINE_OFFLOAD_EXPERT_RESIDENCY_H_
#define MOESERVE_ENGINE_OFFLOAD_EXPERT_RESIDENCY_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/expert_provider.h"
#include "engine/model_weights.h"
#include "engine/offload/link.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/slow_tier.h"
#include "kernels/backend.h"
#include "metrics/registry.h"

namespace moeserve::engine {

class ResidencyMetrics;

struct ResidencyStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t acquire_failures = 0;
  uint64_t demand_evicted_unused = 0;
  uint64_t link_bytes = 0;
  uint64_t link_transfers = 0;
  uint64_t failed_transfers = 0;
  double link_busy_seconds = 0;
  double stall_seconds = 0;
  uint64_t prefetch_loads = 0;
  uint64_t prefetch_used = 0;
  uint64_t prefetch_wasted = 0;
  uint64_t prefetched_unused_resident = 0;  // Now resident, never acquired.
  int slots = 0;
  uint64_t slot_bytes = 0;      // == ExpertBlob::bytes.
  uint64_t capacity_bytes = 0;  // slots x slot_bytes.
  int slots_empty = 0;
  int slots_loading = 0;
  int slots_ready = 0;
  int slots_in_use = 0;  // Slots with in_use > 0.
};

class ExpertResidency final : public ExpertProvider, public ResidencyControl {
 public:
  // The engine passes MoeModel::PredictExperts.
  using PredictFn = std::function<std::vector<int>(
      int layer, const float* hidden, int64_t n, int k)>;

  // InvalidArgument when capacity_bytes holds no blob (or an argument is
  // null); ResourceExhausted when the slot memory cannot be allocated.
  // `registry` may be null (no metrics); `engine_name` is the `policy` label.
  // `device` (may be null = host RAM, SlowTier::Read straight into the
  // slots; must outlive the residency): the backend whose memory holds the
  // slots, filled through its copy streams and events. Any backend works
  // (the CPU backend exercises the device path in tests).
  static absl::StatusOr<std::unique_ptr<ExpertResidency>> Create(
      const ModelWeights* weights, SlowTier* slow, uint64_t capacity_bytes,
      const LinkOptions& link, OffloadPolicy* policy, PredictFn predict,
      metrics::Registry* registry, std::string engine_name,
      kernels::Backend* device = nullptr);

  ~ExpertResidency() override;  // REQUIRES: nothing acquired.

  // ExpertProvider.
  kernels::Device device() const override;
  absl::Status AttachCompute(kernels::Backend* backend,
                             kernels::Stream* stream) override;
  void BeginStep(const StepInfo& info) override;
  void EndStep() override;
  void BeginLayer(int layer, std::span<const int> experts,
                  std::span<const int> token_counts, const float* hidden,
                  int64_t n) override;
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override;
  void Release(ExpertId id) override;
  void EndLayer(int layer) override;

  // ResidencyControl.
  int num_layers() const override { return num_layers_; }
  int num_experts() const override { return num_experts_; }
  int experts_per_token() const override { return top_k_; }
  int capacity_slots() const override { return num_slots_; }
  bool IsResident(ExpertId id) const override;
  bool Prefetch(ExpertId id) override;
  bool Pin(ExpertId id) override;
  void Unpin(ExpertId id) override;
  void Evict(ExpertId id) override;
  std::vector<int> PredictExperts(int layer, const float* hidden, int64_t n,
                                  int k) override;

  ResidencyStats stats() const;
  // Blocks until no slot is loading (for tests and benchmarks).
  void WaitIdle();
  bool link_emulation_on() const { return link_->emulation_on(); }

 private:
  enum class State { kEmpty, kLoading, kReady };
  enum class Load { kDemand, kPrefetch };
  struct Slot {
    State state = State::kEmpty;
    ExpertId id;
    int pins = 0;
    int in_use = 0;
    bool prefetched_unused = false;
    bool demand_pending = false;
    absl::Status error;  // Last failed load, for its waiters.
  };
  // How far victim selection may reach.
  enum class Reach { kUnprotected, kAll };
  // Outcome of TrySlot: a slot index, or none (and whether waiting helps).
  struct SlotResult {
    int slot = -1;
    bool retry = false;        // State changed under us: look again.
    bool loading_any = false;  // No victim now, but a load may free one.
  };

  ExpertResidency(const ModelWeights* weights, SlowTier* slow, int slots,
                  OffloadPolicy* policy, PredictFn predict);
  absl::Status Init(const LinkOptions& link, metrics::Registry* registry,
                    const std::string& engine_name, kernels::Backend* device);
  bool on_device() const { return device_ != nullptr; }

  int Flat(ExpertId id) const { return id.layer * num_experts_ + id.expert; }
  std::byte* SlotData(int s) const { return slot_base_ + s * slot_bytes_; }
  bool Evictable(const Slot& s) const {
    return s.state == State::kReady && s.in_use == 0 && s.pins == 0;
  }

  // Finds a free slot or evicts a victim; may drop `lock` around
  // ChooseVictims.
  SlotResult TrySlot(std::unique_lock<std::mutex>& lock, Reach reach)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<ExpertId> Candidates(Reach reach, bool* loading_any) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int PickVictim(std::unique_lock<std::mutex>& lock,
                 const std::vector<ExpertId>& candidates, Reach reach)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictSlot(int s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartLoad(int s, ExpertId id, Load kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLoaded(int s, absl::Status status);
  // The slot holding `id`, starting a `kind` load without waiting (victims
  // unprotected only) if it is not resident; -1 when no slot can be had.
  int EnsureNoWait(std::unique_lock<std::mutex>& lock, ExpertId id, Load kind,
                   bool* started) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acquire's slot search (hit, miss or failure); returns the slot.
  absl::StatusOr<int> FindOrLoad(ExpertId id,
                                 std::unique_lock<std::mutex>& lock,
                                 double* stall)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WaitTimed(std::unique_lock<std::mutex>& lock, double* stall,
                 const std::function<bool()>& done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddStall(double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Exhausted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetState(Slot& s, State state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishCacheGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Count(uint64_t* field, metrics::Counter* metric)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ModelWeights* const weights_;
  SlowTier* const slow_;
  OffloadPolicy* const policy_;
  const PredictFn predict_;
  const int num_layers_;
  const int num_experts_;
  const int top_k_;
  const int num_slots_;
  const size_t slot_bytes_;

  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeDeleter> arena_;  // host slots
  kernels::Backend* device_ = nullptr;             // device slots
  std::unique_ptr<kernels::Buffer> device_arena_;
  std::byte* slot_base_ = nullptr;
  // Device slots: [slot] event recorded on compute_ at each Release.
  std::vector<std::unique_ptr<kernels::Event>> released_;
  kernels::Stream* compute_ = nullptr;
  std::unique_ptr<ResidencyMetrics> metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // Any slot state, in_use or pin change.
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<int> slot_of_ ABSL_GUARDED_BY(mu_);     // [Flat(id)] or -1.
  std::vector<char> protected_ ABSL_GUARDED_BY(mu_);  // [Flat(id)].
  std::vector<int> protected_list_ ABSL_GUARDED_BY(mu_);
  int state_count_[3] ABSL_GUARDED_BY(mu_) = {0, 0, 0};
  std::vector<uint32_t> activations_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t acquire_failures_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t demand_evicted_unused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_loads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_wasted_ ABSL_GUARDED_BY(mu_) = 0;
  double stall_seconds_ ABSL_GUARDED_BY(mu_) = 0;

  // Last member: destroyed first, so no completion runs into a dead object.
  std::unique_ptr<Link> link_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_EXPERT_RESIDENCY_H_
