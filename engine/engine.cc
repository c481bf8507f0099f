#include "engine/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::engine {
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
    : weights_(weights), tokenizer_(tokenizer), options_(options) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const ModelWeights* weights, const Tokenizer* tokenizer,
    kernels::Backend* backend, const EngineOptions& options,
    std::unique_ptr<ExpertProvider> experts) {
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
  engine->experts_ = experts != nullptr
                         ? std::move(experts)
                         : std::make_unique<ResidentExperts>(weights);
  MOESERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<MoeModel> model,
      MoeModel::Create(weights, backend, engine->experts_.get()));
  const ModelConfig& c = weights->config();
  // With host attention the pools are host memory of its CPU backend.
  kernels::Backend* kv_backend = backend;
  if (options.host_attention != nullptr) {
    MOESERVE_RETURN_IF_ERROR(
        model->EnableHostAttention(options.host_attention.get()));
    kv_backend = options.host_attention.get();
  }
  MOESERVE_ASSIGN_OR_RETURN(
      engine->kv_,
      KvCache::Create(c,
                      KvCache::BlocksForBytes(c, options.kv_block_size,
                                              options.kv_cache_bytes),
                      options.kv_block_size, kv_backend));
  std::unique_ptr<spec_decode::Drafter> drafter;
  if (options.make_drafter) {
    MOESERVE_ASSIGN_OR_RETURN(
        drafter, options.make_drafter(model.get(), engine->kv_.get()));
    engine->governor_ = std::make_unique<SpeculationGovernor>(
        options.num_speculative_tokens, options.max_speculative_tokens,
        c.max_position_embeddings, options.advisor);
  }
  engine->output_ = std::make_unique<OutputProcessor>(
      EosIds(*weights, *tokenizer), c.vocab_size, c.max_position_embeddings);
  spec_decode::Drafter* raw_drafter = drafter.get();
  engine->runner_ = std::make_unique<ModelRunner>(
      options.name, std::move(model), engine->kv_.get(), engine->output_.get(),
      std::move(drafter), engine->governor_.get(), options.advisor);
  engine->scheduler_ = std::make_unique<Scheduler>(
      SchedulerOptions{options.name, options.max_num_seqs,
                       options.max_batched_tokens, options.max_waiting,
                       options.max_running_per_caller,
                       options.max_waiting_per_caller},
      engine->kv_.get(), engine->output_.get(), raw_drafter,
      engine->governor_.get());
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
    engine->output_->set_metrics(engine->metrics_.get());
    engine->runner_->set_metrics(engine->metrics_.get());
    engine->scheduler_->set_metrics(engine->metrics_.get());
  }
  engine->scheduler_->Start();
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::~Engine() {
  // Not set when Create() failed early.
  if (scheduler_ != nullptr) scheduler_->RequestStop();
  // Not joinable when Create() failed before starting the step thread.
  if (thread_.joinable()) thread_.join();
  // The queue thread's last events are pushed before the metrics go.
  if (scheduler_ != nullptr) scheduler_->Stop();
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(
    GenerationRequest request) {
  return scheduler_->Enqueue(
      NewRequestState(std::move(request), tokenizer_,
                      static_cast<int32_t>(weights_->config().vocab_size)));
}

absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> Engine::SubmitAll(
    std::vector<GenerationRequest> requests) {
  std::vector<std::unique_ptr<RequestState>> states;
  states.reserve(requests.size());
  for (GenerationRequest& request : requests) {
    states.push_back(
        NewRequestState(std::move(request), tokenizer_,
                        static_cast<int32_t>(weights_->config().vocab_size)));
  }
  return scheduler_->EnqueueAll(std::move(states));
}

bool Engine::Abort(const std::string& request_id) {
  return scheduler_->Abort(request_id);
}

void Engine::DropIfQueued(const RequestStream* stream) {
  scheduler_->DropIfQueued(stream);
}

EngineStats Engine::stats() const {
  const SchedulerStats s = scheduler_->stats();
  return {s.running,         s.waiting,     kv_->free_blocks(),
          kv_->num_blocks(), s.preemptions, runner_->spec_stats()};
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
  scheduler_->CancelAll();
}

bool Engine::Step() {
  if (!scheduler_->WaitForWork()) return false;
  std::span<RequestState* const> scheduled = scheduler_->Schedule();
  if (scheduled.empty()) return true;
  const absl::Status st = runner_->Run(scheduled);
  for (size_t i = 0; i < scheduled.size(); ++i) {
    RequestState* state = scheduled[i];
    if (!st.ok()) {
      scheduler_->Finish(state, FinishReason::kError, {},
                         std::string(st.message()));
      continue;
    }
    Delivery delivery = runner_->Deliver(i, state);
    if (delivery.ends()) {
      scheduler_->Finish(state, delivery.reason, std::move(delivery.event));
    }
  }
  runner_->EndStep();
  scheduler_->EndStep();
  return true;
}

}  // namespace moeserve::engine
