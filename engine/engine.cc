#include "engine/engine.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "engine/internal/engine_sequence.h"
#include "engine/sampling/stop_strings.h"

namespace moeserve::engine {

void SpecStats::Add(const SpecStats& other) {
  drafts += other.drafts;
  draft_tokens += other.draft_tokens;
  accepted_tokens += other.accepted_tokens;
  if (accepted_per_position.size() < other.accepted_per_position.size()) {
    accepted_per_position.resize(other.accepted_per_position.size(), 0);
  }
  for (size_t i = 0; i < other.accepted_per_position.size(); ++i) {
    accepted_per_position[i] += other.accepted_per_position[i];
  }
  draft_seconds += other.draft_seconds;
  verify_seconds += other.verify_seconds;
}

namespace {

// The tokenizer's EOS id (if any) and the config's, without repeats; only
// ids inside the vocabulary (the config's are checked at load).
std::vector<int32_t> EosIds(const ModelWeights& weights,
                            const Tokenizer& tokenizer) {
  const int64_t vocab = weights.config().vocab_size;
  std::vector<int32_t> ids;
  auto add = [&](int64_t id) {
    if (id < 0 || id >= vocab) return;
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
      ids.push_back(static_cast<int32_t>(id));
    }
  };
  add(tokenizer.eos_id());
  for (int64_t id : weights.config().eos_token_ids) add(id);
  return ids;
}

}  // namespace

Engine::Engine(const ModelWeights* weights, const Tokenizer* tokenizer,
               const EngineOptions& options)
    : weights_(weights),
      tokenizer_(tokenizer),
      eos_ids_(EosIds(*weights, *tokenizer)),
      options_(options) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const ModelWeights* weights, const Tokenizer* tokenizer,
    kernels::Backend* backend, const EngineOptions& options,
    ExpertProviderFactory make_experts) {
  if (options.max_num_seqs <= 0 || options.max_batched_tokens <= 0 ||
      options.max_waiting < 0) {
    return absl::InvalidArgumentError(
        "engine: max_num_seqs and max_batched_tokens must be > 0");
  }
  if (options.num_speculative_tokens < 0 ||
      options.max_speculative_tokens < 1) {
    return absl::InvalidArgumentError(
        "engine: num_speculative_tokens must be >= 0 and "
        "max_speculative_tokens >= 1");
  }
  auto engine =
      std::unique_ptr<Engine>(new Engine(weights, tokenizer, options));
  if (make_experts == nullptr) {
    engine->experts_ = std::make_unique<ResidentExperts>(weights);
  } else {
    Engine* raw = engine.get();
    MOESERVE_ASSIGN_OR_RETURN(
        engine->experts_,
        make_experts([raw](int layer, const float* hidden, int64_t n, int k) {
          return raw->model_->PredictExperts(layer, hidden, n, k);
        }));
  }
  MOESERVE_ASSIGN_OR_RETURN(
      engine->model_,
      MoeModel::Create(weights, backend, engine->experts_.get()));
  const ModelConfig& c = weights->config();
  MOESERVE_ASSIGN_OR_RETURN(
      engine->kv_,
      KvCache::Create(c,
                      KvCache::BlocksForBytes(c, options.kv_block_size,
                                              options.kv_cache_bytes),
                      options.kv_block_size, backend));
  if (options.make_drafter) {
    MOESERVE_ASSIGN_OR_RETURN(
        engine->drafter_,
        options.make_drafter(engine->model_.get(), engine->kv_.get()));
    ExpertProvider* experts = engine->experts_.get();
    engine->drafter_->SetLookaheadListener(
        [experts](const ExpertLookahead& l) { experts->OnLookahead(l); });
  }
  if (options.registry != nullptr) {
    Engine* raw = engine.get();
    MOESERVE_ASSIGN_OR_RETURN(
        engine->metrics_,
        EngineMetrics::Create(options.registry, options.name, [raw] {
          const EngineStats s = raw->stats();
          return EngineLoad{s.running, s.waiting,
                            s.kv_total_blocks == 0
                                ? 0.0
                                : 1.0 - static_cast<double>(s.kv_free_blocks) /
                                            s.kv_total_blocks};
        }));
  }
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  engine->queue_thread_ = std::thread([e = engine.get()] { e->QueueLoop(); });
  return engine;
}

