// Test helpers for engine/offload: the mixtral_tiny fixture and a simple,
// deterministic, thread-safe offload policy.
#ifndef MOESERVE_ENGINE_OFFLOAD_TEST_UTIL_H_
#define MOESERVE_ENGINE_OFFLOAD_TEST_UTIL_H_

#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "engine/model_weights.h"
#include "engine/offload/offload_policy.h"
#include "gtest/gtest.h"

namespace moeserve::engine::testing {

inline std::string FixtureDir() {
  return std::string(std::getenv("TEST_SRCDIR")) +
         "/moeserve/tests/golden/mixtral_tiny";
}

inline std::unique_ptr<ModelWeights> LoadFixture(bool pack) {
  auto w = ModelWeights::Load(FixtureDir(), LoadOptions{.pack_experts = pack});
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(*w) : nullptr;
}

// LRU by access counter: victims are the candidates with the oldest
// OnAccess or started prefetch (never = 0), ties broken by candidate order.
// With `prefetch_next`, OnRoute(l, experts) prefetches (l + 1, e) for each e.
class LruTestPolicy : public OffloadPolicy {
 public:
  explicit LruTestPolicy(bool prefetch_next = false)
      : prefetch_next_(prefetch_next) {}
  std::string_view name() const override { return "lru_test"; }
  void Attach(ResidencyControl* control) override { control_ = control; }
  void OnRoute(int layer, std::span<const int> experts, std::span<const int>,
               const float*, int64_t) override {
    if (!prefetch_next_ || layer + 1 >= control_->num_layers()) return;
    for (int e : experts) {
      // A started prefetch counts as a use, so the next prefetch of this
      // loop never picks it as victim (deterministic whatever the timing).
      if (control_->Prefetch({layer + 1, e})) OnAccess({layer + 1, e});
    }
  }
  void OnAccess(ExpertId id) override {
    base::MutexLock lock(&mu_);
    tick_[Key(id)] = ++clock_;
  }
  void OnStepEnd(const StepStats& stats) override {
    base::MutexLock lock(&mu_);
    last_activations_.assign(stats.activations.begin(),
                             stats.activations.end());
  }
  void ChooseVictims(std::span<const ExpertId> candidates, int count,
                     std::vector<ExpertId>* victims) override {
    base::MutexLock lock(&mu_);
    std::vector<ExpertId> c(candidates.begin(), candidates.end());
    for (int i = 0; i < count && !c.empty(); ++i) {
      size_t best = 0;
      for (size_t j = 1; j < c.size(); ++j) {
        if (Tick(c[j]) < Tick(c[best])) best = j;
      }
      victims->push_back(c[best]);
      c.erase(c.begin() + best);
    }
  }

  // The activations of the last OnStepEnd.
  std::vector<uint32_t> last_activations() const {
    base::MutexLock lock(&mu_);
    return last_activations_;
  }

  ResidencyControl* control_ = nullptr;

 private:
  static int Key(ExpertId id) { return id.layer * 1000 + id.expert; }
  uint64_t Tick(ExpertId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = tick_.find(Key(id));
    return it == tick_.end() ? 0 : it->second;
  }

  const bool prefetch_next_;
  mutable base::Mutex mu_;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> last_activations_ ABSL_GUARDED_BY(mu_);
  std::map<int, uint64_t> tick_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::engine::testing

#endif  // MOESERVE_ENGINE_OFFLOAD_TEST_UTIL_H_
