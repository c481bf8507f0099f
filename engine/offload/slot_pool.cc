#include "engine/offload/slot_pool.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {

using Clock = std::chrono::steady_clock;
using base::MutexLock;

SlotPool::SlotPool(int num_layers, int num_experts, int num_slots,
                   OffloadPolicy* policy, Loader* loader,
                   std::vector<Observer*> observers)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      num_slots_(num_slots),
      policy_(policy),
      loader_(loader),
      observers_(std::move(observers)),
      slots_(num_slots),
      slot_of_(num_layers * num_experts, -1),
      protected_(num_layers * num_experts, 0) {
  state_count_[static_cast<int>(State::kEmpty)] = num_slots;
}

// ---------------------------------------------------------------- protect

void SlotPool::Protect(int layer, std::span<const int> experts) {
  MutexLock lock(&mu_);
  for (int f : protected_list_) protected_[f] = 0;
  protected_list_.clear();
  for (int e : experts) {
    const int f = Flat({layer, e});
    protected_[f] = 1;
    protected_list_.push_back(f);
  }
}

void SlotPool::Unprotect() {
  MutexLock lock(&mu_);
  for (int f : protected_list_) protected_[f] = 0;
  protected_list_.clear();
}

// ---------------------------------------------------------------- acquire

absl::StatusOr<int> SlotPool::Acquire(ExpertId id) {
  double stall = 0;
  bool load = false;
  int slot = -1;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<int> found = FindOrReserve(id, &stall, &load);
    if (!found.ok()) {
      ReportStall(stall);
      return found.status();
    }
    slot = *found;
    if (!load) return AwaitReady(slot, &stall);
  }
  loader_->StartLoad(slot, id);
  MutexLock lock(&mu_);
  return AwaitReady(slot, &stall);
}

absl::StatusOr<int> SlotPool::FindOrReserve(ExpertId id, double* stall,
                                            bool* load) {
  const int f = Flat(id);
  for (;;) {
    if (const int s = slot_of_[f]; s >= 0) {
      Slot& slot = slots_[s];
      if (slot.demand_pending) {
        slot.demand_pending = false;  // Its miss was counted at the load.
      } else {
        for (Observer* o : observers_) o->OnHit(id);
      }
      ++slot.in_use;
      return s;
    }
    const SlotResult r = TrySlot(Reach::kAll);
    if (r.retry || (r.slot >= 0 && slot_of_[f] >= 0)) continue;
    if (r.slot >= 0) {
      Reserve(r.slot, id, LoadKind::kDemand);
      slots_[r.slot].demand_pending = false;  // Consumed right here.
      ++slots_[r.slot].in_use;
      *load = true;
      return r.slot;
    }
    if (!r.loading_any) {
      for (Observer* o : observers_) o->OnAcquireFailed(id);
      return Exhausted();
    }
    WaitTimed(stall);
  }
}

absl::StatusOr<int> SlotPool::AwaitReady(int s, double* stall) {
  while (slots_[s].state == State::kLoading) WaitTimed(stall);
  ReportStall(*stall);
  Slot& slot = slots_[s];
  if (slot.state != State::kReady) {  // The load failed.
    absl::Status error = slot.error;
    if (--slot.in_use == 0) changed_.SignalAll();
    return error;
  }
  if (slot.prefetched_unused) {
    slot.prefetched_unused = false;
    for (Observer* o : observers_) o->OnPrefetchUsed(slot.id);
  }
  return s;
}

void SlotPool::Release(ExpertId id) {
  MutexLock lock(&mu_);
  const int s = slot_of_[Flat(id)];
  if (s < 0 || slots_[s].in_use == 0) {
    spdlog::error("expert residency: Release of ({}, {}) that is not acquired",
                  id.layer, id.expert);
    return;
  }
  loader_->Released(s);
  if (--slots_[s].in_use == 0) changed_.SignalAll();
}

