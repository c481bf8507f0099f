// SlotPool on its own: a loader whose loads the test completes by hand, so
// every state (loading included) can be looked at.
#include "engine/offload/slot_pool.h"

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using State = SlotPool::State;
using LoadKind = SlotPool::LoadKind;

std::string Str(ExpertId id) { return absl::StrCat(id.layer, ",", id.expert); }

// Loads complete only when the test says so.
class ManualLoader : public SlotPool::Loader {
 public:
  void StartLoad(int slot, ExpertId id) override {
    base::MutexLock lock(&mu_);
    started_.push_back({slot, id});
  }
  void Released(int slot) override { released.push_back(slot); }
  void PromoteLoad(int slot, uint64_t) override { promoted.push_back(slot); }
  bool CancelLoad(int slot, uint64_t) override {
    cancel_calls.push_back(slot);
    return cancel_ok;
  }

  // The loads started so far (slot, expert), oldest first.
  std::vector<std::pair<int, ExpertId>> started() {
    base::MutexLock lock(&mu_);
    return started_;
  }
  int num_started() { return static_cast<int>(started().size()); }
  std::vector<int> released;      // Under the pool's lock.
  std::vector<int> promoted;      // Under the pool's lock.
  std::vector<int> cancel_calls;  // Under the pool's lock.
  bool cancel_ok = true;          // What CancelLoad answers.

 private:
  base::Mutex mu_;
  std::vector<std::pair<int, ExpertId>> started_ ABSL_GUARDED_BY(mu_);
};

// Every transition as a line, e.g. "loaded 0,1".
class Recorder : public SlotPool::Observer {
 public:
  void OnLoadStarted(ExpertId id, LoadKind kind) override {
    Add(absl::StrCat(kind == LoadKind::kDemand ? "demand " : "prefetch ",
                     Str(id)));
  }
  void OnLoaded(ExpertId id) override { Add("loaded " + Str(id)); }
  void OnHit(ExpertId id) override { Add("hit " + Str(id)); }
  void OnHitLoading(ExpertId id) override { Add("hit_loading " + Str(id)); }
  void OnLoadCancelled(ExpertId id) override { Add("cancelled " + Str(id)); }
  void OnPrefetchUsed(ExpertId id) override { Add("used " + Str(id)); }
  void OnEvicted(ExpertId id, bool prefetched_unused,
                 bool demand_unused) override {
    Add(absl::StrCat("evicted ", Str(id), prefetched_unused ? " wasted" : "",
                     demand_unused ? " unused" : ""));
  }
  void OnAcquireFailed(ExpertId id) override { Add("failed " + Str(id)); }

  std::vector<std::string> Take() {
    base::MutexLock lock(&mu_);
    return std::exchange(events_, {});
  }

 private:
  void Add(std::string e) {
    base::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
  }
  base::Mutex mu_;
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
};

// Names `victim` when it is a candidate, else the first candidate; records
// every candidate list. `pool` (optional) is called back from
// ChooseVictims, which must run without the pool's lock.
class ScriptedPolicy : public OffloadPolicy {
 public:
  std::string_view name() const override { return "scripted"; }
  void ChooseVictims(std::span<const ExpertId> candidates, int count,
                     std::vector<ExpertId>* victims) override {
    std::string line;
    for (const ExpertId& c : candidates) line += Str(c) + " ";
    offered.push_back(line);
    if (pool != nullptr) (void)pool->IsResident(candidates[0]);
    for (const ExpertId& c : candidates) {
      if (c == victim && count > 0) {
        victims->push_back(c);
        return;
      }
    }
    if (count > 0) victims->push_back(candidates[0]);
  }

  ExpertId victim{-1, -1};
  SlotPool* pool = nullptr;
  std::vector<std::string> offered;
};

