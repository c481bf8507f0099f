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
    workers_.emplace_back([this, i] { WorkerLoop(i); });
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

void ThreadPool::Range(int64_t n, int parts, int part, int64_t* begin,
                       int64_t* end) {
  const int64_t base = n / parts, extra = n % parts;
  *begin = part * base + std::min<int64_t>(part, extra);
  *end = *begin + base + (part < extra ? 1 : 0);
}

void ThreadPool::ParallelFor(int64_t n,
                             absl::FunctionRef<void(int64_t, int64_t)> fn,
                             int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t by_size = (n + min_chunk - 1) / min_chunk;
  const int parts = static_cast<int>(std::min<int64_t>(num_threads(), by_size));
  if (parts <= 1 || current_pool != nullptr) {
    // Nothing to share, or nested inside a job: run inline.
    fn(0, n);
    return;
  }
  base::MutexLock run_lock(&run_mu_);
  job_ = Job{&fn, n, parts};
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    base::MutexLock lock(&mu_);  // No wake-up lost to a sleeper.
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_cv_.SignalAll();
  current_pool = this;
  int64_t begin, end;
  Range(n, parts, 0, &begin, &end);
  fn(begin, end);
  current_pool = nullptr;
  // Wait for the workers: spin first (ranges are balanced, so they finish at
  // about the same time as we do), then sleep.
  for (int i = 0; i < kSpinIterations; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    CpuRelax(i);
  }
  base::MutexLock lock(&mu_);
  done_cv_.Wait(
      &mu_, [this] { return pending_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::WorkerLoop(int index) {
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
    const int part = index + 1;  // Part 0 is the caller's.
    // The caller holds run_mu_ until we decrement pending_ (see job_).
    const Job& job = ABSL_TS_UNCHECKED_READ(job_);
    if (part < job.parts) {
      int64_t begin, end;
      Range(job.n, job.parts, part, &begin, &end);
      (*job.fn)(begin, end);
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Last one: wake the caller if it went to sleep. Locking first means
      // the caller is either before its predicate check or already waiting.
      { base::MutexLock lock(&mu_); }
      done_cv_.Signal();
    }
  }
}

}  // namespace moeserve::kernels::cpu
