// ThreadPool: a fixed set of worker threads for data-parallel loops in the CPU
// kernels. ParallelFor cuts [0, n) into a fixed number of contiguous chunks
// (a few per participant: the workers plus the calling thread, which works
// too) that the participants claim one at a time, and returns when every
// chunk is done. The cut depends only on n, min_chunk and the pool's size, and
// every body computes its items independently of who runs them, so results
// never depend on scheduling.
//
// Why claimed chunks rather than one fixed range per thread: on a machine
// where the pool has every core (the server's --threads = cores), any other
// runnable thread (gRPC's completion threads, the client) preempts one
// participant now and then. With fixed ranges the whole op then waits for the
// preempted thread's share; with claimed chunks the running participants take
// the rest and the op waits at most for the chunk that was in hand.
//
// Hot path: ParallelFor allocates nothing (the body is an absl::FunctionRef,
// the job lives in the pool) and wakes the workers through one mutex; workers
// spin briefly before sleeping so back-to-back ops of a decode step do not pay
// a futex wake-up each. A worker that wakes after the job's chunks are all
// claimed is not waited for.
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
  // Chunks per participant a job is cut into (fewer when min_chunk allows
  // fewer): enough that a preempted participant's share is picked up by the
  // others, few enough that claiming (one compare-and-swap on a shared line)
  // stays far below a chunk's work.
  static constexpr int kChunksPerThread = 4;

  // `num_threads` participants in total, including the caller of
  // ParallelFor; values < 1 are treated as 1 (no workers: everything inline).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // Joins the workers. REQUIRES: no ParallelFor in flight.

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n): at most
  // kChunksPerThread * num_threads() ranges, each of at least `min_chunk`
  // items (except when n is smaller), on whichever participant claims each.
  // Blocks until all calls returned. fn must not throw.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn,
                   int64_t min_chunk = 1) ABSL_LOCKS_EXCLUDED(run_mu_);

 private:
  void WorkerLoop();
  // Claims and runs chunks of job `gen` (the low 32 bits of its generation)
  // until none is left or the job is no longer `gen`. Returns whether this
  // thread finished the job's last chunk.
  bool RunChunks(uint32_t gen);
  // Range of chunk `chunk` out of `chunks` for n items.
  static void Range(int64_t n, int64_t chunks, int64_t chunk, int64_t* begin,
                    int64_t* end);

  // One ParallelFor call: fn over [0, n) in `chunks` ranges.
  struct Job {
    const absl::FunctionRef<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0;
    int64_t chunks = 0;
  };

  std::vector<std::thread> workers_;
  // base::Mutex (a std::mutex) rather than absl::Mutex: Debian's absl is not
  // built with TSan, so its synchronisation (and Await conditions evaluated
  // by the unlocking thread) would be invisible to it and show up as races.
  //
  // Serialises ParallelFor callers; a caller holds it for its whole job,
  // until every chunk is done.
  base::Mutex run_mu_;
  // Written by the caller holding run_mu_, before it publishes claim_.
  // Workers read it without the lock (ABSL_TS_UNCHECKED_READ) only while
  // holding an unfinished chunk of the job, obtained by a compare-and-swap
  // that acquires the caller's release of claim_; the caller keeps run_mu_
  // and the job until every chunk is done, so no write overlaps a read.
  Job job_ ABSL_GUARDED_BY(run_mu_);
  // The chunk dispenser of the current job: generation (low 32 bits) << 32 |
  // chunk count << 16 | next unclaimed chunk. Tagging it with the generation
  // lets a worker that wakes late tell that its job is over.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};  // Chunks of the current job finished.

  // Only for sleeping: taken around the generation_ bump and the last
  // chunk's completion so that a sleeper cannot miss its wake-up. Guards no
  // field (the predicates read atomics).
  base::Mutex mu_;
  base::CondVar wake_cv_;  // Workers sleep here between jobs.
  base::CondVar done_cv_;  // The caller sleeps here for the rest.
  // Bumped for each job; workers compare with the last one they saw.
  std::atomic<uint64_t> generation_{0};
  // Set (before a generation bump) when the pool shuts down.
  std::atomic<bool> stop_{false};
};

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_THREAD_POOL_H_