class SlotPoolTest : public ::testing::Test {
 protected:
  // 2 layers x 8 experts.
  void Make(int slots) {
    pool_ = std::make_unique<SlotPool>(
        2, 8, slots, &policy_, &loader_,
        std::vector<SlotPool::Observer*>{&recorder_});
  }
  // Completes every load started so far and not yet completed.
  void CompleteAll(absl::Status status = absl::OkStatus()) {
    const auto started = loader_.started();
    for (size_t i = completed_; i < started.size(); ++i) {
      pool_->Complete(started[i].first, status);
    }
    completed_ = started.size();
  }
  State StateOf(int slot) { return pool_->slots()[slot].state; }

  ScriptedPolicy policy_;
  ManualLoader loader_;
  Recorder recorder_;
  std::unique_ptr<SlotPool> pool_;
  size_t completed_ = 0;
};

TEST_F(SlotPoolTest, LoadGoesEmptyLoadingReady) {
  Make(2);
  EXPECT_FALSE(pool_->IsResident({0, 1}));
  EXPECT_TRUE(pool_->LoadNoWait({0, 1}, LoadKind::kPrefetch));
  EXPECT_TRUE(pool_->IsResident({0, 1}));  // Resident while loading.
  EXPECT_EQ(StateOf(0), State::kLoading);
  EXPECT_EQ(pool_->counts().loading, 1);
  EXPECT_FALSE(pool_->LoadNoWait({0, 1}, LoadKind::kPrefetch));  // Already.
  CompleteAll();
  EXPECT_EQ(StateOf(0), State::kReady);
  const SlotPool::Counts c = pool_->counts();
  EXPECT_EQ(c.empty, 1);
  EXPECT_EQ(c.ready, 1);
  EXPECT_EQ(c.prefetched_unused, 1);
  EXPECT_THAT(recorder_.Take(), ElementsAre("prefetch 0,1", "loaded 0,1"));
}

TEST_F(SlotPoolTest, VictimFromThePolicyReusesItsSlot) {
  Make(2);
  pool_->LoadNoWait({0, 1}, LoadKind::kPrefetch);
  pool_->LoadNoWait({0, 2}, LoadKind::kPrefetch);
  CompleteAll();
  recorder_.Take();
  policy_.victim = {0, 2};
  EXPECT_TRUE(pool_->LoadNoWait({1, 0}, LoadKind::kPrefetch));
  EXPECT_THAT(policy_.offered, ElementsAre("0,1 0,2 "));
  EXPECT_EQ(loader_.started().back().first, 1);  // (0, 2)'s slot.
  EXPECT_FALSE(pool_->IsResident({0, 2}));
  EXPECT_THAT(recorder_.Take(),
              ElementsAre("evicted 0,2 wasted", "prefetch 1,0"));
}

TEST_F(SlotPoolTest, LoadingPinnedAndInUseSlotsAreNeverVictims) {
  Make(3);
  pool_->LoadNoWait({0, 0}, LoadKind::kPrefetch);  // Stays loading.
  ASSERT_TRUE(pool_->Pin({0, 1}));
  pool_->LoadNoWait({0, 2}, LoadKind::kPrefetch);
  pool_->Complete(1, absl::OkStatus());
  pool_->Complete(2, absl::OkStatus());
  absl::StatusOr<int> held = pool_->Acquire({0, 2});
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(pool_->LoadNoWait({1, 5}, LoadKind::kPrefetch));
  pool_->Evict({0, 1});  // Pinned: no-op.
  pool_->Evict({0, 2});  // In use: no-op.
  pool_->Evict({0, 0});  // Loading: no-op.
  EXPECT_TRUE(pool_->IsResident({0, 0}));
  EXPECT_TRUE(pool_->IsResident({0, 1}));
  EXPECT_TRUE(pool_->IsResident({0, 2}));
  EXPECT_THAT(policy_.offered, IsEmpty());
  pool_->Release({0, 2});
  EXPECT_THAT(loader_.released, ElementsAre(2));
  pool_->Evict({0, 2});
  EXPECT_FALSE(pool_->IsResident({0, 2}));
  pool_->Complete(0, absl::OkStatus());
}