void SlotPool::WaitTimed(double* stall) {
  const Clock::time_point start = Clock::now();
  changed_.Wait(&mu_);
  *stall += std::chrono::duration<double>(Clock::now() - start).count();
}

void SlotPool::ReportStall(double seconds) {
  if (seconds <= 0) return;
  for (Observer* o : observers_) o->OnStall(seconds);
}

absl::Status SlotPool::Exhausted() const {
  int pinned = 0, in_use = 0;
  for (const Slot& s : slots_) {
    pinned += s.pins > 0;
    in_use += s.in_use > 0;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "fast tier of ", num_slots_, " slots too small: ", pinned, " pinned and ",
      in_use,
      " in use, none can be evicted (raise the expert cache capacity)"));
}

// ---------------------------------------------------------------- no wait

bool SlotPool::LoadNoWait(ExpertId id, LoadKind kind) {
  bool started = false;
  int s = -1;
  {
    MutexLock lock(&mu_);
    s = FindOrReserveNoWait(id, kind, &started);
  }
  if (started) loader_->StartLoad(s, id);
  return started;
}

bool SlotPool::Pin(ExpertId id) {
  bool started = false;
  int s = -1;
  {
    MutexLock lock(&mu_);
    s = FindOrReserveNoWait(id, LoadKind::kPrefetch, &started);
    if (s < 0) return false;
    ++slots_[s].pins;
  }
  if (started) loader_->StartLoad(s, id);
  return true;
}

int SlotPool::FindOrReserveNoWait(ExpertId id, LoadKind kind, bool* started) {
  const int f = Flat(id);
  *started = false;
  for (;;) {
    if (slot_of_[f] >= 0) return slot_of_[f];
    const SlotResult r = TrySlot(Reach::kUnprotected);
    if (r.retry) continue;
    if (r.slot < 0) return -1;
    if (slot_of_[f] >= 0) return slot_of_[f];  // Loaded while unlocked.
    Reserve(r.slot, id, kind);
    *started = true;
    return r.slot;
  }
}

// ---------------------------------------------------------------- victims

SlotPool::SlotResult SlotPool::TrySlot(Reach reach) {
  SlotResult r;
  for (int s = 0; s < num_slots_; ++s) {
    if (slots_[s].state == State::kEmpty && slots_[s].in_use == 0) {
      r.slot = s;
      return r;
    }
  }
  const std::vector<ExpertId> candidates = Candidates(reach, &r.loading_any);
  if (candidates.empty()) return r;
  r.slot = PickVictim(candidates, reach);
  if (r.slot < 0) {
    r.retry = true;
    return r;
  }
  EvictSlot(r.slot);
  return r;
}

std::vector<ExpertId> SlotPool::Candidates(Reach reach,
                                           bool* loading_any) const {
  std::vector<ExpertId> tiers[3];
  *loading_any = false;
  for (const Slot& s : slots_) {
    if ((s.state == State::kLoading && s.pins == 0) ||
        (s.state == State::kEmpty && s.in_use > 0)) {
      *loading_any = true;
    }
    if (!Evictable(s)) continue;
    const int tier = !protected_[Flat(s.id)] ? 0 : (s.demand_pending ? 2 : 1);
    tiers[tier].push_back(s.id);
  }
  const int reachable = reach == Reach::kAll ? 3 : 1;
  for (int t = 0; t < reachable; ++t) {
    if (!tiers[t].empty()) return std::move(tiers[t]);
  }
  return {};
}

int SlotPool::PickVictim(const std::vector<ExpertId>& candidates, Reach reach) {
  std::vector<ExpertId> victims;
  mu_.Unlock();  // The policy may call back into the pool.
  policy_->ChooseVictims(candidates, 1, &victims);
  mu_.Lock();
  // State may have moved while unlocked: revalidate; fall back to the
  // candidates' order if the policy's choice no longer holds.
  victims.insert(victims.end(), candidates.begin(), candidates.end());
  for (const ExpertId& v : victims) {
    if (!Valid(v)) continue;
    const int s = slot_of_[Flat(v)];
    if (s < 0 || !Evictable(slots_[s])) continue;
    if (reach == Reach::kUnprotected && protected_[Flat(v)]) continue;
    return s;
  }
  return -1;
}

