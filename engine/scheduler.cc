#include "engine/scheduler.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace moeserve::engine {

Scheduler::Scheduler(const SchedulerOptions& options, KvCache* kv,
                     OutputProcessor* output, spec_decode::Drafter* drafter,
                     SpeculationGovernor* governor)
    : options_(options),
      kv_(kv),
      output_(output),
      drafter_(drafter),
      governor_(governor) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Stop() {
  RequestStop();
  if (queue_thread_.joinable()) queue_thread_.join();
}

void Scheduler::Start() {
  queue_thread_ = std::thread([this] { QueueLoop(); });
}

absl::StatusOr<std::shared_ptr<RequestStream>> Scheduler::Enqueue(
    std::unique_ptr<RequestState> state) {
  std::vector<std::unique_ptr<RequestState>> one;
  one.push_back(std::move(state));
  MOESERVE_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<RequestStream>> streams,
                            EnqueueAll(std::move(one)));
  return std::move(streams.front());
}

absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>>
Scheduler::EnqueueAll(std::vector<std::unique_ptr<RequestState>> states) {
  base::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("engine is shutting down");
  if (waiting_.size() + states.size() >
      static_cast<size_t>(options_.max_waiting)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "engine '", options_.engine_name,
        "': waiting queue full (--max_waiting=", options_.max_waiting, ")"));
  }
  if (options_.max_waiting_per_caller > 0) {
    MOESERVE_RETURN_IF_ERROR(CheckWaitingPerCallerLocked(states));
  }
  // Every id checked before any is taken: all or nothing.
  std::set<std::string> ids;
  for (const auto& state : states) {
    const std::string& id = state->request.request_id;
    if (id.empty()) continue;
    if (in_flight_.contains(id) || !ids.insert(id).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("request_id: '", id, "' is already in flight"));
    }
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  streams.reserve(states.size());
  bool timed = false;
  for (auto& state : states) {
    state->id = ++last_request_id_;
    streams.push_back(state->stream);
    if (!state->request.request_id.empty()) {
      in_flight_.emplace(state->request.request_id, state->stream);
    }
    timed = timed || state->request.deadline != absl::InfiniteFuture() ||
            state->request.rpc_deadline != absl::InfiniteFuture();
    waiting_.push_back(std::move(state));
  }
  work_cv_.Signal();
  if (timed) {  // the queue thread may have to wake earlier now
    ++queue_epoch_;
    queue_cv_.Signal();
  }
  return streams;
}

bool Scheduler::Abort(const std::string& request_id) {
  base::MutexLock lock(&mu_);
  auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return false;
  std::shared_ptr<RequestStream> stream = it->second.lock();
  if (stream == nullptr) return false;
  stream->Cancel();
  DropQueuedLocked(stream.get());
  return true;
}

void Scheduler::DropIfQueued(const RequestStream* stream) {
  base::MutexLock lock(&mu_);
  DropQueuedLocked(stream);
}

SchedulerStats Scheduler::stats() const {
  base::MutexLock lock(&mu_);
  return {running_count_, static_cast<int>(waiting_.size()), preemptions_};
}

void Scheduler::RequestStop() {
  {
    base::MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.SignalAll();
  queue_cv_.SignalAll();
}

bool Scheduler::WaitForWork() {
  base::MutexLock lock(&mu_);
  work_cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !waiting_.empty() || !running_.empty();
  });
  return !stopping_;
}

bool Scheduler::DropQueuedLocked(const RequestStream* stream) {
  auto it = std::find_if(
      waiting_.begin(), waiting_.end(),
      [stream](const auto& s) { return s->stream.get() == stream; });
  if (it == waiting_.end()) return false;
  dropped_.push_back(std::move(*it));
  waiting_.erase(it);
  queue_cv_.Signal();
  return true;
}

void Scheduler::DropExpiredLocked(absl::Time now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (ExpiryReason(**it, now) == FinishReason::kNone) {
      ++it;
      continue;
    }
    dropped_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

absl::Time Scheduler::NextQueueDeadlineLocked() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& state : waiting_) {
    next =
        std::min({next, state->request.deadline, state->request.rpc_deadline});
  }
  return next;
}

