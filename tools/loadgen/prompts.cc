#include "tools/loadgen/prompts.h"

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

}  // namespace moeserve::loadgen
