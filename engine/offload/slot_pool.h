// SlotPool: the fast tier's slots as a state machine. It knows which expert
// each slot holds, whether the slot is empty, loading or ready, its pins and
// its in-use count, and it finds a slot for a new load (a free one, or a
// victim the policy picks among the evictable ones). It moves no bytes and
// keeps no statistics: a Loader fills a reserved slot and reports back with
// Complete(); Observers hear of every transition (ResidencyAccounting counts
// them, HookQueue turns them into policy hooks).
//
// Slots: each is empty | loading | ready and holds one expert, with a pin
// count, an in-use count (Acquires not yet Released, including ones still
// waiting for the load), a "prefetched, not yet used" flag and a
// "demand-loaded, not yet acquired" flag. A loading slot also knows its
// load: kind, priority, number (seq, unique in the pool) and whether it was
// promoted to the demand lane.
//
// Lanes and cancellation (the Loader decides what they mean; the residency
// maps them onto the Link's lanes): a demand load goes in the demand lane,
// a prefetch load in the prefetch lane with its priority. An Acquire that
// finds its expert loading by a prefetch not yet promoted promotes it
// (Loader::PromoteLoad), as does a demand LoadNoWait of a layer's experts.
// CancelPrefetch withdraws a prefetch load that nobody waits for, is not
// pinned or promoted and has not started moving bytes (Loader::CancelLoad):
// the slot goes back to empty, observers hear OnLoadCancelled (neither
// OnLoaded nor OnEvicted), and no Complete follows.
//
// Invariants (under mu_):
//  1. slot_of_[id] == s  <=>  slots_[s] is loading or ready and holds id.
//  2. A slot is evictable <=> ready && in_use == 0 && pins == 0. Only
//     evictable slots are evicted; a loading slot is never evicted or reused.
//  3. A slot is free <=> empty && in_use == 0. (An empty slot with in_use > 0
//     is a failed load whose waiters have not all seen the error yet.)
//  4. state_count_[k] == the number of slots in state k.
//  5. Every load started (state -> loading) ends in exactly one Complete(),
//     or in one successful CancelLoad (CancelPrefetch) and no Complete.
//
// Victims (for a load that finds no free slot): the candidates are the
// evictable slots in three tiers, and the policy's ChooseVictims picks from
// the first non-empty tier it may reach:
//   tier 0  not protected (protected = the experts of the running layer,
//           Protect());
//   tier 1  protected, already acquired or never demand-loaded;
//   tier 2  protected, demand-loaded and not yet acquired.
// Acquire reaches all three (so that one slot always makes progress);
// LoadNoWait and Pin reach tier 0 only. The policy's choice is checked again
// after it returns; if it no longer holds, the candidates' order decides.
//
// Ownership: borrows the policy (only ChooseVictims is called), the Loader
// and the Observers; all must outlive the pool.
// Thread safety: every method may be called from any thread. One mutex
// guards all slot state. ChooseVictims and Loader::StartLoad run without it,
// so the policy may call back into the pool and a loader may complete at
// once; Observer methods and Loader::Released, PromoteLoad and CancelLoad
// run with it held, so they must not block or call into the pool.
#ifndef MOESERVE_ENGINE_OFFLOAD_SLOT_POOL_H_
#define MOESERVE_ENGINE_OFFLOAD_SLOT_POOL_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "engine/model_weights.h"
#include "engine/offload/offload_policy.h"

namespace moeserve::engine {

class SlotPool {
 public:
  enum class State { kEmpty = 0, kLoading = 1, kReady = 2 };
  // A demand load is a miss; a prefetch load is started by Prefetch or Pin.
  enum class LoadKind { kDemand, kPrefetch };

  // One load the pool asks a Loader to start.
  struct LoadStart {
    int slot = -1;
    ExpertId id;
    LoadKind kind = LoadKind::kDemand;
    int priority = 0;  // Prefetch loads: higher first.
    uint64_t seq = 0;  // The load's number, unique in the pool (from 1).
  };

