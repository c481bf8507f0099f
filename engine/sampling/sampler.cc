#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace moeserve::engine {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// What Sampler applies (see config()).
SamplingConfig Applied(SamplingConfig c) {
  if (!(c.temperature >= kGreedyTemperature)) c.temperature = 0;
  // NaN fails both comparisons and becomes 1 (off).
  if (!(c.repetition_penalty >= kMinRepetitionPenalty &&
        c.repetition_penalty <= kMaxRepetitionPenalty)) {
    c.repetition_penalty =
        std::isnan(c.repetition_penalty)
            ? 1.0f
            : std::clamp(c.repetition_penalty, kMinRepetitionPenalty,
                         kMaxRepetitionPenalty);
  }
  return c;
}

}  // namespace

double UniformDouble(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

int32_t DrawFrom(const TokenDistribution& dist, double u) {
  const int32_t n = static_cast<int32_t>(dist.ids.size());
  double acc = 0;
  for (int32_t i = 0; i < n; ++i) {
    acc += dist.probs[i];
    if (u < acc) return dist.ids[i];
  }
  // Rounding left the cumulative sum just under u: the last token.
  return dist.ids[n - 1];
}

// The first index of the largest value; NaNs never win (nothing compares
// greater than a NaN at index 0, so that case returns 0, as a plain scan
// would). Two passes instead of one: the scan that carries the best index
// is one long dependency chain, the max over 16 independent lanes is not
// (it vectorises), and the first index of the max is a plain compare scan.
// A greedy step over Qwen's 151,936 logits is on the host's critical path.
int32_t Argmax(std::span<const float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (n == 0 || std::isnan(values[0])) return 0;
  const float* v = values.data();
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (float& l : lane) l = v[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      lane[l] = v[i + l] > lane[l] ? v[i + l] : lane[l];
    }
  }
  float best = v[0];
  for (float l : lane) best = l > best ? l : best;
  for (; i < n; ++i) best = v[i] > best ? v[i] : best;
  for (int64_t j = 0; j < n; ++j) {
    if (v[j] == best) return static_cast<int32_t>(j);
  }
  return 0;  // unreachable: best is one of the values
}

Sampler::Sampler(const SamplingConfig& config, std::span<const int32_t> prompt,
                 int32_t vocab_size)
    : config_(Applied(config)),
      rng_(config.seed),
      prompt_counts_(vocab_size, 0),
      output_counts_(vocab_size, 0) {
  for (int32_t t : prompt) {
    if (t < 0 || t >= vocab_size) continue;
    if (prompt_counts_[t]++ == 0 && output_counts_[t] == 0) seen_.push_back(t);
  }
}

void Sampler::Accept(int32_t token) {
  if (token < 0 || token >= static_cast<int32_t>(output_counts_.size())) {
    return;
  }
  if (output_counts_[token]++ == 0 && prompt_counts_[token] == 0) {
    seen_.push_back(token);
  }
}

void Sampler::Unaccept(int32_t token) {
  if (token < 0 || token >= static_cast<int32_t>(output_counts_.size()) ||
      output_counts_[token] == 0) {
    return;
  }
  if (--output_counts_[token] == 0 && prompt_counts_[token] == 0) {
    // Penalties are applied per token, so seen_'s order does not matter.
    auto it = std::find(seen_.begin(), seen_.end(), token);
    if (it != seen_.end()) {
      *it = seen_.back();
      seen_.pop_back();
    }
  }
}

void Sampler::ApplyPenalties(std::span<float> logits) const {
  const float rep = config_.repetition_penalty;
  for (int32_t t : seen_) {
    float& l = logits[t];
    if (rep != 1) l = l > 0 ? l / rep : l * rep;
    const uint32_t out = output_counts_[t];
    if (out > 0) {
      l -= config_.presence_penalty + config_.frequency_penalty * out;
    }
  }
}

