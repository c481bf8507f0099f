// Engine: one engine instance serving one model with one offload policy. It
// owns a scheduler thread that runs iteration-level continuous batching:
// between forward passes, requests join (waiting -> running, up to
// max_num_seqs) and leave (finished, cancelled, past the client's deadline,
// out of time); each step runs
// the decode token of every running sequence plus prefill chunks of new ones
// under a token budget, samples, detokenizes and streams the results.
//
// Speculative decoding (with a drafter, engine/spec/drafter.h): a decoding
// sequence may run k draft tokens per step. The drafter proposes them, the
// target runs the sequence's last token plus the drafts as one verify chunk
// (k+1 logits rows), the verifier (engine/spec/verifier.h) keeps the longest
// accepted run plus one token of the target's, and the KV cache is rolled
// back past it. Greedy output is identical to the non-speculative engine's;
// sampled output has the same distribution. k is fixed or adaptive per
// sequence (an acceptance EMA; k = 0 switches a sequence's speculation off,
// with a periodic probe), clamped by max_new_tokens and the context length,
// and charged against max_batched_tokens and the KV budget only after every
// sequence's plain decode and prefill work fits: speculation never preempts.
//
// Ownership: owns its MoeModel, KV cache, expert provider and scheduler
// thread; borrows the weights, tokenizer and backend (shared, read-only,
// between engine instances of one process; they must outlive the engine).
// Thread-safety: Submit/Abort/DropIfQueued/stats may be called from any
// thread.
//
// The waiting queue: a request leaves it when admitted, or at once when its
// client cancels (Abort, or DropIfQueued after RequestStream::Cancel/Expire)
// or its time limit / RPC deadline passes. Its slot is free before Abort /
// DropIfQueued return, and its last event (kCancelled, kDeadline,
// kTimeLimit) is pushed by the engine's queue thread, not by the scheduler,
// which may be in the middle of a long forward pass (a slow link) for
// seconds.
#ifndef MOESERVE_ENGINE_ENGINE_H_
#define MOESERVE_ENGINE_ENGINE_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "engine/engine_metrics.h"
#include "engine/expert_provider.h"
#include "engine/generation.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/spec/drafter.h"
#include "engine/tokenizer.h"
#include "kernels/backend.h"

namespace moeserve::engine {

struct EngineOptions {
  std::string name = "default";  // engine instance name (its policy)
  // Bytes of the paged KV cache. Default: 256 MiB.
  uint64_t kv_cache_bytes = 256ull << 20;
  int kv_block_size = 16;
  // Most sequences in one step. Default: 64.
  int max_num_seqs = 64;
  // Most tokens (decode + prefill chunks) in one step. Default: 2048.
  int max_batched_tokens = 2048;
  // Most requests waiting for admission; more is RESOURCE_EXHAUSTED.
  int max_waiting = 256;
  // Serving metrics go here, labelled policy=name. Null: none.
  metrics::Registry* registry = nullptr;

  // Speculative decoding. make_drafter null: none. Called once by Create
  // with the engine's target model and KV cache.
  std::function<absl::StatusOr<std::unique_ptr<spec::Drafter>>(MoeModel*,
                                                               KvCache*)>
      make_drafter;
  // Draft tokens per step: > 0 fixed; 0 adaptive, up to
  // max_speculative_tokens.
  int num_speculative_tokens = 0;
  int max_speculative_tokens = 8;
};

// Builds the engine's expert provider. `predict` is the engine's router
// probe (MoeModel::PredictExperts), for policies that predict upcoming
// layers; it may be called only from inside the provider's hooks.
using PredictFn = std::function<std::vector<int>(int layer, const float* hidden,
                                                 int64_t n, int k)>;
using ExpertProviderFactory =
    std::function<absl::StatusOr<std::unique_ptr<ExpertProvider>>(PredictFn)>;

// Speculative decoding totals (EngineMetrics exports the same).
struct SpecStats {
  uint64_t drafts = 0;           // verifications with >= 1 draft token
  uint64_t draft_tokens = 0;     // proposed
  uint64_t accepted_tokens = 0;  // accepted
  std::vector<uint64_t> accepted_per_position;
  double draft_seconds = 0;   // in the drafter
  double verify_seconds = 0;  // target passes that verified drafts

  void Add(const SpecStats& other);
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int64_t kv_free_blocks = 0;
  int64_t kv_total_blocks = 0;
  uint64_t preemptions = 0;
  SpecStats spec;
};

class Engine {
 public:
  // `make_experts` builds the expert provider (default: every expert
  // resident in the weights' packed arena).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const ModelWeights* weights, const Tokenizer* tokenizer,
      kernels::Backend* backend, const EngineOptions& options,
      ExpertProviderFactory make_experts = nullptr);
  // Cancels every request and joins the scheduler thread.
  ~Engine();