void Scheduler::QueueLoop() {
  for (;;) {
    std::vector<std::unique_ptr<RequestState>> done;
    bool stop;
    {
      base::MutexLock lock(&mu_);
      const uint64_t epoch = queue_epoch_;
      auto ready = [this, epoch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !dropped_.empty() || queue_epoch_ != epoch;
      };
      const absl::Time next = NextQueueDeadlineLocked();
      if (next == absl::InfiniteFuture()) {
        queue_cv_.Wait(&mu_, ready);
      } else {
        // Bounded: absl::Time and the steady clock may drift apart.
        const absl::Duration wait = std::clamp(
            next - absl::Now(), absl::ZeroDuration(), absl::Seconds(1));
        queue_cv_.WaitFor(&mu_, absl::ToChronoNanoseconds(wait), ready);
      }
      DropExpiredLocked(absl::Now());
      done.swap(dropped_);
      stop = stopping_;
    }
    const absl::Time now = absl::Now();
    for (auto& state : done) {
      const FinishReason reason = ExpiryReason(*state, now);
      FinishQueued(state.get(), reason == FinishReason::kNone
                                    ? FinishReason::kCancelled
                                    : reason);
    }
    if (stop) return;
  }
}

void Scheduler::FinishQueued(RequestState* state, FinishReason reason) {
  state->finished = true;
  GenerationEvent event;
  // A preempted request keeps the text it had generated (a time limit is a
  // normal finish); one never run has none.
  if (reason == FinishReason::kTimeLimit && state->generated > 0) {
    OutputProcessor::FinishText(state, &event);
  }
  {
    base::MutexLock lock(&mu_);
    if (!state->request.request_id.empty()) {
      in_flight_.erase(state->request.request_id);
    }
    if (state->admitted_once && drafter_ != nullptr) {
      forget_.push_back(state->id);
    }
  }
  output_->PushFinal(state, reason, std::move(event), "");
}

void Scheduler::CancelAll() {
  for (auto& state : running_) {
    Finish(state.get(), FinishReason::kCancelled, {});
  }
  running_.clear();
  std::deque<std::unique_ptr<RequestState>> waiting;
  std::vector<std::unique_ptr<RequestState>> dropped;
  {
    // Pushed outside mu_: a listener may call back into the engine
    // (DropIfQueued), and must not find mu_ held.
    base::MutexLock lock(&mu_);
    waiting.swap(waiting_);
    dropped.swap(dropped_);
    running_count_ = 0;
  }
  for (auto& state : waiting) {
    FinishQueued(state.get(), FinishReason::kCancelled);
  }
  for (auto& state : dropped) {
    FinishQueued(state.get(), FinishReason::kCancelled);
  }
}

void Scheduler::FinishExpired(RequestState* state, FinishReason reason) {
  GenerationEvent event;
  if (reason == FinishReason::kTimeLimit) {
    OutputProcessor::FinishText(state, &event);
  }
  Finish(state, reason, std::move(event));
}

void Scheduler::Finish(RequestState* state, FinishReason reason,
                       GenerationEvent event, const std::string& error) {
  if (state->finished) return;
  state->finished = true;
  kv_->Release(&state->blocks);
  if (drafter_ != nullptr) drafter_->Forget(state->id);
  // The id is free again before the client can see the last event, so a
  // client may reuse it (or Abort it) as soon as its stream ends.
  {
    base::MutexLock lock(&mu_);
    if (!state->request.request_id.empty()) {
      in_flight_.erase(state->request.request_id);
    }
  }
  output_->PushFinal(state, reason, std::move(event), error);
}

absl::Status Scheduler::CheckWaitingPerCallerLocked(
    const std::vector<std::unique_ptr<RequestState>>& states) const {
  std::map<std::string_view, int> added;
  for (const auto& state : states) {
    if (!state->request.caller.empty()) ++added[state->request.caller];
  }
  for (const auto& [caller, count] : added) {
    int waiting = count;
    for (const auto& queued : waiting_) {
      if (queued->request.caller == caller) ++waiting;
    }
    if (waiting > options_.max_waiting_per_caller) {
      return absl::ResourceExhaustedError(
          absl::StrCat("engine '", options_.engine_name,
                       "': too many requests of this caller waiting "
                       "(--max_waiting_per_caller=",
                       options_.max_waiting_per_caller, ")"));
    }
  }
  return absl::OkStatus();
}

