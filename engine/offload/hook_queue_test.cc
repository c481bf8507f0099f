#include "engine/offload/hook_queue.h"

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

using ::testing::ElementsAre;

// Logs OnLoaded / OnEvicted; `on_loaded` (optional) runs inside OnLoaded.
class LogPolicy : public OffloadPolicy {
 public:
  std::string_view name() const override { return "log"; }
  void OnLoaded(ExpertId id) override {
    log.push_back(absl::StrCat("loaded ", id.layer, ",", id.expert));
    if (on_loaded) on_loaded(id);
  }
  void OnEvicted(ExpertId id) override {
    log.push_back(absl::StrCat("evicted ", id.layer, ",", id.expert));
  }
  void ChooseVictims(std::span<const ExpertId>, int,
                     std::vector<ExpertId>*) override {}

  std::vector<std::string> log;
  std::function<void(ExpertId)> on_loaded;
};

TEST(HookQueueTest, DeliversInOrderIncludingWhatTheHooksCause) {
  HookQueue queue;
  LogPolicy policy;
  queue.OnLoaded({0, 1});
  queue.OnEvicted({0, 1}, false, false);
  queue.OnLoaded({1, 2});
  EXPECT_THAT(policy.log, ::testing::IsEmpty());  // Only Deliver delivers.
  policy.on_loaded = [&](ExpertId id) {
    if (id.layer == 1) queue.OnEvicted({0, 7}, false, false);
  };
  queue.Deliver(&policy);
  EXPECT_THAT(policy.log, ElementsAre("loaded 0,1", "evicted 0,1", "loaded 1,2",
                                      "evicted 0,7"));
  queue.Deliver(&policy);  // Nothing left.
  EXPECT_EQ(policy.log.size(), 4u);
}

TEST(HookQueueTest, OneDelivererAtATime) {
  HookQueue queue;
  LogPolicy policy;
  std::atomic<bool> inside{false}, release{false};
  policy.on_loaded = [&](ExpertId id) {
    if (id.expert != 0) return;
    inside = true;
    while (!release.load()) std::this_thread::yield();
  };
  queue.OnLoaded({0, 0});
  std::thread first([&] { queue.Deliver(&policy); });
  while (!inside.load()) std::this_thread::yield();
  queue.OnLoaded({0, 1});
  queue.Deliver(&policy);  // Returns at once: `first` is delivering.
  release = true;
  first.join();  // `first` delivered (0, 1) too, after (0, 0).
  EXPECT_THAT(policy.log, ElementsAre("loaded 0,0", "loaded 0,1"));
}

}  // namespace
}  // namespace moeserve::engine
