#include "kernels/cpu/thread_pool.h"

#include <algorithm>

namespace moeserve::kernels::cpu {
namespace {

// The pool whose job the current thread is running, to detect nesting.
thread_local const ThreadPool* current_pool = nullptr;

// Iterations a worker polls for the next job before sleeping on the mutex.
// About 50-100 us: long enough to bridge the gap between the ops of one
// forward step, short enough not to burn a core when the server is idle.
constexpr int kSpinIterations = 20000;

// The dispenser's fields (see claim_).
constexpr int kCountBits = 16;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr int64_t kMaxChunks = static_cast<int64_t>(kCountMask);

// One polling step. Yielding now and then keeps spinning cheap when there are
// more runnable threads than cores (another process, or an oversized pool).
inline void CpuRelax(int iteration) {
  if (iteration % 64 == 63) {
    std::this_thread::yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int workers = std::max(num_threads, 1) - 1;
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    base::MutexLock lock(&mu_);
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_cv_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Range(int64_t n, int64_t chunks, int64_t chunk, int64_t* begin,
                       int64_t* end) {
  const int64_t base = n / chunks, extra = n % chunks;
  *begin = chunk * base + std::min<int64_t>(chunk, extra);
  *end = *begin + base + (chunk < extra ? 1 : 0);
}

bool ThreadPool::RunChunks(uint32_t gen) {
  uint64_t state = claim_.load(std::memory_order_acquire);
  while (true) {
    if (static_cast<uint32_t>(state >> 32) != gen) return false;
    const uint64_t chunks = (state >> kCountBits) & kCountMask;
    const uint64_t next = state & kCountMask;
    if (next >= chunks) return false;
    if (!claim_.compare_exchange_weak(state, state + 1,
                                      std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // `state` now holds the current value.
    }
    // Chunk `next` of job `gen` is ours and unfinished, so the caller is
    // still inside that job and job_ is stable (see job_).
    const Job& job = ABSL_TS_UNCHECKED_READ(job_);
    int64_t begin, end;
    Range(job.n, static_cast<int64_t>(chunks), static_cast<int64_t>(next),
          &begin, &end);
    (*job.fn)(begin, end);
    // After the last increment the caller may return: touch no job state.
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 ==
        static_cast<int64_t>(chunks)) {
      return true;
    }
    state = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::ParallelFor(int64_t n,
                             absl::FunctionRef<void(int64_t, int64_t)> fn,
                             int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t by_size = (n + min_chunk - 1) / min_chunk;
  if (num_threads() <= 1 || by_size <= 1 || current_pool != nullptr) {
    // Nothing to share, or nested inside a job: run inline.
    fn(0, n);
    return;
  }
  const int64_t chunks = std::min(
      {by_size, int64_t{kChunksPerThread} * num_threads(), kMaxChunks});
  base::MutexLock run_lock(&run_mu_);
  job_ = Job{&fn, n, chunks};
  done_.store(0, std::memory_order_relaxed);
  uint32_t gen;
  {
    base::MutexLock lock(&mu_);  // No wake-up lost to a sleeper.
    const uint64_t next_gen = generation_.load(std::memory_order_relaxed) + 1;
    gen = static_cast<uint32_t>(next_gen);
    // The dispenser first, so a worker that sees the new generation finds
    // its chunks.
    claim_.store(uint64_t{gen} << 32 | static_cast<uint64_t>(chunks)
                                           << kCountBits,
                 std::memory_order_release);
    generation_.store(next_gen, std::memory_order_release);
  }
  wake_cv_.SignalAll();
  current_pool = this;
  RunChunks(gen);
  current_pool = nullptr;
  // Wait for chunks still in other participants' hands: spin first (a chunk
  // is short), then sleep.
  for (int i = 0; i < kSpinIterations; ++i) {
    if (done_.load(std::memory_order_acquire) == chunks) return;
    CpuRelax(i);
  }
  base::MutexLock lock(&mu_);
  done_cv_.Wait(&mu_, [this, chunks] {
    return done_.load(std::memory_order_acquire) == chunks;
  });
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  current_pool = this;
  while (true) {
    // Wait for a new generation: spin, then sleep under the mutex.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kSpinIterations && gen == seen; ++i) {
      CpuRelax(i);
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      base::MutexLock lock(&mu_);
      wake_cv_.Wait(&mu_, [&] {
        return generation_.load(std::memory_order_acquire) != seen;
      });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_relaxed)) return;
    if (RunChunks(static_cast<uint32_t>(gen))) {
      // This worker finished the last chunk: wake the caller if it went to
      // sleep. Locking first means the caller is either before its predicate
      // check or already waiting.
      { base::MutexLock lock(&mu_); }
      done_cv_.Signal();
    }
  }
}

}  // namespace moeserve::kernels::cpu
