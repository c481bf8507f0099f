#include "server/engine_host.h"

#include <filesystem>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "kernels/backend_factory.h"
#include "server/caller_identity.h"
#include "server/request_validator.h"
#include "spdlog/spdlog.h"

namespace moeserve::server {
namespace {

using engine::FinishReason;

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return v1::EOS_TOKEN;
    case FinishReason::kStopSequence:
      return v1::STOP_SEQUENCE;
    case FinishReason::kLength:
      return v1::LENGTH;
    case FinishReason::kCancelled:
      return v1::CANCELLED;
    case FinishReason::kTimeLimit:
      return v1::TIME_LIMIT;
    case FinishReason::kError:
      return v1::ERROR;
    case FinishReason::kDeadline:
      return v1::DEADLINE;
    case FinishReason::kNone:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// How far ahead of our clock the client's deadline timer may fire (its
// cancellation crosses the network; ours does not). Generous next to a
// loopback or LAN hop, small next to any deadline a client would set.
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(250);

}  // namespace

absl::StatusOr<std::unique_ptr<EngineHost>> EngineHost::Create(
    const ServerOptions& options, metrics::Registry* registry,
    std::unique_ptr<engine::Tokenizer> tokenizer) {
  auto host = std::unique_ptr<EngineHost>(new EngineHost(options));
  // A disk slow tier preads experts from the model files: no RAM for them
  // unless another engine keeps them in host memory.
  MOESERVE_ASSIGN_OR_RETURN(
      host->weights_,
      engine::ModelWeights::Load(
          options.model_dir,
          {.pack_experts = engine::NeedsPackedExperts(options.engines)}));
  if (tokenizer != nullptr) {
    host->tokenizer_ = std::move(tokenizer);
  } else {
    MOESERVE_ASSIGN_OR_RETURN(
        host->tokenizer_,
        engine::Tokenizer::LoadFromModelDir(options.model_dir));
  }
  const int threads =
      options.threads > 0
          ? options.threads
          : static_cast<int>(std::thread::hardware_concurrency());
  MOESERVE_ASSIGN_OR_RETURN(
      host->backend_,
      kernels::CreateBackend({.name = options.backend,
                              .cpu_threads = std::max(1, threads),
                              .cuda_device = options.cuda_device,
                              .cuda_graphs = options.cuda_graphs}));
  const engine::SharedModel model = {host->weights_.get(),
                                     host->tokenizer_.get(),
                                     host->backend_.get(), registry};
  for (const engine::EngineSpec& spec : options.engines) {
    MOESERVE_ASSIGN_OR_RETURN(engine::BuiltEngine built,
                              engine::BuildEngine(model, spec));
    NamedEngine named{std::move(built), options.AbWeight(spec.name)};
    if (absl::Status st = named.engine()->WarmUp(); !st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("engine '", spec.name, "': ", st.message()));
    }
    // What the engine runs: the drafter and k as BuildEngine resolved them.
    const engine::EngineSpec& built_spec = named.built.spec;
    const std::string config =
        engine::PolicyConfigText(built_spec.policy_config);
    std::string speculation = "no speculation";
    if (built_spec.drafter != "none") {
      speculation = absl::StrCat(
          "drafter ", built_spec.drafter, ", ",
          built_spec.num_speculative_tokens == 0
              ? std::string("adaptive k")
              : absl::StrCat("k=", built_spec.num_speculative_tokens));
    }
    if (named.built.draft_bytes > 0) {
      absl::StrAppend(&speculation, ", draft ", named.built.draft_bytes >> 20,
                      " MiB (", built_spec.draft_budget, ")");
    }
    spdlog::info("engine '{}': policy {}{}, fast tier {} MiB, {} slow tier, {}",
                 built_spec.name, built_spec.policy,
                 config.empty() ? "" : absl::StrCat(" (", config, ")"),
                 named.built.expert_cache_bytes >> 20, built_spec.slow_tier,
                 speculation);
    host->engines_.push_back(std::move(named));
  }
  {
    base::MutexLock lock(&host->rng_mu_);
    host->rng_.seed(std::random_device()());
  }
  spdlog::info(
      "model {} ({}, {} layers x {} experts) served by {} engine(s) on {}",
      options.model_dir, host->weights_->config().model_type,
      host->weights_->num_layers(), host->weights_->num_experts(),
      host->engines_.size(), host->backend_->name());
  return host;
}

