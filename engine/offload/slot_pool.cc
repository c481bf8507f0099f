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
  LoadStart start;
  {
    MutexLock lock(&mu_);
    absl::StatusOr<int> found = FindOrReserve(id, &stall, &load);
    if (!found.ok()) {
      ReportStall(stall);
      return found.status();
    }
    slot = *found;
    if (!load) return AwaitReady(slot, &stall);
    const Slot& sl = slots_[slot];
    start = {slot, id, sl.kind, sl.priority, sl.seq};
  }
  loader_->StartLoads({&start, 1});
  MutexLock lock(&mu_);
  return AwaitReady(slot, &stall);
}

absl::StatusOr<int> SlotPool::AcquireResident(ExpertId id) {
  if (!Valid(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert (", id.layer, ", ", id.expert, ") out of range"));
  }
  MutexLock lock(&mu_);
  const int s = slot_of_[Flat(id)];
  if (s < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("expert (", id.layer, ", ", id.expert,
                     ") is not resident in the fast tier (a draft view "
                     "never loads)"));
  }
  Slot& slot = slots_[s];
  ++slot.in_use;
  while (slot.state == State::kLoading) changed_.Wait(&mu_);
  if (slot.state != State::kReady) {  // The load failed.
    absl::Status error = slot.error;
    if (--slot.in_use == 0) changed_.SignalAll();
    return error;
  }
  return s;
}

absl::StatusOr<int> SlotPool::FindOrReserve(ExpertId id, double* stall,
                                            bool* load) {
  const int f = Flat(id);
  for (;;) {
    if (const int s = slot_of_[f]; s >= 0) {
      Slot& slot = slots_[s];
      if (slot.demand_pending) {
        slot.demand_pending = false;  // Its miss was counted at the load.
      } else if (slot.state == State::kLoading) {
        MaybePromote(s);  // Before the count: a hit_loading is promoted.
        for (Observer* o : observers_) o->OnHitLoading(id);
      } else {
        for (Observer* o : observers_) o->OnHit(id);
      }
      ++slot.in_use;
      return s;
    }
    const SlotResult r = TrySlot(Reach::kAll);
    if (r.retry || (r.slot >= 0 && slot_of_[f] >= 0)) continue;
    if (r.slot >= 0) {
      (void)Reserve(r.slot, id, LoadKind::kDemand);
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

bool SlotPool::LoadNoWait(ExpertId id, LoadKind kind, int priority) {
  return LoadManyNoWait({&id, 1}, kind, priority) == 1;
}

int SlotPool::LoadManyNoWait(std::span<const ExpertId> ids, LoadKind kind,
                             int priority) {
  std::vector<LoadStart> starts;
  {
    MutexLock lock(&mu_);
    for (const ExpertId& id : ids) {
      LoadStart start;
      const int s = FindOrReserveNoWait(id, kind, priority, &start);
      if (start.slot >= 0) {
        starts.push_back(start);
      } else if (s >= 0 && kind == LoadKind::kDemand) {
        MaybePromote(s);
      }
    }
  }
  if (!starts.empty()) loader_->StartLoads(starts);
  return static_cast<int>(starts.size());
}

bool SlotPool::Pin(ExpertId id) {
  LoadStart start;
  {
    MutexLock lock(&mu_);
    const int s = FindOrReserveNoWait(id, LoadKind::kPrefetch, 0, &start);
    if (s < 0) return false;
    ++slots_[s].pins;
  }
  if (start.slot >= 0) loader_->StartLoads({&start, 1});
  return true;
}

int SlotPool::FindOrReserveNoWait(ExpertId id, LoadKind kind, int priority,
                                  LoadStart* started) {
  const int f = Flat(id);
  started->slot = -1;
  for (;;) {
    if (slot_of_[f] >= 0) return slot_of_[f];
    const SlotResult r = TrySlot(Reach::kUnprotected);
    if (r.retry) continue;
    if (r.slot < 0) return -1;
    if (slot_of_[f] >= 0) return slot_of_[f];  // Loaded while unlocked.
    *started = Reserve(r.slot, id, kind, priority);
    return r.slot;
  }
}

void SlotPool::MaybePromote(int s) {
  Slot& slot = slots_[s];
  if (slot.state != State::kLoading || slot.kind != LoadKind::kPrefetch ||
      slot.promoted) {
    return;
  }
  slot.promoted = true;
  loader_->PromoteLoad(s, slot.seq);
}

bool SlotPool::CancelPrefetch(ExpertId id) {
  if (!Valid(id)) return false;
  MutexLock lock(&mu_);
  const int s = slot_of_[Flat(id)];
  if (s < 0) return false;
  Slot& slot = slots_[s];
  if (slot.state != State::kLoading || slot.kind != LoadKind::kPrefetch ||
      slot.promoted || slot.pins > 0 || slot.in_use > 0) {
    return false;
  }
  if (!loader_->CancelLoad(s, slot.seq)) return false;
  slot_of_[Flat(id)] = -1;
  slot.prefetched_unused = false;
  slot.demand_pending = false;
  SetState(slot, State::kEmpty);
  for (Observer* o : observers_) o->OnLoadCancelled(id);
  changed_.SignalAll();
  return true;
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

SlotPool::LoadStart SlotPool::Reserve(int s, ExpertId id, LoadKind kind,
                                      int priority) {
  Slot& slot = slots_[s];
  slot.id = id;
  slot.error = absl::OkStatus();
  slot.prefetched_unused = kind == LoadKind::kPrefetch;
  slot.demand_pending = kind == LoadKind::kDemand;
  slot.kind = kind;
  slot.priority = kind == LoadKind::kPrefetch ? priority : 0;
  slot.seq = next_seq_++;
  slot.promoted = false;
  slot_of_[Flat(id)] = s;
  SetState(slot, State::kLoading);
  for (Observer* o : observers_) o->OnLoadStarted(id, kind);
  return {s, id, kind, slot.priority, slot.seq};
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

bool SlotPool::IsReady(ExpertId id) const {
  MutexLock lock(&mu_);
  const int s = slot_of_[Flat(id)];
  return s >= 0 && slots_[s].state == State::kReady;
}

void SlotPool::WaitIdle() const {
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
