#include "engine/spec_decode/external_drafter.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/spec_decode/backend_resident_experts.h"
#include "engine/spec_decode/drafter_registry.h"

namespace moeserve::engine::spec_decode {

// Every draft expert resident (in the weights' host arena, or copied into
// the backend's memory); BeginLayer also goes to the drafter, and the draft
// model's compute stream is kept for the cross-model prediction.
class ExternalDrafter::HookedExperts final : public ExpertProvider {
 public:
  HookedExperts(std::unique_ptr<ExpertProvider> resident,
                ExternalDrafter* drafter)
      : resident_(std::move(resident)), drafter_(drafter) {}

  kernels::Stream* stream() const { return stream_; }

  kernels::Device device() const override { return resident_->device(); }
  const kernels::Int4ExpertLayout* int4_layout() const override {
    return resident_->int4_layout();
  }
  const kernels::Fp8ExpertLayout* fp8_layout() const override {
    return resident_->fp8_layout();
  }
  absl::Status AttachCompute(kernels::Backend* backend,
                             kernels::Stream* stream) override {
    stream_ = stream;
    return resident_->AttachCompute(backend, stream);
  }
  void BeginLayer(int layer, std::span<const int> experts,
                  std::span<const int> token_counts, const float* hidden,
                  int64_t n) override {
    (void)experts, (void)token_counts;
    drafter_->OnDraftLayer(layer, hidden, n);
  }
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override {
    return resident_->Acquire(id);
  }
  void Release(ExpertId id) override { resident_->Release(id); }

 private:
  const std::unique_ptr<ExpertProvider> resident_;
  ExternalDrafter* const drafter_;
  kernels::Stream* stream_ = nullptr;  // the draft model's
};

absl::StatusOr<std::unique_ptr<ExternalDrafter>> ExternalDrafter::Create(
    const DrafterContext& context, const Options& options) {
  if (context.weights == nullptr || context.backend == nullptr) {
    return absl::InvalidArgumentError(
        "external drafter: needs the target's weights and the backend");
  }
  if (context.draft_model_dir.empty()) {
    return absl::InvalidArgumentError(
        "external drafter: draft_model_dir is empty (--draft_model_dir)");
  }
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
      ModelWeights::Load(context.draft_model_dir);
  if (!weights.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "external drafter: draft_model_dir '", context.draft_model_dir,
        "' does not load: ", weights.status().ToString()));
  }
  const int64_t draft_vocab = (*weights)->config().vocab_size;
  const int64_t target_vocab = context.weights->config().vocab_size;
  if (draft_vocab != target_vocab) {
    return absl::FailedPreconditionError(absl::StrCat(
        "external drafter: the draft model in '", context.draft_model_dir,
        "' has vocab_size ", draft_vocab, " but the target has ", target_vocab,
        " (draft and target must share the tokenizer)"));
  }
  auto drafter = std::unique_ptr<ExternalDrafter>(
      new ExternalDrafter(context, *std::move(weights)));
  const ModelConfig& c = drafter->weights_->config();
  // A CPU backend computes from the weights' host arena; any other device
  // needs the experts in its own memory.
  std::unique_ptr<ExpertProvider> resident;
  if (context.backend->device() != kernels::Device::kCpu ||
      options.experts_in_backend_memory) {
    MOESERVE_ASSIGN_OR_RETURN(
        resident,
        BackendResidentExperts::Create(*drafter->weights_, context.backend));
    drafter->experts_in_backend_memory_ = true;
  } else {
    resident = std::make_unique<ResidentExperts>(drafter->weights_.get());
  }
  drafter->experts_ =
      std::make_unique<HookedExperts>(std::move(resident), drafter.get());
  MOESERVE_ASSIGN_OR_RETURN(
      drafter->model_,
      MoeModel::Create(drafter->weights_.get(), context.backend,
                       drafter->experts_.get()));
  if (context.target != nullptr &&
      context.target->config().hidden_size == c.hidden_size) {
    drafter->predictor_ = std::make_unique<CrossModelPredictor>(
        context.target, static_cast<int>(c.num_hidden_layers), context.backend,
        drafter->experts_->stream());
  }
  int block_size = 16;
  int64_t num_blocks = 0;
  if (context.kv != nullptr) {
    block_size = context.kv->block_size();
    num_blocks = context.kv->num_blocks() + context.kv->num_blocks() / 4 + 1;
  } else {
    num_blocks = KvCache::BlocksForBytes(c, block_size, kDefaultCacheBytes);
  }
  MOESERVE_ASSIGN_OR_RETURN(
      drafter->cache_,
      KvCache::Create(c, num_blocks, block_size, context.backend));
  return drafter;
}

ExternalDrafter::ExternalDrafter(const DrafterContext& context,
                                 std::unique_ptr<ModelWeights> weights)
    : context_(context), weights_(std::move(weights)) {}

ExternalDrafter::~ExternalDrafter() {
  for (auto& [id, state] : states_) cache_->Release(&state.blocks);
}

int64_t ExternalDrafter::computed_tokens(uint64_t sequence_id) const {
  auto it = states_.find(sequence_id);
  return it == states_.end() ? 0
                             : static_cast<int64_t>(it->second.computed.size());
}

void ExternalDrafter::Forget(uint64_t sequence_id) {
  auto it = states_.find(sequence_id);
  if (it == states_.end()) return;
  cache_->Release(&it->second.blocks);
  states_.erase(it);
}