void Scheduler::Admit() {
  const absl::Time now = absl::Now();
  // Queued requests whose client left or whose time ran out end here, not
  // after they reach the front of the queue.
  std::vector<std::unique_ptr<RequestState>> expired;
  std::vector<uint64_t> forget;
  {
    base::MutexLock lock(&mu_);
    forget.swap(forget_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (ExpiryReason(**it, now) != FinishReason::kNone) {
        expired.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& state : expired) {
    FinishExpired(state.get(), ExpiryReason(*state, now));
  }
  // Preempted requests the queue thread finished: their drafts go too.
  for (uint64_t id : forget) drafter_->Forget(id);
  // Running requests per caller, when a caller's share is limited.
  const int per_caller = options_.max_running_per_caller;
  std::map<std::string, int> running_of;
  if (per_caller > 0) {
    for (const auto& state : running_) {
      if (!state->request.caller.empty()) ++running_of[state->request.caller];
    }
  }
  base::MutexLock lock(&mu_);
  // FIFO, skipping (in place) the requests of callers at their share.
  for (auto it = waiting_.begin();
       it != waiting_.end() &&
       static_cast<int>(running_.size()) < options_.max_num_seqs;) {
    RequestState* state = it->get();
    const std::string& caller = state->request.caller;
    if (per_caller > 0 && !caller.empty()) {
      int& running = running_of[caller];
      if (running >= per_caller) {
        ++it;
        continue;
      }
      ++running;
    }
    if (!state->admitted_once && metrics_ != nullptr &&
        state->request.count_in_metrics) {
      metrics_->ObserveQueueTime(absl::ToDoubleSeconds(now - state->arrival));
    }
    state->admitted_once = true;
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
  running_count_ = static_cast<int>(running_.size());
}

std::span<RequestState* const> Scheduler::Schedule() {
  Admit();
  DropFinishedOrCancelled();
  scheduled_.clear();
  ScheduleKv();
  if (scheduled_.empty()) DropFinishedOrCancelled();
  return scheduled_;
}

void Scheduler::EndStep() { DropFinishedOrCancelled(); }

void Scheduler::DropFinishedOrCancelled() {
  const absl::Time now = absl::Now();
  for (auto& state : running_) {
    if (state->finished) continue;
    const FinishReason reason = ExpiryReason(*state, now);
    if (reason != FinishReason::kNone) FinishExpired(state.get(), reason);
  }
  auto end = std::remove_if(running_.begin(), running_.end(),
                            [](const auto& s) { return s->finished; });
  running_.erase(end, running_.end());
  base::MutexLock lock(&mu_);
  running_count_ = static_cast<int>(running_.size());
}

// One decode token per prefilled request, then prefill chunks under the
// token budget, each with the KV blocks it needs. When blocks run out the
// newest request is preempted (recomputed later).
void Scheduler::ScheduleKv() {
  int64_t budget = options_.max_batched_tokens;
  // Indexed loop: Preempt() removes requests from the back of running_.
  for (size_t i = 0; i < running_.size(); ++i) {
    RequestState* state = running_[i].get();
    if (state->finished) continue;
    const int64_t remaining =
        static_cast<int64_t>(state->tokens.size()) - state->computed;
    const int64_t chunk = std::min(remaining, budget);
    if (chunk <= 0) break;
    absl::Status st = kv_->Grow(&state->blocks, state->computed + chunk);
    while (!st.ok() && running_.back().get() != state) {
      Preempt(running_.back().get());
      st = kv_->Grow(&state->blocks, state->computed + chunk);
    }
    if (!st.ok()) {
      if (scheduled_.empty()) {  // cannot fit even alone
        Finish(state, FinishReason::kError, {},
               absl::StrCat("sequence of ", state->computed + chunk,
                            " tokens does not fit in the KV cache (",
                            kv_->num_blocks(), " blocks of ", kv_->block_size(),
                            ")"));
      }
      break;
    }
    state->chunk = chunk;
    budget -= chunk;
    scheduled_.push_back(state);
  }
  if (governor_ != nullptr) GrantDraftLengths(budget);
}

// Recompute preemption (vLLM's default): free the blocks and send the
// request, generated tokens included, back to the front of the queue.
void Scheduler::Preempt(RequestState* state) {
  kv_->Release(&state->blocks);
  state->computed = 0;
  state->chunk = 0;
  state->spec_k = 0;
  state->draft = {};
  auto it = std::find_if(running_.begin(), running_.end(),
                         [state](const auto& s) { return s.get() == state; });
  std::unique_ptr<RequestState> owned = std::move(*it);
  running_.erase(it);
  base::MutexLock lock(&mu_);
  waiting_.push_front(std::move(owned));
  ++preemptions_;
  if (metrics_ != nullptr) metrics_->CountPreemption();
}

// Grants draft tokens to decoding requests from what the plain schedule
// left of the token budget and the KV cache. The first token after a
// prefill is never speculative (its logits come from the prefill).
void Scheduler::GrantDraftLengths(int64_t budget) {
  governor_->BeginStep(scheduled_);
  for (RequestState* state : scheduled_) {
    state->spec_k = 0;
    state->draft = {};
    if (!state->decoding() || budget <= 0) continue;
    int k = static_cast<int>(
        std::min<int64_t>(governor_->WantedDraftLength(state), budget));
    // Grow is all or nothing: shrink k until its blocks fit.
    while (k > 0 && !kv_->Grow(&state->blocks, state->computed + 1 + k).ok()) {
      --k;
    }
    state->spec_k = k;
    budget -= k;
  }
}

}  // namespace moeserve::engine