Engine::~Engine() {
  {
    base::MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.SignalAll();
  queue_cv_.SignalAll();
  // Not joinable when Create() failed before starting the scheduler.
  if (thread_.joinable()) thread_.join();
  if (queue_thread_.joinable()) queue_thread_.join();
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(
    GenerationRequest request) {
  auto seq = std::make_unique<Sequence>();
  seq->stream = std::make_shared<RequestStream>();
  seq->tokens = request.prompt;
  seq->prompt_len = request.prompt.size();
  seq->sampler = std::make_unique<Sampler>(
      request.sampling, request.prompt,
      static_cast<int32_t>(weights_->config().vocab_size));
  seq->detokenizer = std::make_unique<IncrementalDetokenizer>(tokenizer_);
  // Prime the detokenizer with the prompt so the first generated token keeps
  // its leading space (prompt text + streamed text == full decode). Prime
  // decodes only the prompt's tail: a Next per prompt token (two
  // sentencepiece decodes each) took 1.6-2.0 ms for 512 tokens on the demo
  // tokenizer, Prime 0.011 ms, and this runs before the request is queued.
  (void)seq->detokenizer->Prime(request.prompt);
  seq->stops = std::make_unique<StopStringMatcher>(request.stop);
  seq->request = std::move(request);
  seq->arrival = absl::Now();
  std::shared_ptr<RequestStream> stream = seq->stream;
  base::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("engine is shutting down");
  seq->id = ++last_sequence_id_;
  if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "engine '", options_.name,
        "': waiting queue full (--max_waiting=", options_.max_waiting, ")"));
  }
  const std::string& id = seq->request.request_id;
  if (!id.empty()) {
    auto [it, inserted] = in_flight_.try_emplace(id, stream);
    if (!inserted) {
      return absl::AlreadyExistsError(
          absl::StrCat("request_id: '", id, "' is already in flight"));
    }
  }
  const bool timed = seq->request.deadline != absl::InfiniteFuture() ||
                     seq->request.rpc_deadline != absl::InfiniteFuture();
  waiting_.push_back(std::move(seq));
  work_cv_.Signal();
  if (timed) {  // the queue thread may have to wake earlier now
    ++queue_epoch_;
    queue_cv_.Signal();
  }
  return stream;
}

bool Engine::Abort(const std::string& request_id) {
  base::MutexLock lock(&mu_);
  auto it = in_flight_.find(request_id);
  if (it == in_flight_.end()) return false;
  std::shared_ptr<RequestStream> stream = it->second.lock();
  if (stream == nullptr) return false;
  stream->Cancel();
  DropQueuedLocked(stream.get());
  return true;
}

void Engine::DropIfQueued(const RequestStream* stream) {
  base::MutexLock lock(&mu_);
  DropQueuedLocked(stream);
}

bool Engine::DropQueuedLocked(const RequestStream* stream) {
  auto it = std::find_if(
      waiting_.begin(), waiting_.end(),
      [stream](const auto& s) { return s->stream.get() == stream; });
  if (it == waiting_.end()) return false;
  dropped_.push_back(std::move(*it));
  waiting_.erase(it);
  queue_cv_.Signal();
  return true;
}

void Engine::DropExpiredLocked(absl::Time now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (Expired(**it, now) == FinishReason::kNone) {
      ++it;
      continue;
    }
    dropped_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

absl::Time Engine::NextQueueDeadlineLocked() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& seq : waiting_) {
    next = std::min({next, seq->request.deadline, seq->request.rpc_deadline});
  }
  return next;
}