EngineHost::~EngineHost() = default;

std::vector<std::string> EngineHost::EngineNames() const {
  std::vector<std::string> names;
  for (const NamedEngine& e : engines_) names.push_back(e.name());
  return names;
}

v1::ListModelsResponse EngineHost::ListModels() const {
  const engine::ModelConfig& c = weights_->config();
  v1::ListModelsResponse response;
  v1::ModelInfo* m = response.add_models();
  m->set_name(std::filesystem::path(options_.model_dir).filename().string());
  m->set_architecture(c.model_type);
  m->set_num_layers(c.num_hidden_layers);
  m->set_num_experts(c.num_experts);
  m->set_num_experts_per_tok(c.num_experts_per_tok);
  m->set_hidden_size(c.hidden_size);
  m->set_vocab_size(c.vocab_size);
  m->set_max_position_embeddings(c.max_position_embeddings);
  m->set_total_expert_bytes(weights_->expert_bytes());
  m->set_total_parameter_bytes(weights_->expert_bytes() +
                               weights_->non_expert_bytes());
  m->set_dtype("bfloat16");
  for (const NamedEngine& e : engines_) {
    // The built engine's spec: drafter and k resolved from the policy.
    const engine::EngineSpec& spec = e.built.spec;
    v1::EngineInfo* info = m->add_engines();
    info->set_name(spec.name);
    info->set_policy(spec.policy);
    info->set_expert_cache_bytes(e.built.expert_cache_bytes);
    info->set_ab_weight(e.ab_weight);
    info->set_slow_tier(spec.slow_tier);
    info->set_backend(options_.backend);
    info->set_drafter(spec.drafter);
    info->mutable_policy_config()->insert(spec.policy_config.begin(),
                                          spec.policy_config.end());
    info->set_link_gbps(spec.link.gbps);
    info->set_link_latency_us(spec.link.latency_us);
    info->set_kv_cache_bytes(spec.kv_cache_bytes);
    info->set_max_num_seqs(spec.max_num_seqs);
    info->set_max_batched_tokens(spec.max_batched_tokens);
    info->set_max_waiting(spec.max_waiting);
    info->set_num_speculative_tokens(spec.num_speculative_tokens);
    info->set_draft_budget(spec.draft_budget);
    info->set_draft_bytes(e.built.draft_bytes);
  }
  return response;
}

absl::StatusOr<v1::TokenizeResponse> EngineHost::Tokenize(
    const v1::TokenizeRequest& request) {
  v1::TokenizeResponse response;
  std::vector<int32_t> ids;
  if (!request.text().empty()) {
    absl::StatusOr<std::vector<int32_t>> encoded =
        tokenizer_->Encode(request.text(), request.add_bos());
    if (!encoded.ok()) return encoded.status();
    ids = *std::move(encoded);
  } else {
    for (int i = 0; i < request.token_ids_size(); ++i) {
      if (request.token_ids(i) >=
          static_cast<uint32_t>(tokenizer_->vocab_size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token_ids[", i, "]: ", request.token_ids(i),
            " is outside the vocabulary of ", tokenizer_->vocab_size()));
      }
      ids.push_back(static_cast<int32_t>(request.token_ids(i)));
    }
  }
  absl::StatusOr<std::string> text = tokenizer_->Decode(
      ids, request.skip_special_tokens() ? engine::SpecialTokens::kSkip
                                         : engine::SpecialTokens::kKeep);
  if (!text.ok()) return text.status();
  response.set_text(*text);
  for (int32_t id : ids) {
    response.add_token_ids(id);
    absl::StatusOr<std::string> piece = tokenizer_->IdToPiece(id);
    response.add_pieces(piece.ok() ? *piece : "");
  }
  return response;
}

