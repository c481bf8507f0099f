#include "engine/spec/self_drafter.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"
#include "engine/spec/drafter_registry.h"

namespace moeserve::engine::spec {
namespace {

// Uniform double in [0, 1) from 53 random bits (as the Sampler draws).
double UniformDouble(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

int32_t DrawWith(const TokenDistribution& dist, std::mt19937_64& rng) {
  const double u = UniformDouble(rng);
  double acc = 0;
  for (size_t i = 0; i < dist.ids.size(); ++i) {
    acc += dist.probs[i];
    if (u < acc) return dist.ids[i];
  }
  return dist.ids.back();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Drafter>> SelfDrafter::Create(
    const DrafterContext& context) {
  if (context.weights == nullptr || context.target == nullptr ||
      context.kv == nullptr) {
    return absl::InvalidArgumentError(
        "self drafter: needs the target model and its KV cache");
  }
  MOESERVE_ASSIGN_OR_RETURN(ExpertAffinity affinity,
                            ExpertAffinity::Compute(*context.weights));
  return std::unique_ptr<Drafter>(
      new SelfDrafter(context, std::move(affinity)));
}

SelfDrafter::SelfDrafter(const DrafterContext& context, ExpertAffinity affinity)
    : context_(context),
      affinity_(std::move(affinity)),
      num_layers_(context.weights->config().num_hidden_layers),
      num_experts_(context.weights->config().num_experts) {}

void SelfDrafter::SnapshotUsable() {
  usable_.assign(num_layers_, {});
  remap_.assign(static_cast<size_t>(num_layers_) * num_experts_, -1);
  for (int l = 0; l < num_layers_; ++l) {
    for (int e = 0; e < num_experts_; ++e) {
      if (context_.residency == nullptr ||
          context_.residency->IsReady({l, e})) {
        usable_[l].push_back(e);
      }
    }
    for (int e = 0; e < num_experts_; ++e) {
      remap_[static_cast<size_t>(l) * num_experts_ + e] =
          affinity_.Nearest(l, e, usable_[l]);
    }
  }
}

void SelfDrafter::Filter(int layer, int64_t n, int k, std::span<int32_t> ids,
                         std::span<float> weights) {
  std::vector<int> chosen(ids.begin(), ids.end());
  AddToLookahead(lookahead_, position_, layer, num_layers_, chosen);
  const int32_t* remap =
      remap_.data() + static_cast<size_t>(layer) * num_experts_;
  for (int64_t t = 0; t < n; ++t) {
    int32_t* row = ids.data() + t * k;
    float* w = weights.data() + t * k;
    for (int j = 0; j < k; ++j) {
      row[j] = row[j] >= 0 ? remap[row[j]] : -1;
      if (row[j] < 0) continue;
      // Two choices remapped onto one expert: compute it once with both
      // weights (the same sum, half the work).
      for (int i = 0; i < j; ++i) {
        if (row[i] == row[j]) {
          w[i] += w[j];
          row[j] = -1;
          break;
        }
      }
    }
  }
}

absl::Status SelfDrafter::Propose(std::span<const DraftInput> inputs,
                                  std::vector<DraftOutput>* outputs,
                                  ExpertLookahead* lookahead) {
  outputs->assign(inputs.size(), {});
  lookahead->Clear();
  lookahead_ = lookahead;
  SnapshotUsable();
  const int64_t vocab = context_.weights->config().vocab_size;
  int max_k = 0;
  for (const DraftInput& in : inputs) max_k = std::max(max_k, in.k);
  std::vector<int32_t> current(inputs.size());
  std::vector<std::mt19937_64> rngs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    current[i] = inputs[i].tokens.back();
    rngs.emplace_back(inputs[i].draft_seed);
  }
  ForwardOptions options;
  options.experts = context_.draft_experts;
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
      Sampler& sampler = *inputs[i].sampler;
      std::span<float> row(logits_.data() + r * vocab, vocab);
      TokenDistribution q = sampler.Distribution(row);
      int32_t token;
      if (sampler.greedy()) {
        token = q.ids.front();
      } else {
        token = DrawWith(q, rngs[i]);
        (*outputs)[i].q.push_back(std::move(q));
      }
      (*outputs)[i].tokens.push_back(token);
      // Provisional: later draft positions see it in the penalties.
      sampler.Accept(token);
      current[i] = token;
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (int32_t t : (*outputs)[i].tokens) inputs[i].sampler->Unaccept(t);
  }
  lookahead_ = nullptr;
  return status;
}

MOESERVE_REGISTER_DRAFTER("self", SelfDrafter::Create);

}  // namespace moeserve::engine::spec
