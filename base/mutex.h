// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable
// wrapped so that clang's thread-safety analysis checks every
// ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED that names them (LevelDB's
// port::Mutex is the model). An annotation on a bare std::mutex is a comment:
// std::mutex is not a capability, so clang rejects or ignores it.
//
// Use this, not absl::Mutex, for state shared between threads: Debian's
// Abseil is not built with ThreadSanitizer, so TSan cannot see an
// absl::Mutex's ordering (it reports the data it guards as racy), while it
// sees std::mutex through its pthread interceptors. absl::Mutex remains fine
// where no thread races, e.g. a registry filled by static initialisers.
//
// Checked by `bazel build --config=clang_tsa` (see .bazelrc); g++ ignores
// the annotations.
#ifndef MOESERVE_BASE_MUTEX_H_
#define MOESERVE_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"

namespace moeserve::base {

class CondVar;

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }
  // Tells the analysis the caller holds the lock (no run-time check).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for the scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable used with one Mutex. The mutex is passed to every
// wait (as absl::CondVar takes it) so that clang can check the caller holds
// it: an annotation naming a mutex stored inside the CondVar could not be
// matched to the caller's. Every wait requires the mutex held and returns
// with it held; all waits on one CondVar must pass the same mutex. Waits may
// wake spuriously: loop on the condition, or use a predicate form. A
// predicate runs with the mutex held; one that reads guarded fields says so:
//
//   base::MutexLock lock(&mu_);
//   cv_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; });
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }

  // Waits until `ready()` is true. (The analysis is off inside the predicate
  // forms only: it cannot tell that `ready`'s mutex is `mu`. Callers are
  // still checked against the REQUIRES.)
  template <typename Predicate>
  void Wait(Mutex* mu, Predicate ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    while (!ready()) Wait(mu);
  }

  // Waits until `ready()` is true or `deadline` (steady clock) passes;
  // returns ready().
  template <typename Predicate>
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline,
                 Predicate ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    while (!ready()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
    }
    lock.release();
    return ready();
  }

  template <typename Predicate>
  bool WaitFor(Mutex* mu, std::chrono::nanoseconds timeout, Predicate ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout,
                     std::move(ready));
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace moeserve::base

#endif  // MOESERVE_BASE_MUTEX_H_