void ExternalDrafter::OnDraftLayer(int layer, const float* hidden, int64_t n) {
  if (predictor_ != nullptr) predictor_->OnDraftLayer(layer, hidden, n);
}

absl::Status ExternalDrafter::GrowFor(SequenceState* state, int64_t tokens,
                                      std::span<const DraftInput> inputs) {
  absl::Status status = cache_->Grow(&state->blocks, tokens);
  while (absl::IsResourceExhausted(status)) {
    // Drop the least recently used state of a sequence not drafting now.
    auto victim = states_.end();
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if (it->second.blocks.empty()) continue;
      bool drafting = false;
      for (const DraftInput& in : inputs) {
        drafting = drafting || in.sequence_id == it->first;
      }
      if (drafting) continue;
      if (victim == states_.end() ||
          it->second.last_used < victim->second.last_used) {
        victim = it;
      }
    }
    if (victim == states_.end()) return status;
    cache_->Release(&victim->second.blocks);
    victim->second.computed.clear();
    status = cache_->Grow(&state->blocks, tokens);
  }
  return status;
}

absl::Status ExternalDrafter::Propose(std::span<const DraftInput> inputs,
                                      std::vector<DraftOutput>* outputs,
                                      ExpertLookahead* lookahead) {
  outputs->assign(inputs.size(), {});
  lookahead->Clear();
  const int64_t vocab = weights_->config().vocab_size;
  const int64_t max_positions = weights_->config().max_position_embeddings;
  ++clock_;

  // Catch up: what stays valid of each sequence's draft cache, and room for
  // its k draft positions. Sequences that cannot draft get no state change.
  std::vector<SequenceState*> states(inputs.size(), nullptr);
  int max_k = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    if (in.k <= 0 || in.tokens.empty() || in.sampler == nullptr) continue;
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    // Draft positions n-1 .. n-2+k are fed; n-1+k positions in all.
    const int64_t need = n - 1 + in.k;
    if (max_positions > 0 && need > max_positions) continue;
    SequenceState& state = states_[in.sequence_id];
    state.last_used = clock_;
    const size_t limit = std::min(state.computed.size(), in.tokens.size() - 1);
    size_t valid = 0;
    while (valid < limit && state.computed[valid] == in.tokens[valid]) ++valid;
    state.computed.resize(valid);
    cache_->Truncate(&state.blocks, static_cast<int64_t>(valid));
    if (!GrowFor(&state, need, inputs).ok()) {
      // No room even after dropping idle sequences: no draft for this one.
      cache_->Truncate(&state.blocks, static_cast<int64_t>(valid));
      continue;
    }
    states[i] = &state;
    max_k = std::max(max_k, in.k);
  }
  lookahead->planned_positions = max_k;

  std::vector<int32_t> current(inputs.size());
  std::vector<std::mt19937_64> rngs;
  rngs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].tokens.empty()) current[i] = inputs[i].tokens.back();
    rngs.emplace_back(inputs[i].draft_seed);
  }
  absl::Status status;
  std::vector<SequenceChunk> batch;
  std::vector<size_t> rows_of;
  for (int j = 0; j < max_k && status.ok(); ++j) {
    batch.clear();
    rows_of.clear();
    predict_rows_.clear();
    int64_t row = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (states[i] == nullptr || j >= inputs[i].k) continue;
      SequenceState& state = *states[i];
      const int64_t start = static_cast<int64_t>(state.computed.size());
      std::span<const int32_t> chunk;
      if (j == 0) {
        // The missing tokens and the last one (whose logits give draft 1).
        chunk = inputs[i].tokens.subspan(start);
      } else {
        chunk = std::span(&current[i], 1);
      }
      batch.push_back({chunk, start, &state.blocks, 1});
      rows_of.push_back(i);
      row += static_cast<int64_t>(chunk.size());
      predict_rows_.push_back(row - 1);
    }
    if (batch.empty()) break;
    if (predictor_ != nullptr) predictor_->BeginPass(predict_rows_);
    status = model_->Forward(batch, cache_.get(), &logits_);
    if (!status.ok()) break;
    if (predictor_ != nullptr) predictor_->AddTo(lookahead, j);
    for (size_t r = 0; r < rows_of.size(); ++r) {
      const size_t i = rows_of[r];
      SequenceState& state = *states[i];
      state.computed.insert(state.computed.end(), batch[r].tokens.begin(),
                            batch[r].tokens.end());
      current[i] =
          ChooseDraftToken(*inputs[i].sampler,
                           std::span<float>(logits_.data() + r * vocab, vocab),
                           rngs[i], &(*outputs)[i]);
    }
    if (j + 1 < max_k) NotifyLookahead(*lookahead);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int32_t t : (*outputs)[i].tokens) inputs[i].sampler->Unaccept(t);
  }
  if (!status.ok()) {
    // The failed pass may have written part of its rows: forget what this
    // call computed (earlier positions are still valid, but keep it simple).
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (states[i] == nullptr) continue;
      states[i]->computed.clear();
      cache_->Truncate(&states[i]->blocks, 0);
    }
  }
  predict_rows_.clear();
  return status;
}

namespace {

absl::StatusOr<std::unique_ptr<Drafter>> CreateExternalDrafter(
    const DrafterContext& context) {
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<ExternalDrafter> drafter,
                            ExternalDrafter::Create(context));
  return std::unique_ptr<Drafter>(std::move(drafter));
}

}  // namespace

MOESERVE_REGISTER_DRAFTER("external", CreateExternalDrafter);

}  // namespace moeserve::engine::spec_decode