TEST_F(SlotPoolTest, AcquireWaitsForTheLoadAndConsumesItsDemandMiss) {
  Make(2);
  ASSERT_TRUE(pool_->LoadNoWait({0, 3}, LoadKind::kDemand));
  std::atomic<bool> done{false};
  std::thread acquirer([&] {
    absl::StatusOr<int> s = pool_->Acquire({0, 3});
    EXPECT_TRUE(s.ok()) << s.status();
    done = true;
  });
  while (pool_->slots()[0].in_use == 0) std::this_thread::yield();
  EXPECT_FALSE(done.load());
  CompleteAll();
  acquirer.join();
  EXPECT_TRUE(done.load());
  ASSERT_TRUE(pool_->Acquire({0, 3}).ok());  // Second: a hit.
  EXPECT_THAT(recorder_.Take(),
              ElementsAre("demand 0,3", "loaded 0,3", "hit 0,3"));
  EXPECT_EQ(pool_->counts().in_use, 1);
  pool_->Release({0, 3});
  pool_->Release({0, 3});
  pool_->Release({0, 3});  // Not acquired: logged, nothing changes.
  EXPECT_EQ(pool_->counts().in_use, 0);
}

TEST_F(SlotPoolTest, AcquireOfAMissLoadsItself) {
  Make(1);
  std::thread acquirer([&] {
    absl::StatusOr<int> s = pool_->Acquire({1, 7});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*s, 0);
    pool_->Release({1, 7});
  });
  while (loader_.num_started() == 0) std::this_thread::yield();
  CompleteAll();
  acquirer.join();
  EXPECT_THAT(recorder_.Take(), ElementsAre("demand 1,7", "loaded 1,7"));
}

// Victims come from unprotected slots first; LoadNoWait reaches no further,
// Acquire takes protected ones that were acquired before those demand-loaded
// and not yet acquired.
TEST_F(SlotPoolTest, ProtectedTiers) {
  Make(2);
  pool_->Protect(0, std::vector<int>{1, 2});
  pool_->LoadNoWait({0, 1}, LoadKind::kDemand);
  pool_->LoadNoWait({0, 2}, LoadKind::kDemand);
  CompleteAll();
  ASSERT_TRUE(pool_->Acquire({0, 1}).ok());
  pool_->Release({0, 1});
  EXPECT_FALSE(pool_->LoadNoWait({1, 0}, LoadKind::kPrefetch));
  EXPECT_THAT(policy_.offered, IsEmpty());
  recorder_.Take();
  std::thread acquirer([&] {
    ASSERT_TRUE(pool_->Acquire({0, 3}).ok());
    pool_->Release({0, 3});
  });
  while (loader_.num_started() < 3) std::this_thread::yield();
  CompleteAll();
  acquirer.join();
  EXPECT_THAT(policy_.offered, ElementsAre("0,1 "));  // Tier 1 before 2.
  pool_->Unprotect();
  policy_.victim = {0, 2};
  EXPECT_TRUE(pool_->LoadNoWait({1, 0}, LoadKind::kPrefetch));
  EXPECT_THAT(recorder_.Take(),
              ElementsAre("evicted 0,1", "demand 0,3", "loaded 0,3",
                          "evicted 0,2 unused", "prefetch 1,0"));
  CompleteAll();
}

TEST_F(SlotPoolTest, ExhaustedWhenEverySlotIsPinnedOrInUse) {
  Make(2);
  ASSERT_TRUE(pool_->Pin({0, 0}));
  pool_->LoadNoWait({0, 1}, LoadKind::kPrefetch);
  CompleteAll();
  ASSERT_TRUE(pool_->Acquire({0, 1}).ok());
  absl::StatusOr<int> s = pool_->Acquire({1, 1});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr(
                  "fast tier of 2 slots too small: 1 pinned and 1 in use"));
  EXPECT_FALSE(pool_->Pin({1, 1}));
  EXPECT_EQ(recorder_.Take().back(), "failed 1,1");
  pool_->Unpin({0, 0});
  pool_->Unpin({0, 0});             // At 0: no-op.
  EXPECT_TRUE(pool_->Pin({1, 1}));  // (0, 0) is evictable now.
  pool_->Release({0, 1});
  CompleteAll();
}

