#include "tools/loadgen/prompts.h"

#include <random>

namespace moeserve::loadgen {

const std::vector<std::string>& FixedPrompts() {
  // The demo model (models/demo) was trained on the King James Bible and
  // fortune(6)-style sayings, so the prompts are opening words of KJV verses
  // (first eight) and of fortunes-style proverbs (last eight). They are short
  // so that decode, not prefill, dominates a 64-token request.
  static const std::vector<std::string>* const kPrompts =
      new std::vector<std::string>{
          "In the beginning God created", "And God said, Let there be",
          "The LORD is my shepherd;",     "Blessed are the meek: for",
          "And it came to pass, when",    "For God so loved the world,",
          "Then Jesus said unto them,",   "Thus saith the LORD of hosts;",
          "A fool and his money",         "He who laughs last",
          "Never put off until tomorrow", "You will meet a tall dark stranger",
          "The early bird gets the",      "A journey of a thousand miles",
          "Do not count your chickens",   "Fortune favors the",
      };
  return *kPrompts;
}

std::vector<std::vector<uint32_t>> TokenIdPrompts(int count, int length,
                                                  uint32_t vocab_size) {
  constexpr uint32_t kBos = 1, kFirstPlain = 3;
  std::mt19937 rng(15);  // fixed: the same prompts in every run
  std::uniform_int_distribution<uint32_t> id(kFirstPlain, vocab_size - 1);
  std::vector<std::vector<uint32_t>> prompts(count);
  for (std::vector<uint32_t>& p : prompts) {
    p.push_back(kBos);
    while (static_cast<int>(p.size()) < length) p.push_back(id(rng));
  }
  return prompts;
}

}  // namespace moeserve::loadgen
