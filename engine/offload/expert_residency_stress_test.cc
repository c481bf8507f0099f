// Concurrency stress for ExpertResidency: 8 threads acquire / check /
// release random experts (at most one held each) on a 4-slot fast tier
// while the link fills slots and another thread prefetches; once with host
// slots and once on the device path (slots from a backend, copy streams,
// release events; the CPU backend stands in for a GPU). Run it under TSan
// too: bazel test --config=tsan //engine/offload:expert_residency_stress_test
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "engine/offload/expert_residency.h"
#include "engine/offload/test_util.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine {
namespace {

using testing::LoadFixture;
using testing::LruTestPolicy;

// Checks that OnLoaded and OnEvicted alternate per expert, OnLoaded first,
// however many threads deliver them.
class AlternationCheck : public LruTestPolicy {
 public:
  void OnLoaded(ExpertId id) override { Step(id, +1); }
  void OnEvicted(ExpertId id) override { Step(id, -1); }
  int violations() const {
    base::MutexLock lock(&check_mu_);
    return violations_;
  }

 private:
  void Step(ExpertId id, int delta) {
    base::MutexLock lock(&check_mu_);
    int& n = loaded_[{id.layer, id.expert}];
    n += delta;
    if (n < 0 || n > 1) ++violations_;
  }
  mutable base::Mutex check_mu_;
  std::map<std::pair<int, int>, int> loaded_ ABSL_GUARDED_BY(check_mu_);
  int violations_ ABSL_GUARDED_BY(check_mu_) = 0;
};

class ExpertResidencyStressTest : public ::testing::TestWithParam<bool> {};

TEST_P(ExpertResidencyStressTest, ConcurrentAcquireReleasePrefetch) {
  const bool device_path = GetParam();
  kernels::cpu::CpuBackend backend({.num_threads = 1});
  auto stream = backend.CreateStream();
  ASSERT_TRUE(stream.ok());
  auto weights = LoadFixture(true);
  ASSERT_NE(weights, nullptr);
  auto host = NewHostSlowTier(weights.get());
  ASSERT_TRUE(host.ok());
  const size_t blob = weights->expert({0, 0}).bytes;
  AlternationCheck policy;
  // A little emulated latency widens the loading windows.
  auto r = ExpertResidency::Create(weights.get(), host->get(), 4 * blob,
                                   LinkOptions{.gbps = 20, .latency_us = 20},
                                   &policy, nullptr, "stress",
                                   device_path ? &backend : nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpertResidency* res = r->get();
  ASSERT_TRUE(res->AttachCompute(&backend, stream->get()).ok());

  constexpr int kThreads = 8, kIters = 400;
  std::atomic<uint64_t> ok{0}, exhausted{0}, bad_bytes{0}, other_errors{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kIters; ++i) {
        const ExpertId id{static_cast<int>(rng() % 2),
                          static_cast<int>(rng() % 8)};
        absl::StatusOr<const std::byte*> p = res->Acquire(id);
        if (!p.ok()) {
          (p.status().code() == absl::StatusCode::kResourceExhausted
               ? exhausted
               : other_errors)++;
          continue;
        }
        ++ok;
        if (std::memcmp(*p, weights->expert(id).data, blob) != 0) ++bad_bytes;
        res->Release(id);
      }
    });
  }
  std::thread prefetcher([&] {
    std::mt19937 rng(99);
    while (!done.load()) {
      res->Prefetch({static_cast<int>(rng() % 2), static_cast<int>(rng() % 8)},
                    static_cast<int>(rng() % 3));
      if (rng() % 4 == 0) res->Evict({0, static_cast<int>(rng() % 8)});
      if (rng() % 3 == 0) {
        res->CancelPrefetch(
            {static_cast<int>(rng() % 2), static_cast<int>(rng() % 8)});
      }
      std::this_thread::yield();
    }
  });
  // A self-drafting engine's view of the same slots: resident experts only,
  // counted nowhere.
  std::atomic<uint64_t> draft_ok{0}, draft_errors{0};
  std::thread drafter([&] {
    std::mt19937 rng(7);
    ExpertProvider* draft = res->draft_experts();
    while (!done.load()) {
      const ExpertId id{static_cast<int>(rng() % 2),
                        static_cast<int>(rng() % 8)};
      absl::StatusOr<const std::byte*> p = draft->Acquire(id);
      if (!p.ok()) {
        if (p.status().code() != absl::StatusCode::kFailedPrecondition) {
          ++draft_errors;
        }
        continue;
      }
      ++draft_ok;
      if (std::memcmp(*p, weights->expert(id).data, blob) != 0) ++bad_bytes;
      draft->Release(id);
      std::this_thread::yield();
    }
  });
  for (std::thread& th : threads) th.join();
  done = true;
  prefetcher.join();
  drafter.join();
  EXPECT_EQ(draft_errors.load(), 0u);
  res->WaitIdle();

  ResidencyStats s = res->stats();
  EXPECT_EQ(bad_bytes.load(), 0u);
  EXPECT_EQ(other_errors.load(), 0u);
  EXPECT_EQ(ok + exhausted, uint64_t{kThreads * kIters});
  EXPECT_EQ(s.acquire_failures, exhausted.load());
  EXPECT_EQ(s.slots_in_use, 0);
  EXPECT_EQ(s.slots_loading, 0);
  EXPECT_EQ(s.slots_empty + s.slots_ready, 4);
  EXPECT_EQ(s.demand_evicted_unused, 0u);  // No BeginLayer here.
  EXPECT_EQ(s.hits + s.hits_loading + s.misses, ok.load());
  EXPECT_EQ(s.failed_transfers, 0u);
  EXPECT_EQ(s.link_transfers,
            s.misses + s.prefetch_loads - s.prefetch_cancelled);
  EXPECT_EQ(s.link_bytes, s.link_transfers * blob);
  EXPECT_EQ(s.prefetch_used + s.prefetch_wasted + s.prefetch_cancelled +
                s.prefetched_unused_resident,
            s.prefetch_loads);
  EXPECT_GT(s.misses, 0u);
  EXPECT_GT(s.prefetch_loads, 0u);
  EXPECT_EQ(policy.violations(), 0);
}

INSTANTIATE_TEST_SUITE_P(HostAndDevicePath, ExpertResidencyStressTest,
                         ::testing::Bool(), [](const auto& info) {
                           return info.param ? "device_path" : "host_slots";
                         });

}  // namespace
}  // namespace moeserve::engine
