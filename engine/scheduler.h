// Scheduler: which requests run in the next engine step, and how much of
// each (vLLM v1's scheduler). Iteration-level continuous batching: between
// steps requests join (waiting -> running, up to max_num_seqs, FIFO) and
// leave (finished, cancelled, past the client's deadline, out of time);
// each step runs the decode token of every running request plus prefill
// chunks of new ones under a token budget (max_batched_tokens), each with
// the KV blocks it needs. When blocks run out the newest request is
// preempted (recompute: its blocks are freed and it goes back to the front
// of the queue). With a drafter, decoding requests are then granted draft
// tokens (SpeculationGovernor's k) from what the plain schedule left of the
// token budget and the KV cache: speculation never preempts.
//
// Per-caller limits (optional): a caller at its running share waits while
// others' requests are admitted (FIFO among the rest); a caller at its
// waiting share is refused at Enqueue.
//
// The waiting queue: a request leaves it when admitted, or at once when its
// client cancels (Abort, or DropIfQueued after RequestStream::Cancel /
// Expire) or its time limit / RPC deadline passes. Its slot is free before
// Abort / DropIfQueued return, and its last event (kCancelled, kDeadline,
// kTimeLimit) is pushed by the scheduler's queue thread, not by the step
// thread, which may be in the middle of a long forward pass (a slow link)
// for seconds.
//
// The plan (Schedule) needs no model: the scheduler's tests run it over a
// KV cache and requests alone.
//
// Ownership: owns every RequestState and the queue thread. Borrows the KV
// cache, the output processor (last events), the drafter (Forget; null: no
// speculation), the governor (null without a drafter) and the metrics.
// Thread-safety: Enqueue, Abort, DropIfQueued, stats, RequestStop and Stop
// from any thread; WaitForWork, Schedule, Finish, EndStep and CancelAll from
// the step thread only.
#ifndef MOESERVE_ENGINE_SCHEDULER_H_
#define MOESERVE_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "engine/engine_metrics.h"
#include "engine/generation.h"
#include "engine/kv_cache.h"
#include "engine/output_processor.h"
#include "engine/request_state.h"
#include "engine/spec_decode/drafter.h"
#include "engine/speculation_governor.h"

namespace moeserve::engine {

struct SchedulerOptions {
  std::string engine_name = "default";  // for messages
  int max_num_seqs = 64;
  int max_batched_tokens = 2048;
  int max_waiting = 256;
  // Per caller (GenerationRequest::caller), 0 = no limit: at most this
  // many of one caller's requests run at once (the rest wait, and other
  // callers' requests are admitted past them), and at most this many wait
  // (more: RESOURCE_EXHAUSTED naming --max_waiting_per_caller).
  int max_running_per_caller = 0;
  int max_waiting_per_caller = 0;
};

struct SchedulerStats {
  int running = 0;
  int waiting = 0;
  uint64_t preemptions = 0;
};

class Scheduler {
 public:
  // `drafter` and `governor`: both or neither (no speculation).
  Scheduler(const SchedulerOptions& options, KvCache* kv,
            OutputProcessor* output, spec_decode::Drafter* drafter,
            SpeculationGovernor* governor);
  // Stop().
  ~Scheduler();

  // Before Start (metrics are created last).
  void set_metrics(EngineMetrics* metrics) { metrics_ = metrics; }
  // Starts the queue thread.
  void Start();