  // Fills reserved slots.
  class Loader {
   public:
    virtual ~Loader() = default;
    // Starts filling `slot` with expert `id`. Must lead to exactly one
    // Complete(slot, status), from any thread, possibly before it returns.
    // Runs without the pool's lock.
    virtual void StartLoad(int slot, ExpertId id) = 0;
    // Starts every load of `loads` (one submission where the loader can);
    // each as StartLoad, unless CancelLoad took it first. Runs without the
    // pool's lock. Default: StartLoad for each.
    virtual void StartLoads(std::span<const LoadStart> loads) {
      for (const LoadStart& l : loads) StartLoad(l.slot, l.id);
    }
    // Load `seq` of `slot` (a prefetch) is now needed on demand: move it
    // ahead of the prefetches (possibly before StartLoads saw it). Runs with
    // the pool's lock held. Default: nothing.
    virtual void PromoteLoad(int slot, uint64_t seq) { (void)slot, (void)seq; }
    // Withdraws load `seq` of `slot` if it has not started moving bytes
    // (possibly before StartLoads saw it); true means it never completes
    // (no Complete follows). Runs with the pool's lock held, so it must not
    // call into the pool. Default: false (loads cannot be cancelled).
    virtual bool CancelLoad(int slot, uint64_t seq) {
      (void)slot, (void)seq;
      return false;
    }
    // One holder of `slot` releases it (Release, before its in-use count
    // drops). Runs with the pool's lock held.
    virtual void Released(int slot) { (void)slot; }
  };

  // Hears of every transition, in the order they happen, with the pool's
  // lock held (so it must not block or call into the pool).
  class Observer {
   public:
    virtual ~Observer() = default;
    virtual void OnLoadStarted(ExpertId id, LoadKind kind) {
      (void)id, (void)kind;
    }
    // A load completed successfully: the slot is ready.
    virtual void OnLoaded(ExpertId id) { (void)id; }
    // Acquire found `id` ready and not a pending demand load of its own.
    virtual void OnHit(ExpertId id) { (void)id; }
    // Acquire found `id` still loading (a prefetch or Pin load, or another
    // Acquire's miss) and not a pending demand load of its own.
    virtual void OnHitLoading(ExpertId id) { (void)id; }
    // A prefetch load of `id` was cancelled (CancelPrefetch): the slot is
    // empty again and no bytes moved.
    virtual void OnLoadCancelled(ExpertId id) { (void)id; }
    // The first Acquire of a prefetched expert.
    virtual void OnPrefetchUsed(ExpertId id) { (void)id; }
    // A ready expert left the fast tier (a victim, or Evict()).
    // `prefetched_unused`: prefetched and never acquired; `demand_unused`:
    // demand-loaded and not yet acquired.
    virtual void OnEvicted(ExpertId id, bool prefetched_unused,
                           bool demand_unused) {
      (void)id, (void)prefetched_unused, (void)demand_unused;
    }
    // Acquire found no slot and nothing that could free one.
    virtual void OnAcquireFailed(ExpertId id) { (void)id; }
    // Seconds one Acquire spent blocked (reported once per Acquire, > 0).
    virtual void OnStall(double seconds) { (void)seconds; }
    // Slots per state, after every state change.
    virtual void OnStateCounts(int empty, int loading, int ready) {
      (void)empty, (void)loading, (void)ready;
    }
  };

  struct Counts {
    int empty = 0;
    int loading = 0;
    int ready = 0;
    int in_use = 0;             // Slots with in_use > 0.
    int prefetched_unused = 0;  // Resident, prefetched, never acquired.
  };

  // One slot as seen by slots().
  struct SlotView {
    State state = State::kEmpty;
    ExpertId id;
    int pins = 0;
    int in_use = 0;
  };

  // REQUIRES: num_slots >= 1; every pointer non-null.
  SlotPool(int num_layers, int num_experts, int num_slots,
           OffloadPolicy* policy, Loader* loader,
           std::vector<Observer*> observers);
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  int num_slots() const { return num_slots_; }

  // `experts` of `layer` become the protected set (replacing the last one).
  void Protect(int layer, std::span<const int> experts)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Unprotect() ABSL_LOCKS_EXCLUDED(mu_);

