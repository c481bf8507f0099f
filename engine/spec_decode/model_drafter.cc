#include "engine/spec_decode/model_drafter.h"

#include <algorithm>
#include <random>
#include <utility>

namespace moeserve::engine::spec_decode {

ModelDrafter::ModelDrafter(const DrafterContext& context,
                           ExpertProvider* experts)
    : context_(context),
      experts_(experts),
      num_layers_(context.weights->config().num_hidden_layers),
      num_experts_(context.weights->config().num_experts) {}

void ModelDrafter::Filter(int layer, int64_t n, int k, std::span<int32_t> ids,
                          std::span<float> weights) {
  std::vector<int> chosen(ids.begin(), ids.end());
  AddToLookahead(lookahead_, position_, layer, num_layers_, chosen);
  Remap(layer, n, k, ids, weights);
}

absl::Status ModelDrafter::Propose(std::span<const DraftInput> inputs,
                                   std::vector<DraftOutput>* outputs,
                                   ExpertLookahead* lookahead) {
  outputs->assign(inputs.size(), {});
  lookahead->Clear();
  lookahead_ = lookahead;
  BeginDraft();
  const int64_t vocab = context_.weights->config().vocab_size;
  int max_k = 0;
  for (const DraftInput& in : inputs) max_k = std::max(max_k, in.k);
  lookahead->planned_positions = max_k;
  std::vector<int32_t> current(inputs.size());
  std::vector<std::mt19937_64> rngs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    current[i] = inputs[i].tokens.back();
    rngs.emplace_back(inputs[i].draft_seed);
  }
  ForwardOptions options;
  options.experts = experts_;
  options.routing = this;
  absl::Status status;
  std::vector<SequenceChunk> batch;
  std::vector<size_t> rows_of;
  for (int j = 0; j < max_k && status.ok(); ++j) {
    batch.clear();
    rows_of.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (j >= inputs[i].k) continue;
      const int64_t position =
          static_cast<int64_t>(inputs[i].tokens.size()) - 1 + j;
      batch.push_back({std::span(&current[i], 1), position, inputs[i].blocks});
      rows_of.push_back(i);
    }
    position_ = j;
    status = context_.target->Forward(batch, context_.kv, &logits_, options);
    if (!status.ok()) break;
    for (size_t r = 0; r < rows_of.size(); ++r) {
      const size_t i = rows_of[r];
      current[i] =
          ChooseDraftToken(*inputs[i].sampler,
                           std::span<float>(logits_.data() + r * vocab, vocab),
                           rngs[i], &(*outputs)[i]);
    }
    // The window so far; the engine delivers the complete one itself.
    if (j + 1 < max_k) NotifyLookahead(*lookahead);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int32_t t : (*outputs)[i].tokens) inputs[i].sampler->Unaccept(t);
  }
  lookahead_ = nullptr;
  return status;
}

}  // namespace moeserve::engine::spec_decode
