// ResidencyAccounting: the expert tier's numbers (DESIGN.md "Metrics"). It
// hears every slot transition from the SlotPool (it is one of its
// Observers), keeps exact counts for ExpertResidency::stats() and moves the
// Prometheus children (ResidencyMetrics) with them.
//
// What counts (the stats and the metrics move together):
//  - A demand load (by BeginLayer or Acquire) is a miss. An Acquire that
//    finds its expert demand-loaded and not yet acquired consumes that miss;
//    any other Acquire that finds its expert resident is a hit when it is
//    ready, a hit_loading when it is still loading (in flight or queued on
//    the link: a prefetch, a Pin's load, or another Acquire's miss). An
//    Acquire that fails before starting a load (RESOURCE_EXHAUSTED) is none
//    of these and counts in acquire_failures. Hence hits + hits_loading +
//    misses == Acquires that got a slot (successful ones, plus ones whose
//    load then failed) + demand_evicted_unused (demand loads evicted before
//    their Acquire; only when a tier smaller than a layer's experts forces
//    it). Only target acquires count: the draft view counts nothing. A hit
//    rate is hits / (hits + hits_loading + misses).
//  - prefetch_loads = loads started by Prefetch or Pin. A prefetched
//    expert's first Acquire counts prefetch_used; evicting it before any
//    Acquire counts prefetch_wasted; cancelling its queued load
//    (CancelPrefetch) counts prefetch_cancelled. prefetch_used +
//    prefetch_wasted + prefetch_cancelled + prefetched_unused_resident ==
//    prefetch_loads (minus failed ones).
//  - Link transfers: link_transfers == misses + prefetch_loads -
//    prefetch_cancelled - failed_transfers, and link_bytes ==
//    link_transfers x slot_bytes.
//  - inplace: acquisitions served in place from the slow tier
//    (ResidencyControl::ComputeInPlace), neither hits nor misses, no link
//    transfer; inplace_seconds their emulated slow-side compute time
//    (expert_residency.h), inplace_wait_seconds the time layers waited for
//    the slow side (moeserve_expert_requests_total{result="inplace"},
//    moeserve_expert_inplace_seconds_total,
//    moeserve_expert_inplace_wait_seconds_total).
//  - stall_seconds: wall time Acquire spent blocked (waiting for its load or
//    for a loading slot to become evictable).
//  - moeserve_expert_cache_bytes{state}: slots per state x slot bytes.
//  The link's bytes and busy seconds are counted by the Link itself, into
//  the children link_counters() hands it.
//
// Ownership: owns its ResidencyMetrics; the children belong to the Registry,
// which must outlive this.
// Thread safety: Init once, before the pool is used. The Observer methods
// run under the pool's lock, from any thread; the counters have their own
// mutex, so FillCounters may be called from any thread. A stats() snapshot
// taken while loads run may be torn between these counters and the pool's
// slot counts; each field is exact.
#ifndef MOESERVE_ENGINE_OFFLOAD_RESIDENCY_ACCOUNTING_H_
#define MOESERVE_ENGINE_OFFLOAD_RESIDENCY_ACCOUNTING_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "engine/model_weights.h"
#include "engine/offload/link.h"
#include "engine/offload/residency_metrics.h"
#include "engine/offload/slot_pool.h"
#include "metrics/registry.h"

namespace moeserve::engine {

// What ExpertResidency::stats() reports (see above for the counters).
struct ResidencyStats {
  uint64_t hits = 0;          // Ready when acquired.
  uint64_t hits_loading = 0;  // Resident but still loading when acquired.
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
  uint64_t prefetch_cancelled = 0;          // Queued loads withdrawn, no bytes.
  uint64_t prefetched_unused_resident = 0;  // Now resident, never acquired.
  uint64_t inplace = 0;             // Computed in place on the slow tier.
  double inplace_seconds = 0;       // Their emulated slow-side time.
  double inplace_wait_seconds = 0;  // Layers waiting for the slow side.
  int slots = 0;
  uint64_t slot_bytes = 0;      // == ExpertBlob::bytes.
  uint64_t capacity_bytes = 0;  // slots x slot_bytes.
  int slots_empty = 0;
  int slots_loading = 0;
  int slots_ready = 0;
  int slots_in_use = 0;  // Slots with in_use > 0.
};

class ResidencyAccounting final : public SlotPool::Observer {
 public:
  ResidencyAccounting(int num_slots, uint64_t slot_bytes)
      : num_slots_(num_slots), slot_bytes_(slot_bytes) {}

  // Registers the metric children labelled policy=`engine_name` (none when
  // `registry` is null) and publishes the capacity and the all-empty cache
  // gauges.
  absl::Status Init(metrics::Registry* registry, const std::string& engine_name,
                    const LinkOptions& link);
  // For the Link: moeserve_link_bytes_total{h2d} and link_busy_seconds.
  LinkCounters link_counters() const {
    return {metrics_.link_bytes, metrics_.link_busy_seconds};
  }

  // Copies hits, hits_loading, misses, acquire_failures,
  // demand_evicted_unused, stall_seconds, prefetch_loads, prefetch_used,
  // prefetch_wasted, prefetch_cancelled, inplace and inplace_seconds.
  void FillCounters(ResidencyStats* stats) const ABSL_LOCKS_EXCLUDED(mu_);
  // stall_seconds alone (the speculative governor asks every pass).
  double stall_seconds() const ABSL_LOCKS_EXCLUDED(mu_);

  // SlotPool::Observer.
  void OnLoadStarted(ExpertId id, SlotPool::LoadKind kind) override;
  void OnHit(ExpertId id) override;
  void OnHitLoading(ExpertId id) override;
  void OnLoadCancelled(ExpertId id) override;
  void OnPrefetchUsed(ExpertId id) override;
  void OnEvicted(ExpertId id, bool prefetched_unused,
                 bool demand_unused) override;
  void OnAcquireFailed(ExpertId id) override;
  void OnStall(double seconds) override;
  void OnStateCounts(int empty, int loading, int ready) override;

  // One expert computed in place (not a SlotPool event: the residency
  // reports it at the Release), `seconds` its emulated slow-side time.
  void OnInPlace(double seconds) ABSL_LOCKS_EXCLUDED(mu_);
  // A layer waited `seconds` for its in-place experts.
  void OnInPlaceWait(double seconds) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Count(uint64_t* field, metrics::Counter* metric)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_slots_;
  const uint64_t slot_bytes_;
  ResidencyMetrics metrics_;  // Set by Init, then read-only.

  mutable base::Mutex mu_;
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_loading_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t acquire_failures_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t demand_evicted_unused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_loads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_wasted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  double stall_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t inplace_ ABSL_GUARDED_BY(mu_) = 0;
  double inplace_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double inplace_wait_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_RESIDENCY_ACCOUNTING_H_
