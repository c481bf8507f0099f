#include "engine/offload/hook_queue.h"

namespace moeserve::engine {

using base::MutexLock;

void HookQueue::OnLoaded(ExpertId id) {
  MutexLock lock(&mu_);
  queue_.push_back({true, id});
}

void HookQueue::OnEvicted(ExpertId id, bool, bool) {
  MutexLock lock(&mu_);
  queue_.push_back({false, id});
}

void HookQueue::Deliver(OffloadPolicy* policy) {
  {
    MutexLock lock(&mu_);
    if (delivering_ || queue_.empty()) return;
    delivering_ = true;
  }
  for (;;) {
    Event e;
    {
      MutexLock lock(&mu_);
      if (queue_.empty()) {
        delivering_ = false;
        return;
      }
      e = queue_.front();
      queue_.pop_front();
    }
    if (e.loaded) {
      policy->OnLoaded(e.id);
    } else {
      policy->OnEvicted(e.id);
    }
  }
}

}  // namespace moeserve::engine