int32_t Sampler::Sample(std::span<float> logits) {
  ApplyPenalties(logits);
  const int32_t token = greedy() ? Argmax(logits) : Draw(logits);
  Accept(token);
  return token;
}

// Temperature, then the top-k / top-p / min-p filters on the sorted
// distribution.
Sampler::Filtered Sampler::Filter(std::span<float> logits) const {
  const int32_t n = static_cast<int32_t>(logits.size());
  const float inv_t = 1.0f / config_.temperature;
  float max_logit = kMasked;
  for (float& l : logits) {
    l *= inv_t;
    max_logit = std::max(max_logit, l);
  }
  Filtered f;
  std::vector<int32_t>& order = f.order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  int32_t keep = n;
  if (config_.top_k > 0) keep = std::min(keep, config_.top_k);
  // Sort only as much as the filters can look at; stable so ties keep the
  // lower id first, which makes the draw reproducible.
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int32_t a, int32_t b) {
                      return logits[a] > logits[b] ||
                             (logits[a] == logits[b] && a < b);
                    });
  std::vector<double>& probs = f.weights;
  probs.resize(keep);
  double total = 0;
  for (int32_t i = 0; i < keep; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[order[i]]) - max_logit);
    total += probs[i];
  }
  // top-p: smallest prefix whose mass reaches top_p (always >= 1 token).
  double mass = 0;
  int32_t cut = keep;
  for (int32_t i = 0; i < keep; ++i) {
    mass += probs[i] / total;
    if (mass >= config_.top_p) {
      cut = i + 1;
      break;
    }
  }
  // min-p: drop tokens below min_p x the most likely one's probability.
  if (config_.min_p > 0) {
    const double floor = config_.min_p * probs[0];
    while (cut > 1 && probs[cut - 1] < floor) --cut;
  }
  order.resize(cut);
  probs.resize(cut);
  for (int32_t i = 0; i < cut; ++i) f.kept += probs[i];
  return f;
}

// One uniform draw scaled by the kept (unnormalised) mass. This is the
// historical arithmetic, kept so seeded requests reproduce their tokens;
// DrawFrom on Distribution() is the same distribution.
int32_t Sampler::Draw(std::span<float> logits) {
  const Filtered f = Filter(logits);
  const int32_t cut = static_cast<int32_t>(f.order.size());
  const double u = UniformDouble(rng_) * f.kept;
  double acc = 0;
  for (int32_t i = 0; i < cut; ++i) {
    acc += f.weights[i];
    if (u < acc) return f.order[i];
  }
  return f.order[cut - 1];
}

TokenDistribution Sampler::Distribution(std::span<float> logits) const {
  ApplyPenalties(logits);
  TokenDistribution d;
  if (greedy()) {
    d.ids = {Argmax(logits)};
    d.probs = {1.0};
    return d;
  }
  Filtered f = Filter(logits);
  d.ids = std::move(f.order);
  d.probs = std::move(f.weights);
  for (double& p : d.probs) p /= f.kept;
  return d;
}

double Sampler::Uniform() { return UniformDouble(rng_); }

int32_t Sampler::DrawFrom(const TokenDistribution& dist) {
  return engine::DrawFrom(dist, Uniform());
}

double TokenDistribution::Prob(int32_t id) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == id) return probs[i];
  }
  return 0;
}

std::pair<TokenLogprob, std::vector<TokenLogprob>> TopLogprobs(
    std::span<const float> logits, int32_t token, int n) {
  float max_logit = kMasked;
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const float log_z = max_logit + static_cast<float>(std::log(sum));
  TokenLogprob chosen{token, logits[token] - log_z};
  const int32_t size = static_cast<int32_t>(logits.size());
  n = std::clamp(n, 0, size);
  std::vector<int32_t> order(size);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(
      order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
  std::vector<TokenLogprob> top(n);
  for (int i = 0; i < n; ++i) top[i] = {order[i], logits[order[i]] - log_z};
  return {chosen, top};
}

}  // namespace moeserve::engine
