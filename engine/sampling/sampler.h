// Turns one row of next-token logits into a token, per request.
//
// A Sampler belongs to one request and owns its random generator, seeded
// from the request's seed; it draws exactly one number per sampled token,
// so the output depends only on (logits, seed, history) and never on what
// else shares the batch. Not thread-safe (one request, one thread at a time).
//
// Order of processing (as in Hugging Face / vLLM): repetition penalty over
// prompt and output tokens; presence and frequency penalties over output
// tokens; then greedy argmax when temperature == 0; else temperature, top-k,
// top-p, min-p, and a draw from the renormalised distribution.
//
// Speculative decoding verifies drafted tokens against the processed
// distribution rather than drawing from it: Distribution() applies exactly
// Sample()'s processing and returns the result, Uniform() and DrawFrom() take
// draws from the same generator, and Unaccept() undoes a provisional
// Accept() of a draft token that was then rejected
// (engine/spec_decode/verifier.h).
#ifndef MOESERVE_ENGINE_SAMPLING_SAMPLER_H_
#define MOESERVE_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace moeserve::engine {

// Temperatures below this are greedy (as vLLM's _SAMPLING_EPS): 1 / T
// overflows float for T below ~3e-39, and the logits / T of anything much
// below 1e-5 only approximates the argmax at the cost of risking inf - inf.
inline constexpr float kGreedyTemperature = 1e-5f;
// Repetition penalties are clamped into this range by the Sampler (the
// server refuses values outside it, server/request_validator.cc): a logit
// divided by 1e-45 is inf, and inf - inf in the softmax is NaN.
inline constexpr float kMinRepetitionPenalty = 1e-2f;
inline constexpr float kMaxRepetitionPenalty = 1e2f;

struct SamplingConfig {
  float temperature = 0;         // 0 (or < kGreedyTemperature): greedy
  float top_p = 1;               // (0, 1]
  int32_t top_k = 0;             // 0: off
  float min_p = 0;               // [0, 1]
  float repetition_penalty = 1;  // > 0; 1: off
  float presence_penalty = 0;    // [-2, 2]
  float frequency_penalty = 0;   // [-2, 2]
  uint64_t seed = 0;
};

// One candidate token with its log-probability.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// A fully processed next-token distribution: the tokens that survived the
// filters with probabilities that sum to 1. Sampler::Distribution() lists
// them most likely first (ties: lower id first), the order Sample() walks;
// for a greedy sampler it is the argmax with probability 1.
struct TokenDistribution {
  std::vector<int32_t> ids;
  std::vector<double> probs;  // probs[i] is the probability of ids[i]

  // Probability of `id`; 0 outside the support. O(support).
  double Prob(int32_t id) const;
};

class Sampler {
 public:
  // `prompt` seeds the repetition-penalty history.
  Sampler(const SamplingConfig& config, std::span<const int32_t> prompt,
          int32_t vocab_size);

  // Picks the next token from `logits` (modified in place by the penalties
  // and filters) and records it in the history.
  // REQUIRES: logits.size() == vocab_size.
  int32_t Sample(std::span<float> logits);

  // The distribution Sample() would draw from: the same penalties (from the
  // recorded history), then for temperature 0 the argmax with probability 1,
  // else temperature, top-k, top-p and min-p, renormalised. Modifies `logits`
  // in place exactly as Sample() does; draws nothing and records nothing.
  // REQUIRES: logits.size() == vocab_size.
  TokenDistribution Distribution(std::span<float> logits) const;

  // One uniform double in [0, 1) from this request's generator (the same
  // kind of draw Sample() takes once per sampled token).
  double Uniform();

  // Draws a token from `dist` with one Uniform(), walking `dist.ids` in
  // order; records nothing. Same distribution as Sample() on the logits
  // `dist` came from (bit-identical token for the same draw except when the
  // draw lands within rounding of a bucket boundary).
  // REQUIRES: !dist.ids.empty().
  int32_t DrawFrom(const TokenDistribution& dist);

  // Records a token chosen elsewhere (e.g. accepted by speculative
  // verification) so penalties stay right.
  void Accept(int32_t token);

  // Undoes one Accept(token) (e.g. a drafter that recorded its draft tokens
  // and then saw them rejected). A token with no recorded output occurrence
  // is ignored.
  void Unaccept(int32_t token);

  // True when temperature == 0 (a requested temperature below
  // kGreedyTemperature is 0 here): tokens are the argmax and no randomness
  // is consumed by Sample().
  bool greedy() const { return config_.temperature == 0; }

  // The configuration as applied: temperature below kGreedyTemperature (or
  // NaN) made 0, repetition_penalty clamped into [kMinRepetitionPenalty,
  // kMaxRepetitionPenalty].
  const SamplingConfig& config() const { return config_; }

 private:
  // The tokens kept by temperature / top-k / top-p / min-p, most likely
  // first, with their unnormalised weights exp(logit - max) and the weights'
  // sum (accumulated in order).
  struct Filtered {
    std::vector<int32_t> order;
    std::vector<double> weights;
    double kept = 0;
  };

  void ApplyPenalties(std::span<float> logits) const;
  Filtered Filter(std::span<float> logits) const;
  int32_t Draw(std::span<float> logits);

  const SamplingConfig config_;
  std::mt19937_64 rng_;
  // Per-token occurrence counts: in the prompt and in the output.
  std::vector<uint32_t> prompt_counts_;
  std::vector<uint32_t> output_counts_;
  // Token ids with a non-zero count, so penalties cost O(history).
  std::vector<int32_t> seen_;
};

// log-softmax of `logits`, returning the logprob of `token` and the `n` most
// likely tokens (ties: lower id first).
std::pair<TokenLogprob, std::vector<TokenLogprob>> TopLogprobs(
    std::span<const float> logits, int32_t token, int n);

// Index of the largest value; ties go to the lowest index (torch.argmax).
int32_t Argmax(std::span<const float> values);

// Uniform double in [0, 1) from 53 random bits of `rng`: the same on every
// platform, unlike std::uniform_real_distribution. Every draw of a request
// (Sampler) or a drafter uses it.
double UniformDouble(std::mt19937_64& rng);

// The token of `dist` at cumulative probability `u` in [0, 1), walking
// dist.ids in order (the last one when rounding leaves the sum under u).
// REQUIRES: !dist.ids.empty().
int32_t DrawFrom(const TokenDistribution& dist, double u);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_SAMPLING_SAMPLER_H_
