#include "engine/offload/residency_accounting.h"

namespace moeserve::engine {

using base::MutexLock;

absl::Status ResidencyAccounting::Init(metrics::Registry* registry,
                                       const std::string& engine_name,
                                       const LinkOptions& link) {
  if (registry != nullptr) {
    absl::Status s = metrics_.Register(registry, engine_name, link);
    if (!s.ok()) return s;
  }
  metrics_.SetCapacity(static_cast<double>(num_slots_ * slot_bytes_));
  OnStateCounts(num_slots_, 0, 0);
  return absl::OkStatus();
}

double ResidencyAccounting::stall_seconds() const {
  MutexLock lock(&mu_);
  return stall_seconds_;
}

void ResidencyAccounting::FillCounters(ResidencyStats* stats) const {
  MutexLock lock(&mu_);
  stats->hits = hits_;
  stats->hits_loading = hits_loading_;
  stats->misses = misses_;
  stats->acquire_failures = acquire_failures_;
  stats->demand_evicted_unused = demand_evicted_unused_;
  stats->stall_seconds = stall_seconds_;
  stats->prefetch_loads = prefetch_loads_;
  stats->prefetch_used = prefetch_used_;
  stats->prefetch_wasted = prefetch_wasted_;
  stats->prefetch_cancelled = prefetch_cancelled_;
  stats->inplace = inplace_;
  stats->inplace_seconds = inplace_seconds_;
  stats->inplace_wait_seconds = inplace_wait_seconds_;
}

void ResidencyAccounting::OnLoadStarted(ExpertId, SlotPool::LoadKind kind) {
  MutexLock lock(&mu_);
  if (kind == SlotPool::LoadKind::kDemand) {
    Count(&misses_, metrics_.misses);
  } else {
    ++prefetch_loads_;
  }
}

void ResidencyAccounting::OnHit(ExpertId) {
  MutexLock lock(&mu_);
  Count(&hits_, metrics_.hits);
}

void ResidencyAccounting::OnHitLoading(ExpertId) {
  MutexLock lock(&mu_);
  Count(&hits_loading_, metrics_.hit_loading);
}

void ResidencyAccounting::OnLoadCancelled(ExpertId) {
  MutexLock lock(&mu_);
  Count(&prefetch_cancelled_, metrics_.prefetch_cancelled);
}

void ResidencyAccounting::OnPrefetchUsed(ExpertId) {
  MutexLock lock(&mu_);
  Count(&prefetch_used_, metrics_.prefetch_used);
}

void ResidencyAccounting::OnEvicted(ExpertId, bool prefetched_unused,
                                    bool demand_unused) {
  MutexLock lock(&mu_);
  if (prefetched_unused) Count(&prefetch_wasted_, metrics_.prefetch_wasted);
  if (demand_unused) ++demand_evicted_unused_;
}

void ResidencyAccounting::OnAcquireFailed(ExpertId) {
  MutexLock lock(&mu_);
  ++acquire_failures_;
}

void ResidencyAccounting::OnStall(double seconds) {
  MutexLock lock(&mu_);
  stall_seconds_ += seconds;
  if (metrics_.stall_seconds != nullptr) metrics_.stall_seconds->Inc(seconds);
}

void ResidencyAccounting::OnInPlace(double seconds) {
  MutexLock lock(&mu_);
  Count(&inplace_, metrics_.inplace);
  inplace_seconds_ += seconds;
  if (metrics_.inplace_seconds != nullptr) {
    metrics_.inplace_seconds->Inc(seconds);
  }
}

void ResidencyAccounting::OnInPlaceWait(double seconds) {
  MutexLock lock(&mu_);
  inplace_wait_seconds_ += seconds;
  if (metrics_.inplace_wait_seconds != nullptr) {
    metrics_.inplace_wait_seconds->Inc(seconds);
  }
}

void ResidencyAccounting::OnStateCounts(int empty, int loading, int ready) {
  const int counts[3] = {empty, loading, ready};
  for (int i = 0; i < 3; ++i) {
    if (metrics_.cache_bytes[i] != nullptr) {
      metrics_.cache_bytes[i]->Set(
          static_cast<double>(counts[i] * slot_bytes_));
    }
  }
}

void ResidencyAccounting::Count(uint64_t* field, metrics::Counter* metric) {
  ++*field;
  if (metric != nullptr) metric->Inc();
}

}  // namespace moeserve::engine
