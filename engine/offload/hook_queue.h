// HookQueue: carries OnLoaded and OnEvicted to the policy on the thread the
// offload_policy.h contract names. Loads complete on link worker threads
// and evictions happen inside whichever call needed a slot; the queue keeps
// them, in the order the SlotPool reports them, until the residency reaches
// a delivery point and calls Deliver from there.
//
// It is a SlotPool::Observer: OnLoaded and OnEvicted are queued under the
// pool's lock, so the queue's order is the pool's. Deliver hands the queued
// events to the policy one at a time, with no lock held (the policy may call
// back into the residency), until the queue is empty, events its own hooks
// cause included. One Deliver runs at a time: a Deliver that finds another
// under way returns at once and leaves its events to that one, so events
// are never delivered out of order or two at once.
//
// Ownership: owns the queued events only; Deliver's policy is the caller's.
// Thread safety: every method may be called from any thread.
#ifndef MOESERVE_ENGINE_OFFLOAD_HOOK_QUEUE_H_
#define MOESERVE_ENGINE_OFFLOAD_HOOK_QUEUE_H_

#include <deque>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "engine/model_weights.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/slot_pool.h"

namespace moeserve::engine {

class HookQueue final : public SlotPool::Observer {
 public:
  // SlotPool::Observer: queue.
  void OnLoaded(ExpertId id) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnEvicted(ExpertId id, bool prefetched_unused,
                 bool demand_unused) override ABSL_LOCKS_EXCLUDED(mu_);

  // Calls policy->OnLoaded / OnEvicted for every queued event, in order,
  // unless another Deliver is under way.
  void Deliver(OffloadPolicy* policy) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Event {
    bool loaded = false;  // else evicted
    ExpertId id;
  };

  base::Mutex mu_;
  std::deque<Event> queue_ ABSL_GUARDED_BY(mu_);
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_HOOK_QUEUE_H_