absl::StatusOr<EngineHost::NamedEngine*> EngineHost::PickEngine(
    const std::string& policy) {
  if (!policy.empty()) {
    for (NamedEngine& e : engines_) {
      if (e.name() == policy) return &e;
    }
    return absl::NotFoundError(
        absl::StrCat("policy: no engine '", policy, "'"));
  }
  if (options_.ab.empty()) return &engines_[0];
  double u;
  {
    base::MutexLock lock(&rng_mu_);
    u = std::uniform_real_distribution<double>(0, 1)(rng_);
  }
  for (NamedEngine& e : engines_) {
    if (u < e.ab_weight) return &e;
    u -= e.ab_weight;
  }
  return &engines_.back();
}

absl::StatusOr<engine::GenerationRequest> EngineHost::ToEngineRequest(
    const v1::GenerateRequest& request) const {
  engine::GenerationRequest r;
  if (!request.prompt().empty()) {
    absl::StatusOr<std::vector<int32_t>> ids =
        tokenizer_->Encode(request.prompt(), /*add_bos=*/true);
    if (!ids.ok()) return ids.status();
    r.prompt = *std::move(ids);
  } else {
    r.prompt.assign(request.prompt_token_ids().begin(),
                    request.prompt_token_ids().end());
  }
  if (absl::Status st = ValidateAgainstModel(
          request, r.prompt.size(),
          static_cast<uint32_t>(weights_->config().vocab_size),
          options_.limits);
      !st.ok()) {
    return st;
  }
  const v1::SamplingParams& s = request.sampling();
  r.sampling.temperature = s.temperature();
  r.sampling.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  r.sampling.top_k = s.top_k();
  r.sampling.min_p = s.min_p();
  r.sampling.repetition_penalty =
      s.has_repetition_penalty() ? s.repetition_penalty() : 1.0f;
  r.sampling.presence_penalty = s.presence_penalty();
  r.sampling.frequency_penalty = s.frequency_penalty();
  r.max_new_tokens = s.max_new_tokens() == 0
                         ? options_.limits.max_new_tokens_cap
                         : s.max_new_tokens();
  r.min_new_tokens = s.min_new_tokens();
  r.stop.assign(s.stop().begin(), s.stop().end());
  r.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  r.ignore_eos = s.ignore_eos();
  r.logprobs = static_cast<int>(request.logprobs());
  if (request.time_limit_ms() > 0) {
    r.deadline = absl::Now() + absl::Milliseconds(request.time_limit_ms());
  }
  return r;
}

void EngineHost::FillLogprobs(const engine::GenerationEvent& event,
                              v1::GenerateResponse* response) const {
  auto fill = [this](const engine::TokenLogprob& in, v1::TokenLogprob* out) {
    out->set_token_id(in.token);
    out->set_logprob(in.logprob);
    absl::StatusOr<std::string> piece = tokenizer_->IdToPiece(in.token);
    if (piece.ok()) out->set_text(*piece);
    absl::StatusOr<std::string> bytes = tokenizer_->TokenBytes(in.token);
    if (bytes.ok()) out->set_token_bytes(*std::move(bytes));
  };
  for (const engine::TokenLogprobs& lp : event.logprobs) {
    v1::Logprobs* out = response->add_logprobs();
    fill(lp.chosen, out->mutable_chosen());
    for (const engine::TokenLogprob& t : lp.top) fill(t, out->add_top());
  }
}

// The engine's event stream of one request, as API messages.
class EngineHost::EngineCall final : public GenerateCall {
 public:
  EngineCall(const EngineHost* host, engine::Engine* engine,
             std::shared_ptr<engine::RequestStream> s, absl::Time deadline,
             std::string request_id, std::string engine_name, uint64_t seed)
      : host_(host),
        engine_ptr_(engine),
        stream_(std::move(s)),
        deadline_(deadline),
        request_id_(std::move(request_id)),
        engine_(std::move(engine_name)),
        seed_(seed) {}
  // An abandoned call must not keep the engine working, nor its queue slot.
  ~EngineCall() override {
    stream_->SetListener(nullptr);
    stream_->Cancel();
    engine_ptr_->DropIfQueued(stream_.get());
  }

