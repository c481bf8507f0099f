#include "engine/spec_decode/verifier.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace moeserve::engine {
namespace {

// The most likely token of `p`; ties go to the lower id.
int32_t MostLikely(const TokenDistribution& p) {
  size_t best = 0;
  for (size_t i = 1; i < p.ids.size(); ++i) {
    if (p.probs[i] > p.probs[best] ||
        (p.probs[i] == p.probs[best] && p.ids[i] < p.ids[best])) {
      best = i;
    }
  }
  return p.ids[best];
}

// norm(max(0, p - q)) over p's support (outside it the residual is 0), in
// p's order, without its zero entries; empty when it is all zero. `q` null:
// the point mass on `draft`.
TokenDistribution Residual(const TokenDistribution& p, int32_t draft,
                           const TokenDistribution* q) {
  // q as a dense table over the ids it mentions, so the residual costs
  // O(|p| + |q| + max id) rather than O(|p| |q|).
  std::vector<double> dense;
  if (q != nullptr) {
    int32_t max_id = -1;
    for (int32_t id : q->ids) max_id = std::max(max_id, id);
    dense.assign(max_id + 1, 0.0);
    for (size_t i = 0; i < q->ids.size(); ++i) {
      if (q->ids[i] >= 0) dense[q->ids[i]] += q->probs[i];
    }
  }
  auto q_of = [&](int32_t id) -> double {
    if (q == nullptr) return id == draft ? 1.0 : 0.0;
    return id >= 0 && id < static_cast<int32_t>(dense.size()) ? dense[id] : 0;
  };
  TokenDistribution r;
  double total = 0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const double d = p.probs[i] - q_of(p.ids[i]);
    if (d > 0) {
      r.ids.push_back(p.ids[i]);
      r.probs.push_back(d);
      total += d;
    }
  }
  if (total <= 0) return {};
  for (double& v : r.probs) v /= total;
  return r;
}

}  // namespace

DraftVerdict VerifyDraftToken(const TokenDistribution& p, int32_t draft,
                              const TokenDistribution* q, Sampler& sampler) {
  if (sampler.greedy()) {
    const int32_t top = MostLikely(p);
    return {draft == top, top};
  }
  const double p_draft = p.Prob(draft);
  double q_draft = q != nullptr ? q->Prob(draft) : 1.0;
  // A draft its q gives no mass cannot have been drawn from q: treat the
  // drafter as deterministic for this row, which keeps the output exact.
  if (q_draft <= 0) {
    q = nullptr;
    q_draft = 1.0;
  }
  // Always one draw, so a row costs the same draws whatever the outcome.
  const double u = sampler.Uniform();
  if (p_draft >= q_draft || u < p_draft / q_draft) return {true, draft};
  const TokenDistribution residual = Residual(p, draft, q);
  // An all-zero residual means p <= q everywhere, i.e. p == q up to
  // rounding, where rejection has probability ~0: draw from p itself.
  const int32_t token = sampler.DrawFrom(residual.ids.empty() ? p : residual);
  return {false, token};
}

int32_t SampleBonus(const TokenDistribution& p, Sampler& sampler) {
  return sampler.greedy() ? MostLikely(p) : sampler.DrawFrom(p);
}

}  // namespace moeserve::engine
