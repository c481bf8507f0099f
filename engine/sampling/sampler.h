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
#ifndef MOESERVE_ENGINE_SAMPLING_SAMPLER_H_
#define MOESERVE_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace moeserve::engine {

struct SamplingConfig {
  float temperature = 0;         // 0: greedy
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

class Sampler {
 public:
  // `prompt` seeds the repetition-penalty history.
  Sampler(const SamplingConfig& config, std::span<const int32_t> prompt,
          int32_t vocab_size);

  // Picks the next token from `logits` (modified in place by the penalties
  // and filters) and records it in the history.
  // REQUIRES: logits.size() == vocab_size.
  int32_t Sample(std::span<float> logits);

  // Records a token chosen elsewhere (e.g. accepted by speculative
  // verification) so penalties stay right.
  void Accept(int32_t token);

  const SamplingConfig& config() const { return config_; }

 private:
  void ApplyPenalties(std::span<float> logits) const;
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

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_SAMPLING_SAMPLER_H_