void SlotPool::EvictSlot(int s) {
  Slot& slot = slots_[s];
  for (Observer* o : observers_) {
    o->OnEvicted(slot.id, slot.prefetched_unused, slot.demand_pending);
  }
  slot_of_[Flat(slot.id)] = -1;
  slot.prefetched_unused = false;
  slot.demand_pending = false;
  SetState(slot, State::kEmpty);
}

void SlotPool::Evict(ExpertId id) {
  MutexLock lock(&mu_);
  const int s = slot_of_[Flat(id)];
  if (s < 0 || !Evictable(slots_[s])) return;
  EvictSlot(s);
  changed_.SignalAll();
}

// ---------------------------------------------------------------- loads

void SlotPool::Reserve(int s, ExpertId id, LoadKind kind) {
  Slot& slot = slots_[s];
  slot.id = id;
  slot.error = absl::OkStatus();
  slot.prefetched_unused = kind == LoadKind::kPrefetch;
  slot.demand_pending = kind == LoadKind::kDemand;
  slot_of_[Flat(id)] = s;
  SetState(slot, State::kLoading);
  for (Observer* o : observers_) o->OnLoadStarted(id, kind);
}

void SlotPool::Complete(int s, absl::Status status) {
  MutexLock lock(&mu_);
  Slot& slot = slots_[s];
  if (status.ok()) {
    SetState(slot, State::kReady);
    for (Observer* o : observers_) o->OnLoaded(slot.id);
  } else {
    spdlog::error("expert residency: loading ({}, {}) failed: {}",
                  slot.id.layer, slot.id.expert, status.ToString());
    slot_of_[Flat(slot.id)] = -1;
    slot.error = std::move(status);
    slot.pins = 0;
    slot.prefetched_unused = false;
    slot.demand_pending = false;
    SetState(slot, State::kEmpty);
  }
  changed_.SignalAll();
}

void SlotPool::SetState(Slot& slot, State state) {
  --state_count_[static_cast<int>(slot.state)];
  ++state_count_[static_cast<int>(state)];
  slot.state = state;
  for (Observer* o : observers_) {
    o->OnStateCounts(state_count_[0], state_count_[1], state_count_[2]);
  }
}

// ---------------------------------------------------------------- control

void SlotPool::Unpin(ExpertId id) {
  MutexLock lock(&mu_);
  const int s = slot_of_[Flat(id)];
  if (s < 0 || slots_[s].pins == 0) return;
  if (--slots_[s].pins == 0) changed_.SignalAll();
}

bool SlotPool::IsResident(ExpertId id) const {
  MutexLock lock(&mu_);
  return slot_of_[Flat(id)] >= 0;
}

void SlotPool::WaitIdle() {
  MutexLock lock(&mu_);
  while (state_count_[static_cast<int>(State::kLoading)] > 0) {
    changed_.Wait(&mu_);
  }
}

SlotPool::Counts SlotPool::counts() const {
  MutexLock lock(&mu_);
  Counts c;
  c.empty = state_count_[static_cast<int>(State::kEmpty)];
  c.loading = state_count_[static_cast<int>(State::kLoading)];
  c.ready = state_count_[static_cast<int>(State::kReady)];
  for (const Slot& s : slots_) {
    c.in_use += s.in_use > 0;
    c.prefetched_unused += s.prefetched_unused;
  }
  return c;
}

std::vector<SlotPool::SlotView> SlotPool::slots() const {
  MutexLock lock(&mu_);
  std::vector<SlotView> out;
  out.reserve(slots_.size());
  for (const Slot& s : slots_) out.push_back({s.state, s.id, s.pins, s.in_use});
  return out;
}

}  // namespace moeserve::engine