TEST_F(SlotPoolTest, FailedLoadWakesItsWaitersAndFreesTheSlot) {
  Make(1);
  ASSERT_TRUE(pool_->Pin({0, 4}));
  std::thread acquirer([&] {
    absl::StatusOr<int> s = pool_->Acquire({0, 4});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  });
  while (pool_->slots()[0].in_use == 0) std::this_thread::yield();
  CompleteAll(absl::DataLossError("short read"));
  acquirer.join();
  EXPECT_FALSE(pool_->IsResident({0, 4}));
  const SlotPool::SlotView v = pool_->slots()[0];
  EXPECT_EQ(v.state, State::kEmpty);
  EXPECT_EQ(v.pins, 0);
  EXPECT_EQ(v.in_use, 0);
  EXPECT_TRUE(pool_->LoadNoWait({0, 5}, LoadKind::kPrefetch));  // Reusable.
  CompleteAll();
  EXPECT_THAT(recorder_.Take(), ElementsAre("prefetch 0,4", "hit_loading 0,4",
                                            "prefetch 0,5", "loaded 0,5"));
}

TEST_F(SlotPoolTest, PolicyMayCallBackFromChooseVictims) {
  Make(1);
  policy_.pool = pool_.get();  // Would deadlock if the lock were held.
  pool_->LoadNoWait({0, 0}, LoadKind::kPrefetch);
  CompleteAll();
  EXPECT_TRUE(pool_->LoadNoWait({0, 1}, LoadKind::kPrefetch));
  CompleteAll();
}

TEST_F(SlotPoolTest, WaitIdleReturnsOnceNothingLoads) {
  Make(2);
  pool_->LoadNoWait({0, 0}, LoadKind::kPrefetch);
  std::thread completer([&] { CompleteAll(); });
  pool_->WaitIdle();
  completer.join();
  EXPECT_EQ(pool_->counts().loading, 0);
}

TEST_F(SlotPoolTest, CancelPrefetchEmptiesTheSlotOfAQueuedPrefetchOnly) {
  Make(3);
  ASSERT_TRUE(pool_->LoadNoWait({0, 1}, LoadKind::kPrefetch, /*priority=*/3));
  ASSERT_TRUE(pool_->LoadNoWait({0, 2}, LoadKind::kDemand));
  EXPECT_FALSE(pool_->CancelPrefetch({0, 2}));  // A demand load.
  EXPECT_FALSE(pool_->CancelPrefetch({1, 7}));  // Not resident.
  EXPECT_TRUE(pool_->CancelPrefetch({0, 1}));
  EXPECT_FALSE(pool_->IsResident({0, 1}));
  EXPECT_EQ(StateOf(0), State::kEmpty);
  EXPECT_FALSE(pool_->CancelPrefetch({0, 1}));  // Nothing left to cancel.
  ASSERT_TRUE(pool_->Pin({0, 3}));              // Reuses slot 0.
  EXPECT_FALSE(pool_->CancelPrefetch({0, 3}));  // Pinned.
  loader_.cancel_ok = false;                    // The transfer started.
  ASSERT_TRUE(pool_->LoadNoWait({0, 4}, LoadKind::kPrefetch));
  EXPECT_FALSE(pool_->CancelPrefetch({0, 4}));
  EXPECT_TRUE(pool_->IsResident({0, 4}));
  EXPECT_THAT(loader_.cancel_calls, ElementsAre(0, 2));
  // The cancelled load never completes; the others do.
  pool_->Complete(1, absl::OkStatus());
  pool_->Complete(0, absl::OkStatus());
  pool_->Complete(2, absl::OkStatus());
  completed_ = loader_.started().size();
  EXPECT_FALSE(pool_->CancelPrefetch({0, 4}));  // Ready.
  EXPECT_THAT(
      recorder_.Take(),
      ElementsAre("prefetch 0,1", "demand 0,2", "cancelled 0,1", "prefetch 0,3",
                  "prefetch 0,4", "loaded 0,2", "loaded 0,3", "loaded 0,4"));
  const SlotPool::Counts c = pool_->counts();
  EXPECT_EQ(c.ready, 3);
  EXPECT_EQ(c.prefetched_unused, 2);
}

