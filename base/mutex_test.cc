#include "base/mutex.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace moeserve::base {
namespace {

class Flag {
 public:
  void Set() {
    MutexLock lock(&mu_);
    set_ = true;
    cv_.SignalAll();
  }
  void WaitSet() {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return set_; });
  }
  bool WaitSetFor(std::chrono::milliseconds timeout) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&mu_, timeout, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return set_;
    });
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool set_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(CondVarTest, WaitReturnsOnceSignalled) {
  Flag flag;
  std::thread setter([&] { flag.Set(); });
  flag.WaitSet();
  setter.join();
}

TEST(CondVarTest, WaitForTimesOutThenSeesTheSignal) {
  Flag flag;
  EXPECT_FALSE(flag.WaitSetFor(std::chrono::milliseconds(5)));
  std::thread setter([&] { flag.Set(); });
  EXPECT_TRUE(flag.WaitSetFor(std::chrono::seconds(30)));
  setter.join();
}

TEST(MutexTest, TryLockFailsWhileHeld) {
  Mutex mu;
  MutexLock lock(&mu);
  bool acquired = false;
  std::thread other([&] {
    if (mu.TryLock()) {
      acquired = true;
      mu.Unlock();
    }
  });
  other.join();
  EXPECT_FALSE(acquired);
}

}  // namespace
}  // namespace moeserve::base
