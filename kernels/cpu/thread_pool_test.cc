#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "gtest/gtest.h"

namespace moeserve::kernels::cpu {
namespace {

// Every index in [0, n) is visited exactly once.
void ExpectCoversOnce(ThreadPool& pool, int64_t n, int64_t min_chunk = 1) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> calls{0};
  pool.ParallelFor(
      n,
      [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        calls.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      },
      min_chunk);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  EXPECT_LE(calls.load(), ThreadPool::kChunksPerThread * pool.num_threads());
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 4097}) ExpectCoversOnce(pool, n);
  }
}

TEST(ThreadPool, MinChunkLimitsSplitting) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.ParallelFor(
      10, [&](int64_t b, int64_t e) { calls.fetch_add(1); }, 100);
  EXPECT_EQ(calls.load(), 1);
  ExpectCoversOnce(pool, 1000, 300);
}

// The same n, min_chunk and pool size always give the same ranges, whoever
// runs them: the kernels' results depend on it.
TEST(ThreadPool, RangesAreDeterministic) {
  ThreadPool pool(3);
  auto ranges = [&](int64_t n, int64_t min_chunk) {
    base::Mutex mu;
    std::vector<std::pair<int64_t, int64_t>> seen;
    pool.ParallelFor(
        n,
        [&](int64_t b, int64_t e) {
          base::MutexLock lock(&mu);
          seen.emplace_back(b, e);
        },
        min_chunk);
    std::sort(seen.begin(), seen.end());
    return seen;
  };
  for (int64_t n : {5, 12, 100, 4097}) {
    const auto first = ranges(n, 2);
    for (int iter = 0; iter < 50; ++iter) ASSERT_EQ(ranges(n, 2), first) << n;
  }
}

// A participant that stalls inside its chunk (as one preempted by another
// thread does) holds up only that chunk: the caller claims the rest. With one
// fixed range per thread the caller would do exactly half.
TEST(ThreadPool, OthersTakeOverAStalledParticipantsChunks) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  constexpr int64_t kItems = 800;
  std::atomic<int64_t> by_caller{0};
  std::atomic<bool> stalled{false};
  pool.ParallelFor(kItems, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller) {
      by_caller.fetch_add(e - b);
    } else if (!stalled.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  // The worker ran at most the chunk it stalled in (or none, if the caller
  // had claimed everything before it woke).
  const int64_t chunk = kItems / (ThreadPool::kChunksPerThread * 2);
  EXPECT_GE(by_caller.load(), kItems - chunk);
}

TEST(ThreadPool, ManyBackToBackJobs) {
  // Exercises the spin/sleep hand-off many times; a lost wake-up hangs here.
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int iter = 0; iter < 20000; ++iter) {
    pool.ParallelFor(6, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  }
  EXPECT_EQ(sum.load(), 6 * 20000);
}

TEST(ThreadPool, SleepsAndWakesAfterIdle) {
  ThreadPool pool(2);
  for (int iter = 0; iter < 3; ++iter) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ExpectCoversOnce(pool, 100);
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(
          10, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(ThreadPool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(2);
  std::vector<int64_t> results(4, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int iter = 0; iter < 500; ++iter) {
        std::atomic<int64_t> s{0};
        pool.ParallelFor(100, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) s.fetch_add(i);
        });
        results[c] += s.load();
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int64_t r : results) EXPECT_EQ(r, 500 * 4950);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