  void SetListener(std::function<void()> on_ready) override {
    stream_->SetListener(std::move(on_ready));
  }
  // gRPC cancels a call whose deadline passed, usually first on the
  // client's clock, which runs ahead of ours by the transport delay: a
  // cancellation that close to the deadline is the deadline.
  absl::Status Cancel() override {
    const bool deadline = absl::Now() >= deadline_ - kDeadlineSlack;
    if (deadline) {
      stream_->Expire();
    } else {
      stream_->Cancel();
    }
    // Still queued: its slot is free now, not after the running ones' next
    // step (seconds on a slow link).
    engine_ptr_->DropIfQueued(stream_.get());
    return deadline ? FinalStatus(FinishReason::kDeadline)
                    : absl::CancelledError("client went away");
  }

  bool Next(v1::GenerateResponse* response,
            absl::Status* final_status) override {
    engine::GenerationEvent event;
    if (!stream_->TryPop(&event)) return false;
    response->Clear();
    response->set_request_id(request_id_);
    response->set_index(index_++);
    response->mutable_token_ids()->Add(event.tokens.begin(),
                                       event.tokens.end());
    response->set_text(event.text);
    host_->FillLogprobs(event, response);
    if (event.finish == FinishReason::kNone) return true;
    response->set_finish_reason(ToProto(event.finish));
    response->mutable_usage()->set_prompt_tokens(event.prompt_tokens);
    response->mutable_usage()->set_completion_tokens(event.completion_tokens);
    response->set_seed(seed_);
    response->set_policy(engine_);
    response->set_error_message(event.error);
    *final_status = FinalStatus(event.finish);
    return true;
  }

 private:
  // A request cancelled by Abort still has a client to tell; one past its
  // deadline does not.
  static absl::Status FinalStatus(FinishReason reason) {
    if (reason != FinishReason::kDeadline) return absl::OkStatus();
    return absl::DeadlineExceededError(
        "deadline exceeded before generation finished");
  }

  const EngineHost* const host_;
  engine::Engine* const engine_ptr_;
  const std::shared_ptr<engine::RequestStream> stream_;
  const absl::Time deadline_;
  const std::string request_id_;
  const std::string engine_;
  const uint64_t seed_;
  uint32_t index_ = 0;  // only Next touches it; the owner serialises Next
};

absl::StatusOr<std::unique_ptr<GenerateCall>> EngineHost::StartGenerate(
    const v1::GenerateRequest& request, absl::Time deadline,
    std::string_view caller) {
  MOESERVE_ASSIGN_OR_RETURN(NamedEngine * engine, PickEngine(request.policy()));
  MOESERVE_ASSIGN_OR_RETURN(engine::GenerationRequest r,
                            ToEngineRequest(request));
  if (request.sampling().has_seed()) {
    r.sampling.seed = request.sampling().seed();
  } else {
    base::MutexLock lock(&rng_mu_);
    r.sampling.seed = rng_();
  }
  // What the client sees; the engines see it scoped to the caller.
  std::string request_id = request.request_id().empty() ? NewServerRequestId()
                                                        : request.request_id();
  r.request_id = ScopedRequestId(caller, request_id);
  r.caller = std::string(caller);
  r.rpc_deadline = deadline;
  const uint64_t seed = r.sampling.seed;
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      engine->engine()->Submit(std::move(r));
  if (stream.status().code() == absl::StatusCode::kAlreadyExists) {
    // The engine's message names the scoped key, which holds the peer.
    return absl::AlreadyExistsError(
        absl::StrCat("request_id: '", request_id, "' is already in flight"));
  }
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<GenerateCall>(
      new EngineCall(this, engine->engine(), *std::move(stream), deadline,
                     std::move(request_id), engine->name(), seed));
}

bool EngineHost::Abort(std::string_view caller, std::string_view request_id) {
  const std::string key = ScopedRequestId(caller, request_id);
  bool found = false;
  for (NamedEngine& e : engines_) found = e.engine()->Abort(key) || found;
  return found;
}

}  // namespace moeserve::server