void Engine::QueueLoop() {
  for (;;) {
    std::vector<std::unique_ptr<Sequence>> done;
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
    for (auto& seq : done) {
      const FinishReason reason = Expired(*seq, now);
      FinishQueued(seq.get(), reason == FinishReason::kNone
                                  ? FinishReason::kCancelled
                                  : reason);
    }
    if (stop) return;
  }
}

void Engine::FinishQueued(Sequence* seq, FinishReason reason) {
  seq->finished = true;
  GenerationEvent event;
  // A preempted request keeps the text it had generated (a time limit is a
  // normal finish); one never run has none.
  if (reason == FinishReason::kTimeLimit && seq->generated > 0) {
    FinishText(seq, &event);
  }
  if (metrics_ != nullptr && seq->request.count_in_metrics) {
    metrics_->CountFinished(reason);
    metrics_->ObserveRequestLatency(
        absl::ToDoubleSeconds(absl::Now() - seq->arrival));
  }
  event.finish = reason;
  event.prompt_tokens = static_cast<uint32_t>(seq->prompt_len);
  event.completion_tokens = seq->generated;
  {
    base::MutexLock lock(&mu_);
    if (!seq->request.request_id.empty()) {
      in_flight_.erase(seq->request.request_id);
    }
    if (seq->admitted_once && drafter_ != nullptr) forget_.push_back(seq->id);
  }
  seq->stream->Push(std::move(event));
}

EngineStats Engine::stats() const {
  base::MutexLock lock(&mu_);
  return {running_count_,     static_cast<int>(waiting_.size()),
          kv_->free_blocks(), kv_->num_blocks(),
          preemptions_,       spec_stats_};
}

absl::Status Engine::WarmUp() {
  GenerationRequest request;
  request.prompt = {static_cast<int32_t>(
      std::max<int64_t>(0, weights_->config().bos_token_id.value_or(0)))};
  request.max_new_tokens = 4;
  request.ignore_eos = true;
  request.count_in_metrics = false;
  MOESERVE_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream,
                            Submit(std::move(request)));
  GenerationEvent event;
  while (stream->Pop(&event, absl::Seconds(60))) {
    if (event.finish == FinishReason::kError) {
      return absl::InternalError(absl::StrCat("warm-up: ", event.error));
    }
    if (event.finish != FinishReason::kNone) return absl::OkStatus();
  }
  return absl::DeadlineExceededError("warm-up did not finish in 60 s");
}

void Engine::Loop() {
  while (Step()) {
  }
  // Shutting down: everything still queued or running is cancelled.
  for (auto& seq : running_) Finish(seq.get(), FinishReason::kCancelled, {});
  std::deque<std::unique_ptr<Sequence>> waiting;
  {
    // Pushed outside mu_: a listener may call back into the engine
    // (DropIfQueued), and must not find mu_ held.
    base::MutexLock lock(&mu_);
    waiting.swap(waiting_);
  }
  for (auto& seq : waiting) FinishQueued(seq.get(), FinishReason::kCancelled);
}

// Why `seq` must end now, or kNone. The client's deadline comes first: when
// it passes gRPC also cancels the call, and the finish must say "deadline".
FinishReason Engine::Expired(const Sequence& seq, absl::Time now) {
  if (now >= seq.request.rpc_deadline || seq.stream->expired()) {
    return FinishReason::kDeadline;
  }
  if (seq.stream->cancelled()) return FinishReason::kCancelled;
  if (now >= seq.request.deadline) return FinishReason::kTimeLimit;
  return FinishReason::kNone;
}

// Ends `seq` for an Expired() reason; a time limit keeps the text so far.
void Engine::FinishExpired(Sequence* seq, FinishReason reason) {
  GenerationEvent event;
  if (reason == FinishReason::kTimeLimit) FinishText(seq, &event);
  Finish(seq, reason, std::move(event));
}