  // The slot holding `id`, ready: a hit if ready, a hit_loading if loading
  // (waiting for it, and promoting it if it is an unpromoted prefetch),
  // else a demand load into a free slot or a victim (any tier);
  // while no slot is evictable but one is loading, waits for it and retries.
  // in_use++ on success. RESOURCE_EXHAUSTED "fast tier of N slots too
  // small: ..." when every slot is pinned or in use; the load's error when
  // it failed.
  absl::StatusOr<int> Acquire(ExpertId id) ABSL_LOCKS_EXCLUDED(mu_);
  // The slot holding `id` when it is resident, waiting while it loads;
  // never starts a load, reports to no observer (no hit, no stall, no
  // prefetch use) and promotes nothing. in_use++ on success (Release undoes
  // it). FAILED_PRECONDITION naming the expert when it is not resident; the
  // load's error when it failed. For a draft model's view of the tier.
  absl::StatusOr<int> AcquireResident(ExpertId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Loader::Released(slot), then in_use--. Logs an error and does nothing
  // when `id` is not acquired.
  void Release(ExpertId id) ABSL_LOCKS_EXCLUDED(mu_);

  // If `id` is not resident and a slot can be had without waiting (free,
  // or a tier-0 victim), starts a `kind` load (`priority`: prefetch lane
  // order, higher first); returns whether one started.
  bool LoadNoWait(ExpertId id, LoadKind kind, int priority = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // LoadNoWait for each of `ids`, in order, started as one
  // Loader::StartLoads; a kDemand call also promotes the unpromoted
  // prefetch loads of `ids` it finds. Returns the loads started.
  int LoadManyNoWait(std::span<const ExpertId> ids, LoadKind kind,
                     int priority = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the prefetch load of `id` if it is loading, not pinned, not
  // promoted, nobody waits for it and the Loader withdraws it
  // (CancelLoad); the slot is empty again. False otherwise.
  bool CancelPrefetch(ExpertId id) ABSL_LOCKS_EXCLUDED(mu_);
  // pins++, loading `id` first as LoadNoWait(kPrefetch) would; false (and no
  // pin) when it is not resident and no slot can be had.
  bool Pin(ExpertId id) ABSL_LOCKS_EXCLUDED(mu_);
  // pins-- (no-op at 0 or when not resident).
  void Unpin(ExpertId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops `id` if its slot is evictable; no-op otherwise.
  void Evict(ExpertId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Loading or ready.
  bool IsResident(ExpertId id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Ready (resident and not loading).
  bool IsReady(ExpertId id) const ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the load of `slot` (Loader contract). On error the slot goes back
  // to empty and drops its pins; its waiters get `status`.
  void Complete(int slot, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until no slot is loading.
  void WaitIdle() const ABSL_LOCKS_EXCLUDED(mu_);
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<SlotView> slots() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Slot {
    State state = State::kEmpty;
    ExpertId id;
    int pins = 0;
    int in_use = 0;
    bool prefetched_unused = false;
    bool demand_pending = false;
    // The current (or last) load.
    LoadKind kind = LoadKind::kDemand;
    int priority = 0;
    uint64_t seq = 0;
    bool promoted = false;
    absl::Status error;  // Last failed load, for its waiters.
  };
  enum class Reach { kUnprotected, kAll };
  // Outcome of TrySlot: a slot index, or none (and whether waiting helps).
  struct SlotResult {
    int slot = -1;
    bool retry = false;        // State changed while unlocked: look again.
    bool loading_any = false;  // No victim now, but a load may free one.
  };

  int Flat(ExpertId id) const { return id.layer * num_experts_ + id.expert; }
  bool Valid(ExpertId id) const {
    return id.layer >= 0 && id.layer < num_layers_ && id.expert >= 0 &&
           id.expert < num_experts_;
  }
  static bool Evictable(const Slot& s) {
    return s.state == State::kReady && s.in_use == 0 && s.pins == 0;
  }

  // Acquire's search: the slot holding `id` (hit), or one reserved for its
  // demand load (*load = true), in_use already counted.
  absl::StatusOr<int> FindOrReserve(ExpertId id, double* stall, bool* load)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for `slot`'s load; the Acquire's result.
  absl::StatusOr<int> AwaitReady(int slot, double* stall)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slot holding `id`, or one reserved for a `kind` load of it
  // (*started = the load to start) found without waiting; -1 when none.
  int FindOrReserveNoWait(ExpertId id, LoadKind kind, int priority,
                          LoadStart* started)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free slot, or an evicted victim; drops mu_ around ChooseVictims.
  SlotResult TrySlot(Reach reach) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<ExpertId> Candidates(Reach reach, bool* loading_any) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int PickVictim(const std::vector<ExpertId>& candidates, Reach reach)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictSlot(int s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks `s` loading `id`; the caller then calls loader_->StartLoads with
  // the returned LoadStart without the lock.
  LoadStart Reserve(int s, ExpertId id, LoadKind kind, int priority = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Promotes the load of slot `s` if it is an unpromoted prefetch.
  void MaybePromote(int s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetState(Slot& slot, State state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for any slot change; adds the time waited to *stall.
  void WaitTimed(double* stall) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportStall(double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Exhausted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_layers_;
  const int num_experts_;
  const int num_slots_;
  OffloadPolicy* const policy_;
  Loader* const loader_;
  const std::vector<Observer*> observers_;

  mutable base::Mutex mu_;
  mutable base::CondVar changed_;  // Any slot state, in_use or pin change.
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<int> slot_of_ ABSL_GUARDED_BY(mu_);     // [Flat(id)] or -1.
  std::vector<char> protected_ ABSL_GUARDED_BY(mu_);  // [Flat(id)].
  std::vector<int> protected_list_ ABSL_GUARDED_BY(mu_);
  int state_count_[3] ABSL_GUARDED_BY(mu_) = {0, 0, 0};
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_SLOT_POOL_H_
