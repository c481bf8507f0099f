// ThreadPool: a fixed set of worker threads for data-parallel loops in the CPU
// kernels. ParallelFor splits [0, n) into one contiguous range per participant
// (the workers plus the calling thread, which does a share itself) and returns
// when every range is done. The split is static and deterministic, so results
// never depend on scheduling.
//
// Hot path: ParallelFor allocates nothing (the body is an absl::FunctionRef,
// the job lives in the pool) and wakes the workers through one mutex; workers
// spin briefly before sleeping so back-to-back ops of a decode step do not pay
// a futex wake-up each.
//
// Thread safety: ParallelFor may be called from any thread; concurrent calls
// from different threads are serialised. A ParallelFor issued from inside a
// body (nested) runs inline on the calling thread instead of deadlocking.
#ifndef MOESERVE_KERNELS_CPU_THREAD_POOL_H_
#define MOESERVE_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "base/mutex.h"

namespace moeserve::kernels::cpu {

class ThreadPool {
 public:
  // `num_threads` participants in total, including the caller of
  // ParallelFor; values < 1 are treated as 1 (no workers: everything inline).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // Joins the workers. REQUIRES: no ParallelFor in flight.

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n), at most one range
  // per participant, ranges of at least `min_chunk` items (except when n is
  // smaller). Blocks until all calls returned. fn must not throw.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn,
                   int64_t min_chunk = 1) ABSL_LOCKS_EXCLUDED(run_mu_);

 private:
  void WorkerLoop(int index);
  // Range of participant `part` out of `parts` for n items.
  static void Range(int64_t n, int parts, int part, int64_t* begin,
                    int64_t* end);

  // One ParallelFor call: fn over [0, n) in `parts` ranges.
  struct Job {
    const absl::FunctionRef<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0;
    int parts = 0;
  };

  std::vector<std::thread> workers_;
  // base::Mutex (a std::mutex) rather than absl::Mutex: Debian's absl is not
  // built with TSan, so its synchronisation (and Await conditions evaluated
  // by the unlocking thread) would be invisible to it and show up as races.
  //
  // Serialises ParallelFor callers; a caller holds it for its whole job,
  // until every worker is done with job_.
  base::Mutex run_mu_;
  // Written by the caller holding run_mu_, before it bumps generation_.
  // Workers read it without the lock (ABSL_TS_UNCHECKED_READ) after seeing
  // the bump (release/acquire on generation_) and before they decrement
  // pending_; the caller keeps run_mu_ until pending_ is 0, so no write
  // overlaps a read.
  Job job_ ABSL_GUARDED_BY(run_mu_);

  // Only for sleeping: taken around the generation_ bump and the last
  // pending_ decrement so that a sleeper cannot miss its wake-up. Guards no
  // field (the predicates read atomics).
  base::Mutex mu_;
  base::CondVar wake_cv_;  // Workers sleep here between jobs.
  base::CondVar done_cv_;  // The caller sleeps here for the rest.
  // Bumped for each job; workers compare with the last one they ran.
  std::atomic<uint64_t> generation_{0};
  // Set (before a generation bump) when the pool shuts down.
  std::atomic<bool> stop_{false};
  std::atomic<int> pending_{0};  // Workers still running the current job.
};

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_THREAD_POOL_H_
