#include "tools/bench/prompts.h"

#include <random>

namespace moeserve::bench {

const std::vector<std::string>& TextPrompts() {
  static const auto* prompts = new std::vector<std::string>{
      "The LORD is my shepherd",
      "Genesis 1\n\n1 In the beginning",
      "Hello, world!\nHow are you?\n",
      "A computer program does what you tell it to do, not what you want it "
      "to do. Q: How many programmers does it take to change a light bulb?"
      "\nA:",
      "The LORD",
      "And God said, Let there be light:",
      "Blessed is the man that walketh not in the counsel of the ungodly,",
      "In the beginning was the Word, and the Word was with God,",
  };
  return *prompts;
}

const std::vector<int>& TextPromptTokenCounts() {
  static const auto* counts =
      new std::vector<int>{7, 12, 13, 38, 3, 10, 18, 17};
  return *counts;
}

std::vector<std::vector<int32_t>> SyntheticPrompts(int64_t vocab,
                                                   uint64_t seed) {
  // mt19937_64 and the explicit modulo are fully specified by the standard
  // (distributions are not), so the ids are the same with every library.
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int len : TextPromptTokenCounts()) {
    std::vector<int32_t> ids(len);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % vocab);
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace moeserve::bench
