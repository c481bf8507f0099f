// What a soak run counts: per action, how many calls ended with each gRPC
// status code, which of those were unexpected for that action, tokens
// received, and the first few unexpected messages (for the report).
//
// Thread-safe: every client thread records into one Tally.
#ifndef MOESERVE_TOOLS_SOAK_TALLY_H_
#define MOESERVE_TOOLS_SOAK_TALLY_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "grpcpp/support/status.h"
#include "nlohmann/json.hpp"

namespace moeserve::soak {

// The kinds of call a soak client makes (see soak_client.h for each).
enum class Action {
  kStream,      // streamed Generate read to the end
  kCancel,      // streamed Generate cancelled by the client mid-stream
  kDeadline,    // streamed Generate with a short gRPC deadline
  kTimeLimit,   // streamed Generate with a short server-side time_limit_ms
  kUnary,       // GenerateUnary
  kAbort,       // streamed Generate stopped by Abort(request_id)
  kTokenize,    // Tokenize (encode and decode)
  kInvalid,     // a Generate with an invalid field
  kDisconnect,  // a new connection dropped while its stream is open
  kCount,
};
const char* ActionName(Action action);

class Tally {
 public:
  static constexpr int kCodes = 17;

  // One finished call. `expected` says whether `status` is an acceptable
  // outcome of `action`; RESOURCE_EXHAUSTED is always acceptable (load
  // shedding) but counted.
  void Record(Action action, const grpc::Status& status, bool expected,
              int64_t tokens) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t calls() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t unexpected() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t tokens() const ABSL_LOCKS_EXCLUDED(mu_);
  // {"stream": {"OK": 12, ...}, ...}, "unexpected", "tokens", "samples".
  nlohmann::json ToJson() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr int kActions = static_cast<int>(Action::kCount);
  static constexpr size_t kMaxSamples = 20;

  mutable base::Mutex mu_;
  std::array<std::array<int64_t, kCodes>, kActions> counts_
      ABSL_GUARDED_BY(mu_){};
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t unexpected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::soak

#endif  // MOESERVE_TOOLS_SOAK_TALLY_H_