  // Queues `state` and returns its stream. UNAVAILABLE once stopping,
  // RESOURCE_EXHAUSTED when the waiting queue is full, ALREADY_EXISTS when
  // a request with the same non-empty id is in flight.
  absl::StatusOr<std::shared_ptr<RequestStream>> Enqueue(
      std::unique_ptr<RequestState> state) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues every state in one step, in order, or none (the errors of
  // Enqueue): the next Schedule sees them all together, as an offline batch
  // needs. The streams are in the order of `states`.
  absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> EnqueueAll(
      std::vector<std::unique_ptr<RequestState>> states)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the in-flight request `request_id`; false if there is none. A
  // queued request leaves the queue before this returns.
  bool Abort(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);
  // After `stream->Cancel()` or `Expire()`: if its request is still
  // waiting, it leaves the queue before this returns and finishes
  // (kCancelled / kDeadline) from the queue thread.
  void DropIfQueued(const RequestStream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  SchedulerStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes WaitForWork (which then returns false) and the queue thread.
  void RequestStop() ABSL_LOCKS_EXCLUDED(mu_);
  // RequestStop, then joins the queue thread (after its last drain).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until there is a request to run or the scheduler stops; false
  // when stopping.
  bool WaitForWork() ABSL_LOCKS_EXCLUDED(mu_);

  // This step's plan: admits, ends expired requests, chooses the chunk
  // (RequestState::chunk) and draft length (spec_k) of every request that
  // runs, growing their KV blocks (preempting when needed). Valid until
  // the next call; empty when nothing can run.
  std::span<RequestState* const> Schedule() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `state` (running): frees its KV blocks, its id and its draft
  // state, then pushes its last event. No-op when already finished.
  void Finish(RequestState* state, FinishReason reason, GenerationEvent event,
              const std::string& error = "") ABSL_LOCKS_EXCLUDED(mu_);
  // After a step: ends the requests whose client left or whose time ran
  // out, and removes every finished request.
  void EndStep() ABSL_LOCKS_EXCLUDED(mu_);
  // Shutting down (step thread, after its last step): every running,
  // waiting or dropped request ends kCancelled.
  void CancelAll() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void QueueLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the waiting request of `stream` to dropped_; false if none.
  bool DropQueuedLocked(const RequestStream* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every waiting request that expired to dropped_.
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The earliest time limit or RPC deadline in the queue.
  absl::Time NextQueueDeadlineLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a request that left the queue without being run to the end (never
  // touches the KV cache or the drafter: the step thread's).
  void FinishQueued(RequestState* state, FinishReason reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `state` for an ExpiryReason; a time limit keeps the text so far.
  void FinishExpired(RequestState* state, FinishReason reason);
  void Admit() ABSL_LOCKS_EXCLUDED(mu_);
  // RESOURCE_EXHAUSTED when queuing `states` would put a caller over
  // max_waiting_per_caller.
  absl::Status CheckWaitingPerCallerLocked(
      const std::vector<std::unique_ptr<RequestState>>& states) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropFinishedOrCancelled() ABSL_LOCKS_EXCLUDED(mu_);
  void ScheduleKv();
  void Preempt(RequestState* state) ABSL_LOCKS_EXCLUDED(mu_);
  void GrantDraftLengths(int64_t budget);

  const SchedulerOptions options_;
  KvCache* const kv_;
  OutputProcessor* const output_;
  spec_decode::Drafter* const drafter_;
  SpeculationGovernor* const governor_;
  EngineMetrics* metrics_ = nullptr;

  // Step thread only.
  std::vector<std::unique_ptr<RequestState>> running_;
  std::vector<RequestState*> scheduled_;  // Schedule's plan

  mutable base::Mutex mu_;
  // Signalled when work arrives (Enqueue) or the scheduler stops.
  base::CondVar work_cv_;
  // Signalled when a request is dropped from the queue, one with a
  // deadline is queued, or the scheduler stops (the queue thread waits).
  base::CondVar queue_cv_;
  std::deque<std::unique_ptr<RequestState>> waiting_ ABSL_GUARDED_BY(mu_);
  // Left the queue (cancelled, out of time), not yet finished.
  std::vector<std::unique_ptr<RequestState>> dropped_ ABSL_GUARDED_BY(mu_);
  // Ids of preempted requests finished from the queue, for the step thread
  // to tell the drafter (Drafter::Forget is not thread-safe).
  std::vector<uint64_t> forget_ ABSL_GUARDED_BY(mu_);
  // Bumped when a request with a deadline is queued: the queue thread
  // recomputes how long it may sleep.
  uint64_t queue_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::weak_ptr<RequestStream>> in_flight_
      ABSL_GUARDED_BY(mu_);
  int running_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t preemptions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_request_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread queue_thread_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_SCHEDULER_H_