  // Queues `request`; its events arrive on the returned stream, the last one
  // with finish != kNone. RESOURCE_EXHAUSTED when the waiting queue is full,
  // ALREADY_EXISTS when a request with the same non-empty id is in flight.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(
      GenerationRequest request) ABSL_LOCKS_EXCLUDED(mu_);

  // Cancels the in-flight request `request_id`; false if there is none. A
  // queued request leaves the queue before this returns.
  bool Abort(const std::string& request_id) ABSL_LOCKS_EXCLUDED(mu_);

  // After `stream->Cancel()` or `Expire()`: if its request is still
  // waiting, it leaves the queue before this returns and finishes
  // (kCancelled / kDeadline) from the queue thread. A running request ends
  // at the scheduler's next step, as before.
  void DropIfQueued(const RequestStream* stream) ABSL_LOCKS_EXCLUDED(mu_);

  // Generates a few tokens end to end (kernels, KV cache, sampler) so the
  // first real request does not pay for cold caches and lazy allocations.
  absl::Status WarmUp();

  EngineStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  const EngineOptions& options() const { return options_; }
  const ModelWeights& weights() const { return *weights_; }
  // The provider built by the factory (e.g. to read its statistics).
  ExpertProvider* experts() const { return experts_.get(); }

 private:
  struct Sequence;

  Engine(const ModelWeights* weights, const Tokenizer* tokenizer,
         const EngineOptions& options);
  void Loop();
  bool Step();  // false when stopping
  // The queue thread: finishes dropped requests and queued ones whose time
  // ran out, without waiting for the scheduler.
  void QueueLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the waiting request of `stream` to dropped_; false if none.
  bool DropQueuedLocked(const RequestStream* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every waiting request that Expired() to dropped_.
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The earliest time limit or RPC deadline in the queue.
  absl::Time NextQueueDeadlineLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a request that left the queue without being run to the end (never
  // touches the KV cache or the drafter: the scheduler's).
  void FinishQueued(Sequence* seq, FinishReason reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Admit() ABSL_LOCKS_EXCLUDED(mu_);
  void DropFinishedOrCancelled();
  static FinishReason Expired(const Sequence& seq, absl::Time now);
  void FinishExpired(Sequence* seq, FinishReason reason);
  absl::Status ScheduleKv(std::vector<Sequence*>* scheduled);
  void Preempt(Sequence* seq);
  // Speculation: this step's k per decoding sequence (after the plain
  // schedule fits), the drafts, and the verification of a verify chunk.
  int WantedDraftLength(Sequence* seq);
  // The offload policy's k for this step (its governor), or -1.
  int GovernorDraftLength(const std::vector<Sequence*>& scheduled);
  // Feeds the governor's timings from one forward pass.
  void RecordForwardTime(std::span<const SequenceChunk> batch, double seconds);
  void GrantDraftLengths(const std::vector<Sequence*>& scheduled,
                         int64_t budget);
  void Draft(const std::vector<Sequence*>& scheduled);
  void EmitVerified(Sequence* seq, const float* rows);
  void Emit(Sequence* seq, const float* logits);
  // Appends `token` (chosen from `row`) to `seq` and `event`; returns why
  // the sequence ends with it, or kNone.
  FinishReason Deliver(Sequence* seq, int32_t token, const float* row,
                       GenerationEvent* event);
  // `row` with the EOS (ignore_eos, min_new_tokens) and min_new_tokens
  // stop-id masks applied, in masked_: valid until the next call.
  std::span<float> MaskedRow(const Sequence& seq, const float* row);
  void EndEvent(Sequence* seq, FinishReason reason, GenerationEvent event,
                int num_tokens);
  void Finish(Sequence* seq, FinishReason reason, GenerationEvent event,
              const std::string& error = "");
  void FinishText(Sequence* seq, GenerationEvent* event);

  const ModelWeights* const weights_;
  const Tokenizer* const tokenizer_;
  // Every end-of-sequence id: the tokenizer's and the model config's
  // (config.json and generation_config.json), asked once; a request ends on
  // any of them, and ignore_eos / min_new_tokens mask all of them.
  const std::vector<int32_t> eos_ids_;
  const EngineOptions options_;
  std::unique_ptr<ExpertProvider> experts_;
  std::unique_ptr<MoeModel> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<spec::Drafter> drafter_;  // null: no speculation

  // Owned by the scheduler thread only.
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<float> logits_;
  // Per-step scratch, reused so a step allocates nothing for them: the
  // step's sequences and chunks (Step), and the masked logits row a token is
  // sampled from (MaskedRow).
  std::vector<Sequence*> scheduled_;
  std::vector<SequenceChunk> batch_;
  std::vector<float> masked_;
  ExpertLookahead lookahead_;
  // What the policy's speculative governor is told (DraftLengthQuery), as
  // EMAs; and the k it chose for this step (-1: none).
  struct SpecTimings {
    std::vector<double> acceptance;  // [i]: P(draft i+1 passes | 1..i did)
    double draft_seconds_per_position = 0;
    double verify_seconds_base = 0;
    double verify_seconds_per_draft = 0;
  } timings_;
  int step_k_ = -1;
  // This step's speculation totals, folded into spec_stats_ under one lock
  // at the end of the step.
  SpecStats step_spec_;

  mutable base::Mutex mu_;
  // Signalled when work arrives (Submit) or the engine stops.
  base::CondVar work_cv_;
  // Signalled when a request is dropped from the queue, one with a
  // deadline is queued, or the engine stops (the queue thread waits on it).
  base::CondVar queue_cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_ ABSL_GUARDED_BY(mu_);
  // Left the queue (cancelled, out of time), not yet finished.
  std::vector<std::unique_ptr<Sequence>> dropped_ ABSL_GUARDED_BY(mu_);
  // Ids of preempted sequences dropped from the queue, for the scheduler to
  // tell the drafter (Drafter::Forget is not thread-safe).
  std::vector<uint64_t> forget_ ABSL_GUARDED_BY(mu_);
  // Bumped when a request with a deadline is queued: the queue thread
  // recomputes how long it may sleep.
  uint64_t queue_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::weak_ptr<RequestStream>> in_flight_
      ABSL_GUARDED_BY(mu_);
  int running_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t preemptions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_sequence_id_ ABSL_GUARDED_BY(mu_) = 0;
  SpecStats spec_stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::thread queue_thread_;
  // Last member: destroyed first, so its gauges stop reading the engine
  // before anything they read goes away.
  std::unique_ptr<EngineMetrics> metrics_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_ENGINE_H_
