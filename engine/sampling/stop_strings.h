// Finds stop strings in streamed text without ever emitting them, even when
// a stop string spans several tokens.
//
// Text that could still turn out to be the start of a stop string is held
// back until the next delta decides it. Input deltas must be UTF-8 complete
// (IncrementalDetokenizer's output); the output then is too, because a held
// suffix always begins where a stop string begins. Not thread-safe.
#ifndef MOESERVE_ENGINE_SAMPLING_STOP_STRINGS_H_
#define MOESERVE_ENGINE_SAMPLING_STOP_STRINGS_H_

#include <string>
#include <string_view>
#include <vector>

namespace moeserve::engine {

class StopStringMatcher {
 public:
  // Empty strings in `stops` are ignored.
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Step {
    std::string emit;      // text safe to send now
    bool stopped = false;  // a stop string was found; `emit` ends before it
  };

  // REQUIRES: no earlier Push() returned stopped == true.
  Step Push(std::string_view delta);

  // The held-back text, for when generation ends for another reason.
  std::string Flush();

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of a
  // stop string.
  size_t HeldSuffixLength() const;

  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_SAMPLING_STOP_STRINGS_H_
