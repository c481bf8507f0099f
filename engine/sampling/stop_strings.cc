#include "engine/sampling/stop_strings.h"

#include <algorithm>
#include <utility>

namespace moeserve::engine {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

size_t StopStringMatcher::HeldSuffixLength() const {
  size_t held = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t k = longest; k > held; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) ==
          std::string_view(stop).substr(0, k)) {
        held = k;
        break;
      }
    }
  }
  return held;
}

StopStringMatcher::Step StopStringMatcher::Push(std::string_view delta) {
  pending_.append(delta);
  Step step;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    first = std::min(first, pending_.find(stop));
  }
  if (first != std::string::npos) {
    step.emit = pending_.substr(0, first);
    step.stopped = true;
    pending_.clear();
    return step;
  }
  const size_t emit_len = pending_.size() - HeldSuffixLength();
  step.emit = pending_.substr(0, emit_len);
  pending_.erase(0, emit_len);
  return step;
}

std::string StopStringMatcher::Flush() { return std::exchange(pending_, {}); }

}  // namespace moeserve::engine
