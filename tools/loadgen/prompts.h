// The fixed prompt set of moeserve_loadgen, compiled in so that every run
// (and every level of a run) sends the same prompts in the same order.
#ifndef MOESERVE_TOOLS_LOADGEN_PROMPTS_H_
#define MOESERVE_TOOLS_LOADGEN_PROMPTS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::loadgen {

// 16 short prompts in the demo model's domain (see prompts.cc).
const std::vector<std::string>& FixedPrompts();

// `count` prompts of `length` token ids each (`--prompt_tokens`): the BOS id
// 1, then ids drawn uniformly from [3, vocab_size) (past the unk/bos/eos
// control ids) by a generator with a fixed seed, so every run sends the same
// prompts. Used to measure prefill (TTFT of a long prompt) with the same kind
// of prompt moeserve_bench feeds its engine (uniform random ids).
// REQUIRES: count >= 1, length >= 1, vocab_size > 3.
std::vector<std::vector<uint32_t>> TokenIdPrompts(int count, int length,
                                                  uint32_t vocab_size);

}  // namespace moeserve::loadgen

#endif  // MOESERVE_TOOLS_LOADGEN_PROMPTS_H_
