#include "server/engine_host.h"

#include <filesystem>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/backend_factory.h"
#include "server/offload_stack.h"
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
    case FinishReason::kNone:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// How often a waiting handler checks whether its client is still there.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(20);

}  // namespace

absl::StatusOr<std::unique_ptr<EngineHost>> EngineHost::Create(
    const ServerOptions& options, metrics::Registry* registry) {
  auto host = std::unique_ptr<EngineHost>(new EngineHost(options));
  absl::StatusOr<policies::PolicyConfig> policy_config =
      policies::ParsePolicyConfig(options.policy_config);
  if (!policy_config.ok()) return policy_config.status();
  // A disk slow tier preads experts from the model files: no RAM for them.
  absl::StatusOr<std::unique_ptr<engine::ModelWeights>> weights =
      engine::ModelWeights::Load(options.model_dir,
                                 {.pack_experts = options.slow_tier == "host"});
  if (!weights.ok()) return weights.status();
  host->weights_ = *std::move(weights);
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      engine::Tokenizer::LoadFromModelDir(options.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  host->tokenizer_ = *std::move(tokenizer);
  const int threads =
      options.threads > 0
          ? options.threads
          : static_cast<int>(std::thread::hardware_concurrency());
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend({.name = options.backend,
                              .cpu_threads = std::max(1, threads),
                              .cuda_device = options.cuda_device});
  if (!backend.ok()) return backend.status();
  host->backend_ = *std::move(backend);
  // On a GPU the expert slots are VRAM owned by the backend; on the CPU
  // they are plain host RAM filled by SlowTier::Read.
  kernels::Backend* fast_tier_backend =
      host->backend_->device() == kernels::Device::kCpu ? nullptr
                                                        : host->backend_.get();
  for (const EngineSpec& spec : options.EngineSpecs()) {
    const std::string& name = spec.name;
    engine::EngineOptions eo;
    eo.name = name;
    eo.kv_cache_bytes = options.kv_cache_bytes;
    eo.max_num_seqs = options.max_num_seqs;
    eo.max_batched_tokens = options.max_batched_tokens;
    eo.max_waiting = options.max_waiting;
    eo.registry = registry;
    OffloadOptions offload;
    offload.engine_name = name;
    offload.policy = spec.policy;
    offload.policy_config = *policy_config;
    // An engine's own budget (--engines) wins over the server-wide flags.
    const bool own_budget =
        spec.expert_cache_ratio > 0 || spec.expert_cache_mb > 0;
    offload.capacity_bytes = ExpertCacheBytes(
        *host->weights_,
        own_budget ? spec.expert_cache_ratio : options.expert_cache_ratio,
        own_budget ? spec.expert_cache_mb : options.expert_cache_mb);
    offload.slow_tier = options.slow_tier;
    offload.link = {.gbps = options.link_gbps,
                    .latency_us = options.link_latency_us};
    offload.registry = registry;
    offload.fast_tier_backend = fast_tier_backend;
    absl::StatusOr<std::unique_ptr<engine::Engine>> e = engine::Engine::Create(
        host->weights_.get(), host->tokenizer_.get(), host->backend_.get(), eo,
        OffloadStack::Factory(host->weights_.get(), offload));
    if (!e.ok()) {
      return absl::Status(
          e.status().code(),
          absl::StrCat("engine '", name, "': ", e.status().message()));
    }
    NamedEngine named{name, spec.policy, 0, offload.capacity_bytes,
                      *std::move(e)};
    for (const AbArm& arm : options.ab) {
      if (arm.policy == name) named.ab_weight = arm.weight;
    }
    if (absl::Status st = named.engine->WarmUp(); !st.ok()) return st;
    host->engines_.push_back(std::move(named));
  }
  host->rng_.seed(std::random_device()());
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
  for (const NamedEngine& e : engines_) names.push_back(e.name);
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
    v1::EngineInfo* info = m->add_engines();
    info->set_name(e.name);
    info->set_policy(e.policy);
    info->set_expert_cache_bytes(e.expert_cache_bytes);
    info->set_ab_weight(e.ab_weight);
    info->set_slow_tier(options_.slow_tier);
    info->set_backend(options_.backend);
    info->set_drafter("none");
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
  absl::StatusOr<std::string> text = tokenizer_->Decode(ids);
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
      if (e.name == policy) return &e;
    }
    return absl::NotFoundError(
        absl::StrCat("policy: no engine '", policy, "'"));
  }
  if (options_.ab.empty()) return &engines_[0];
  double u;
  {
    absl::MutexLock lock(&rng_mu_);
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
  };
  for (const engine::TokenLogprobs& lp : event.logprobs) {
    v1::Logprobs* out = response->add_logprobs();
    fill(lp.chosen, out->mutable_chosen());
    for (const engine::TokenLogprob& t : lp.top) fill(t, out->add_top());
  }
}

absl::Status EngineHost::Generate(const v1::GenerateRequest& request,
                                  absl::Time /*deadline*/, GenerateSink* sink) {
  absl::StatusOr<NamedEngine*> engine = PickEngine(request.policy());
  if (!engine.ok()) return engine.status();
  absl::StatusOr<engine::GenerationRequest> r = ToEngineRequest(request);
  if (!r.ok()) return r.status();
  if (request.sampling().has_seed()) {
    r->sampling.seed = request.sampling().seed();
  } else {
    absl::MutexLock lock(&rng_mu_);
    r->sampling.seed = rng_();
  }
  r->request_id = request.request_id().empty()
                      ? absl::StrCat("req-", next_request_.fetch_add(1))
                      : request.request_id();
  const std::string request_id = r->request_id;
  const uint64_t seed = r->sampling.seed;
  absl::StatusOr<std::shared_ptr<engine::RequestStream>> stream =
      (*engine)->engine->Submit(*std::move(r));
  if (!stream.ok()) return stream.status();

  uint32_t index = 0;
  engine::GenerationEvent event;
  while (true) {
    if (sink->IsCancelled()) {
      (*stream)->Cancel();
      return absl::CancelledError("client went away");
    }
    if (!(*stream)->Pop(&event, kCancelPoll)) continue;
    v1::GenerateResponse response;
    response.set_request_id(request_id);
    response.set_index(index++);
    response.mutable_token_ids()->Add(event.tokens.begin(), event.tokens.end());
    response.set_text(event.text);
    FillLogprobs(event, &response);
    const bool last = event.finish != FinishReason::kNone;
    if (last) {
      response.set_finish_reason(ToProto(event.finish));
      response.mutable_usage()->set_prompt_tokens(event.prompt_tokens);
      response.mutable_usage()->set_completion_tokens(event.completion_tokens);
      response.set_seed(seed);
      response.set_policy((*engine)->name);
      response.set_error_message(event.error);
    }
    if (!sink->Send(response)) {
      (*stream)->Cancel();
      return absl::CancelledError("client went away");
    }
    if (last) return absl::OkStatus();
  }
}

bool EngineHost::Abort(std::string_view request_id) {
  bool found = false;
  for (NamedEngine& e : engines_) {
    found = e.engine->Abort(std::string(request_id)) || found;
  }
  return found;
}

}  // namespace moeserve::server