void Engine::Admit() {
  const absl::Time now = absl::Now();
  // Queued requests whose client left or whose time ran out end here, not
  // after they reach the front of the queue.
  std::vector<std::unique_ptr<Sequence>> expired;
  std::vector<uint64_t> forget;
  {
    base::MutexLock lock(&mu_);
    forget.swap(forget_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (Expired(**it, now) != FinishReason::kNone) {
        expired.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& seq : expired) FinishExpired(seq.get(), Expired(*seq, now));
  // Preempted requests the queue thread finished: their drafts go too.
  for (uint64_t id : forget) drafter_->Forget(id);
  base::MutexLock lock(&mu_);
  while (!waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_num_seqs) {
    Sequence* seq = waiting_.front().get();
    if (!seq->admitted_once && metrics_ != nullptr &&
        seq->request.count_in_metrics) {
      metrics_->ObserveQueueTime(absl::ToDoubleSeconds(now - seq->arrival));
    }
    seq->admitted_once = true;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  running_count_ = static_cast<int>(running_.size());
}

bool Engine::Step() {
  {
    base::MutexLock lock(&mu_);
    work_cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || !waiting_.empty() || !running_.empty();
    });
    if (stopping_) return false;
  }
  Admit();
  DropFinishedOrCancelled();
  std::vector<Sequence*>& scheduled = scheduled_;
  scheduled.clear();
  if (absl::Status st = ScheduleKv(&scheduled); !st.ok() || scheduled.empty()) {
    DropFinishedOrCancelled();
    return true;
  }
  if (drafter_ != nullptr) Draft(scheduled);
  const absl::Time forward_start = absl::Now();
  std::vector<SequenceChunk>& batch = batch_;
  batch.clear();
  bool verifying = false;
  for (Sequence* seq : scheduled) {
    if (!seq->draft.tokens.empty()) {
      // Verify chunk: the last token, then the drafts after it.
      seq->verify_tokens.assign(1, seq->tokens.back());
      seq->verify_tokens.insert(seq->verify_tokens.end(),
                                seq->draft.tokens.begin(),
                                seq->draft.tokens.end());
      batch.push_back({seq->verify_tokens, seq->computed, &seq->blocks,
                       static_cast<int>(seq->verify_tokens.size())});
      verifying = true;
      continue;
    }
    batch.push_back({std::span(seq->tokens).subspan(seq->computed, seq->chunk),
                     seq->computed, &seq->blocks});
  }
  absl::Status st = model_->Forward(batch, kv_.get(), &logits_);
  const absl::Time forward_end = absl::Now();
  if (st.ok() && drafter_ != nullptr) {
    RecordForwardTime(batch,
                      absl::ToDoubleSeconds(forward_end - forward_start));
  }
  const int64_t vocab = weights_->config().vocab_size;
  const float* rows = logits_.data();
  for (size_t i = 0; i < scheduled.size(); ++i) {
    Sequence* seq = scheduled[i];
    const float* seq_rows = rows;
    rows += batch[i].num_logits * vocab;
    if (!st.ok()) {
      Finish(seq, FinishReason::kError, {}, std::string(st.message()));
      continue;
    }
    if (batch[i].num_logits > 1) {
      EmitVerified(seq, seq_rows);
      continue;
    }
    const bool done_prefill = !seq->prefilling();
    seq->computed += seq->chunk;
    seq->chunk = 0;
    if (done_prefill) Emit(seq, seq_rows);
  }
  if (drafter_ != nullptr) {
    if (verifying) {
      const double verify = absl::ToDoubleSeconds(forward_end - forward_start);
      step_spec_.verify_seconds += verify;
      if (metrics_ != nullptr) metrics_->AddVerifySeconds(verify);
    }
    base::MutexLock lock(&mu_);
    spec_stats_.Add(step_spec_);
    step_spec_ = {};
  }
  DropFinishedOrCancelled();
  return true;
}

// Ends requests whose client left or whose time ran out, and removes every
// finished sequence, returning its KV blocks.
void Engine::DropFinishedOrCancelled() {
  const absl::Time now = absl::Now();
  for (auto& seq : running_) {
    if (seq->finished) continue;
    const FinishReason reason = Expired(*seq, now);
    if (reason != FinishReason::kNone) FinishExpired(seq.get(), reason);
  }
  auto end = std::remove_if(running_.begin(), running_.end(),
                            [](const auto& s) { return s->finished; });
  running_.erase(end, running_.end());
  base::MutexLock lock(&mu_);
  running_count_ = static_cast<int>(running_.size());
}

// Chooses this step's work: one decode token per prefilled sequence, then
// prefill chunks under the token budget, each with the KV blocks it needs.
// When blocks run out the newest sequence is preempted (recomputed later).
absl::Status Engine::ScheduleKv(std::vector<Sequence*>* scheduled) {
  int64_t budget = options_.max_batched_tokens;
  // Indexed loop: Preempt() removes sequences from the back of running_.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* seq = running_[i].get();
    if (seq->finished) continue;
    const int64_t remaining =
        static_cast<int64_t>(seq->tokens.size()) - seq->computed;
    const int64_t chunk = std::min(remaining, budget);
    if (chunk <= 0) break;
    absl::Status st = kv_->Grow(&seq->blocks, seq->computed + chunk);
    while (!st.ok() && running_.back().get() != seq) {
      Preempt(running_.back().get());
      st = kv_->Grow(&seq->blocks, seq->computed + chunk);
    }
    if (!st.ok()) {
      if (scheduled->empty()) {  // cannot fit even alone
        Finish(seq, FinishReason::kError, {},
               absl::StrCat("sequence of ", seq->computed + chunk,
                            " tokens does not fit in the KV cache (",
                            kv_->num_blocks(), " blocks of ", kv_->block_size(),
                            ")"));
      }
      break;
    }
    seq->chunk = chunk;
    budget -= chunk;
    scheduled->push_back(seq);
  }
  if (drafter_ != nullptr) GrantDraftLengths(*scheduled, budget);
  return absl::OkStatus();
}

