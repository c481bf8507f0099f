// The policy bench's fixed prompt set, as text (for models with a
// tokenizer) or as synthetic token ids of the same lengths (for the
// generated random-weight models, which have none). Request i of a workload
// uses prompt i % size.
//
// Thread-safe (pure functions over constants).
#ifndef MOESERVE_TOOLS_BENCH_PROMPTS_H_
#define MOESERVE_TOOLS_BENCH_PROMPTS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::bench {

// The mixtral_demo golden prompts (tests/golden), then a few more of the demo
// model's domain.
const std::vector<std::string>& TextPrompts();

// Token counts of TextPrompts() under models/demo's tokenizer, BOS included
// (7, 12, 13, 38, 3, 10, 18, 17): the lengths of the synthetic prompts.
const std::vector<int>& TextPromptTokenCounts();

// The seed SyntheticPrompts uses in the bench (reported with the figures).
inline constexpr uint64_t kSyntheticPromptSeed = 20240601;

// One prompt per TextPromptTokenCounts() entry, each that many token ids
// drawn uniformly from [0, vocab) with a fixed-seed generator, so every run
// and every policy sees the same ids. REQUIRES: vocab > 0.
std::vector<std::vector<int32_t>> SyntheticPrompts(int64_t vocab,
                                                   uint64_t seed);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_PROMPTS_H_
