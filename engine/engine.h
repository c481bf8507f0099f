// Engine: one engine instance serving one model with one offload policy,
// put together from three parts as vLLM v1 splits its core:
//   Scheduler        (scheduler.h) admission, the waiting queue and its
//                    thread, KV blocks, preemption, draft-length grants;
//                    returns each step's plan;
//   ModelRunner      (model_runner.h) drafting, the batch, the forward
//                    pass, verification of drafts;
//   OutputProcessor  (output_processor.h) masks, token delivery, stop
//                    handling, finish text, serving metrics.
// The engine owns them and the step thread that runs
//   plan = scheduler.Schedule(); runner.Run(plan);
//   for each request: runner.Deliver -> (ends?) scheduler.Finish.
//
// Speculative decoding (with a drafter, engine/spec_decode/drafter.h): a
// decoding request may run k draft tokens per step (SpeculationGovernor, fixed
// or adaptive; the offload policy answers through the SpeculationAdvisor the
// builder hands over). Greedy output is identical to the non-speculative
// engine's; sampled output has the same distribution.
//
// Ownership: owns its expert provider, MoeModel (through the runner), KV
// cache, drafter, scheduler and threads; borrows the weights, tokenizer and
// backend (shared, read-only, between engine instances of one process; they
// must outlive the engine), and the advisor (EngineOptions::advisor: must
// outlive the engine; in practice the expert provider it owns).
// Thread-safety: Submit/Abort/DropIfQueued/stats may be called from any
// thread.
#ifndef MOESERVE_ENGINE_ENGINE_H_
#define MOESERVE_ENGINE_ENGINE_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "engine/engine_metrics.h"
#include "engine/engine_stats.h"
#include "engine/expert_provider.h"
#include "engine/generation.h"
#include "engine/kv_cache.h"
#include "engine/model_runner.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/offload/speculation_advisor.h"
#include "engine/output_processor.h"
#include "engine/scheduler.h"
#include "engine/spec_decode/drafter.h"
#include "engine/speculation_governor.h"
#include "engine/tokenizer.h"
#include "kernels/backend.h"

namespace moeserve::engine {

struct EngineOptions {
  std::string name =
      "default";  // the engine's name (its metrics' policy label)
  // Bytes of the paged KV cache. Default: 256 MiB.
  uint64_t kv_cache_bytes = 256ull << 20;
  int kv_block_size = 16;
  // Most sequences in one step. Default: 64.
  int max_num_seqs = 64;
  // Most tokens (decode + prefill chunks) in one step. Default: 2048.
  int max_batched_tokens = 2048;
  // Most requests waiting for admission; more is RESOURCE_EXHAUSTED.
  int max_waiting = 256;
  // Per caller (GenerationRequest::caller); 0: no limit (SchedulerOptions).
  int max_running_per_caller = 0;
  int max_waiting_per_caller = 0;
  // Serving metrics go here, labelled policy=name. Null: none.
  metrics::Registry* registry = nullptr;
  // Host attention (engine/host_attention.h, seed 002 §4.2): non-null, the
  // KV cache is allocated in host memory by this CPU backend, which also
  // computes attention (MoeModel::EnableHostAttention); the device holds no
  // KV cache. Shared with the builder that made it; kept alive by the
  // engine's options until the model and cache are gone.
  std::shared_ptr<kernels::Backend> host_attention;

  // Speculative decoding. make_drafter null: none. Called once by Create
  // with the engine's target model and KV cache.
  std::function<absl::StatusOr<std::unique_ptr<spec_decode::Drafter>>(MoeModel*,
                                                                      KvCache*)>
      make_drafter;
  // Draft tokens per step: > 0 fixed; 0 adaptive, up to
  // max_speculative_tokens.
  int num_speculative_tokens = 0;
  int max_speculative_tokens = 8;
  // The offload side's answers to the speculation questions (the policy's
  // governor and lookahead; speculation_advisor.h). Null: k is the
  // engine's own. Borrowed: must outlive the engine.
  SpeculationAdvisor* advisor = nullptr;
};

class Engine {
 public:
  // `experts`: the expert provider the forward pass uses (null: every
  // expert resident in the weights' packed arena).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const ModelWeights* weights, const Tokenizer* tokenizer,
      kernels::Backend* backend, const EngineOptions& options,
      std::unique_ptr<ExpertProvider> experts = nullptr);
  // Cancels every request and joins the scheduler thread.
  ~Engine();

  // Queues `request`; its events arrive on the returned stream, the last one
  // with finish != kNone. RESOURCE_EXHAUSTED when the waiting queue is full,
  // ALREADY_EXISTS when a request with the same non-empty id is in flight.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(
      GenerationRequest request);
  // Queues every request at once, or none (Submit's errors): an offline
  // batch, which the next step admits together as far as the budgets allow
  // (with one Submit each, the step thread may start the first alone).
  absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> SubmitAll(
      std::vector<GenerationRequest> requests);

  // Cancels the in-flight request `request_id`; false if there is none. A
  // queued request leaves the queue before this returns.
  bool Abort(const std::string& request_id);

  // After `stream->Cancel()` or `Expire()`: if its request is still
  // waiting, it leaves the queue before this returns and finishes
  // (kCancelled / kDeadline) from the queue thread. A running request ends
  // at the scheduler's next step, as before.
  void DropIfQueued(const RequestStream* stream);

  // Generates a few tokens end to end (kernels, KV cache, sampler) so the
  // first real request does not pay for cold caches and lazy allocations.
  absl::Status WarmUp();

  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  const ModelWeights& weights() const { return *weights_; }
  // The expert provider (e.g. to read its statistics).
  ExpertProvider* experts() const { return experts_.get(); }

 private:
  Engine(const ModelWeights* weights, const Tokenizer* tokenizer,
         const EngineOptions& options);
  void Loop();
  bool Step();  // false when stopping

  const ModelWeights* const weights_;
  const Tokenizer* const tokenizer_;
  const EngineOptions options_;
  std::unique_ptr<ExpertProvider> experts_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<OutputProcessor> output_;
  std::unique_ptr<SpeculationGovernor> governor_;  // null: no drafter
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> scheduler_;
  std::thread thread_;  // the step thread (Loop)
  // Last member: destroyed first, so its gauges stop reading the engine
  // before anything they read goes away.
  std::unique_ptr<EngineMetrics> metrics_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_ENGINE_H_