// Recompute preemption (vLLM's default): free the blocks and send the
// sequence, generated tokens included, back to the front of the queue.
void Engine::Preempt(Sequence* seq) {
  kv_->Release(&seq->blocks);
  seq->computed = 0;
  seq->chunk = 0;
  seq->spec_k = 0;
  seq->draft = {};
  auto it = std::find_if(running_.begin(), running_.end(),
                         [seq](const auto& s) { return s.get() == seq; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  base::MutexLock lock(&mu_);
  waiting_.push_front(std::move(owned));
  ++preemptions_;
  if (metrics_ != nullptr) metrics_->CountPreemption();
}

std::span<float> Engine::MaskedRow(const Sequence& seq, const float* row) {
  const GenerationRequest& r = seq.request;
  std::vector<float>& logits = masked_;
  logits.assign(row, row + weights_->config().vocab_size);
  constexpr float kNeverSample = -std::numeric_limits<float>::infinity();
  const bool before_min = seq.generated < r.min_new_tokens;
  // ignore_eos masks EOS for the whole request (llama.cpp's and vLLM's
  // meaning): it is never sampled, so no EOS text or id reaches the client.
  if (r.ignore_eos || before_min) {
    for (int32_t eos : eos_ids_) logits[eos] = kNeverSample;
  }
  if (before_min) {
    for (int32_t t : r.stop_token_ids) logits[t] = kNeverSample;
  }
  return logits;
}

// Samples the next token of `seq` from its logits row and streams it.
void Engine::Emit(Sequence* seq, const float* row) {
  const int32_t token = seq->sampler->Sample(MaskedRow(*seq, row));
  GenerationEvent event;
  const FinishReason reason = Deliver(seq, token, row, &event);
  EndEvent(seq, reason, std::move(event), 1);
}

FinishReason Engine::Deliver(Sequence* seq, int32_t token, const float* row,
                             GenerationEvent* event) {
  const GenerationRequest& r = seq->request;
  const int64_t vocab = weights_->config().vocab_size;
  if (r.logprobs > 0) {
    auto [chosen, top] =
        TopLogprobs({row, static_cast<size_t>(vocab)}, token, r.logprobs);
    event->logprobs.push_back({chosen, std::move(top)});
  }
  seq->tokens.push_back(token);
  ++seq->generated;
  event->tokens.push_back(token);
  const bool is_eos =
      !r.ignore_eos &&
      std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  if (is_eos) return FinishReason::kEos;
  const bool is_stop_id =
      std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
      r.stop_token_ids.end();
  absl::StatusOr<std::string> delta = seq->detokenizer->Next(token);
  StopStringMatcher::Step step = seq->stops->Push(delta.ok() ? *delta : "");
  event->text += step.emit;
  if (step.stopped || is_stop_id) return FinishReason::kStopSequence;
  if (seq->generated >= r.max_new_tokens ||
      static_cast<int64_t>(seq->tokens.size()) >=
          weights_->config().max_position_embeddings) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

// Streams the `num_tokens` tokens of `event` (ending `seq` when `reason` is
// set). A step that emits n tokens records n inter-token gaps of dt / n.
void Engine::EndEvent(Sequence* seq, FinishReason reason, GenerationEvent event,
                      int num_tokens) {
  const GenerationRequest& r = seq->request;
  if (metrics_ != nullptr && r.count_in_metrics) {
    const absl::Time now = absl::Now();
    if (seq->generated == static_cast<uint32_t>(num_tokens)) {
      metrics_->ObserveTimeToFirstToken(
          absl::ToDoubleSeconds(now - seq->arrival));
      metrics_->AddPromptTokens(static_cast<double>(seq->prompt_len));
    } else {
      const double gap =
          absl::ToDoubleSeconds(now - seq->last_token) / num_tokens;
      for (int i = 0; i < num_tokens; ++i) {
        metrics_->ObserveInterTokenLatency(gap);
      }
    }
    metrics_->AddGenerationTokens(num_tokens);
    seq->last_token = now;
  }
  if (reason == FinishReason::kNone) {
    event.prompt_tokens = static_cast<uint32_t>(seq->prompt_len);
    event.completion_tokens = seq->generated;
    seq->stream->Push(std::move(event));
    return;
  }
  if (reason != FinishReason::kStopSequence) FinishText(seq, &event);
  Finish(seq, reason, std::move(event));
}

// Appends the text still held back (a partial character, a possible stop
// string prefix) when a sequence ends for a reason other than a stop string.
void Engine::FinishText(Sequence* seq, GenerationEvent* event) {
  absl::StatusOr<std::string> tail = seq->detokenizer->Flush();
  event->text += seq->stops->Push(tail.ok() ? *tail : "").emit;
  event->text += seq->stops->Flush();
}

void Engine::Finish(Sequence* seq, FinishReason reason, GenerationEvent event,
                    const std::string& error) {
  if (seq->finished) return;
  seq->finished = true;
  kv_->Release(&seq->blocks);
  if (drafter_ != nullptr) drafter_->Forget(seq->id);
  if (metrics_ != nullptr && seq->request.count_in_metrics) {
    metrics_->CountFinished(reason);
    metrics_->ObserveRequestLatency(
        absl::ToDoubleSeconds(absl::Now() - seq->arrival));
  }
  event.finish = reason;
  event.error = error;
  event.prompt_tokens = static_cast<uint32_t>(seq->prompt_len);
  event.completion_tokens = seq->generated;
  // The id is free again before the client can see the last event, so a
  // client may reuse it (or Abort it) as soon as its stream ends.
  {
    base::MutexLock lock(&mu_);
    if (!seq->request.request_id.empty()) {
      in_flight_.erase(seq->request.request_id);
    }
  }
  seq->stream->Push(std::move(event));
}

}  // namespace moeserve::engine
