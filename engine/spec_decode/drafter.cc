#include "engine/spec_decode/drafter.h"

#include <algorithm>

namespace moeserve::engine::spec_decode {

int32_t ChooseDraftToken(Sampler& sampler, std::span<float> logits,
                         std::mt19937_64& rng, DraftOutput* out) {
  TokenDistribution q = sampler.Distribution(logits);
  int32_t token;
  if (sampler.greedy()) {
    token = q.ids.front();
  } else {
    token = DrawFrom(q, UniformDouble(rng));
    out->q.push_back(std::move(q));
  }
  out->tokens.push_back(token);
  sampler.Accept(token);
  return token;
}

void AddToLookahead(ExpertLookahead* lookahead, int position, int layer,
                    int num_layers, std::span<const int> ids) {
  auto& experts = lookahead->experts;
  if (static_cast<int>(experts.size()) <= position) {
    experts.resize(position + 1);
  }
  std::vector<std::vector<int>>& layers = experts[position];
  if (static_cast<int>(layers.size()) < num_layers) layers.resize(num_layers);
  std::vector<int>& have = layers[layer];
  std::vector<int> merged;
  merged.reserve(have.size() + ids.size());
  std::vector<int> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  std::set_union(have.begin(), have.end(), sorted.begin(), sorted.end(),
                 std::back_inserter(merged));
  merged.erase(std::unique(merged.begin(), merged.end()), merged.end());
  have = std::move(merged);
}

}  // namespace moeserve::engine::spec_decode