TEST_F(SlotPoolTest, AcquireOfALoadingPrefetchIsAHitLoadingAndPromotesIt) {
  Make(3);
  ASSERT_TRUE(pool_->LoadNoWait({0, 1}, LoadKind::kPrefetch));
  std::thread acquirer([&] {
    absl::StatusOr<int> s = pool_->Acquire({0, 1});
    EXPECT_TRUE(s.ok()) << s.status();
  });
  while (pool_->slots()[0].in_use == 0) std::this_thread::yield();
  EXPECT_FALSE(pool_->CancelPrefetch({0, 1}));  // Waited for.
  EXPECT_FALSE(pool_->IsReady({0, 1}));
  CompleteAll();
  acquirer.join();
  EXPECT_TRUE(pool_->IsReady({0, 1}));
  EXPECT_THAT(loader_.promoted, ElementsAre(0));
  EXPECT_THAT(loader_.cancel_calls, IsEmpty());
  // A demand LoadManyNoWait promotes the queued prefetches it finds, once.
  ASSERT_TRUE(pool_->LoadNoWait({0, 2}, LoadKind::kPrefetch));
  const std::vector<ExpertId> ids = {{0, 2}, {0, 3}};
  EXPECT_EQ(pool_->LoadManyNoWait(ids, LoadKind::kDemand), 1);
  EXPECT_EQ(pool_->LoadManyNoWait(ids, LoadKind::kDemand), 0);
  EXPECT_THAT(loader_.promoted, ElementsAre(0, 1));
  CompleteAll();
  pool_->Release({0, 1});
  EXPECT_THAT(
      recorder_.Take(),
      ElementsAre("prefetch 0,1", "hit_loading 0,1", "loaded 0,1", "used 0,1",
                  "prefetch 0,2", "demand 0,3", "loaded 0,2", "loaded 0,3"));
}

TEST_F(SlotPoolTest, AcquireResidentNeverLoadsAndReportsNothing) {
  Make(2);
  absl::StatusOr<int> none = pool_->AcquireResident({1, 2});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()),
              ::testing::HasSubstr("expert (1, 2) is not resident"));
  EXPECT_EQ(loader_.num_started(), 0);
  ASSERT_TRUE(pool_->LoadNoWait({0, 5}, LoadKind::kPrefetch));
  std::thread drafter([&] {
    absl::StatusOr<int> s = pool_->AcquireResident({0, 5});  // Waits.
    EXPECT_TRUE(s.ok()) << s.status();
  });
  while (pool_->slots()[0].in_use == 0) std::this_thread::yield();
  CompleteAll();
  drafter.join();
  pool_->Evict({0, 5});  // In use by the draft: no-op.
  EXPECT_TRUE(pool_->IsResident({0, 5}));
  EXPECT_EQ(pool_->counts().prefetched_unused, 1);  // Not a use.
  pool_->Release({0, 5});
  pool_->Evict({0, 5});
  EXPECT_FALSE(pool_->IsResident({0, 5}));
  EXPECT_THAT(loader_.promoted, IsEmpty());
  EXPECT_THAT(recorder_.Take(),
              ElementsAre("prefetch 0,5", "loaded 0,5", "evicted 0,5 wasted"));
}

}  // namespace
}  // namespace moeserve::engine
