// Runs one concurrency level of moeserve_loadgen: `concurrency` client
// threads, each issuing Generate calls back to back (closed loop) until the
// level's request count or time budget runs out.
#ifndef MOESERVE_TOOLS_LOADGEN_LEVEL_RUNNER_H_
#define MOESERVE_TOOLS_LOADGEN_LEVEL_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/moeserve.grpc.pb.h"
#include "tools/loadgen/stats.h"

namespace moeserve::loadgen {

struct LevelOptions {
  int concurrency = 1;
  int requests = 8;                 // issued at most
  double max_seconds = 120;         // no request is issued after this
  double request_deadline_s = 300;  // gRPC deadline of each call
  uint32_t max_new_tokens = 64;
  bool ignore_eos = true;
  std::string policy;  // empty: the server's choice
};

// The request for prompt `prompt` with the level's sampling (greedy).
moeserve::v1::GenerateRequest MakeRequest(const std::string& prompt,
                                          const LevelOptions& options);
// The same for a prompt given as token ids (prompt_token_ids).
moeserve::v1::GenerateRequest MakeTokenRequest(
    const std::vector<uint32_t>& prompt_token_ids, const LevelOptions& options);

// Issues one streaming Generate and measures it.
RequestSample RunOneRequest(moeserve::v1::Inference::Stub& stub,
                            const moeserve::v1::GenerateRequest& request,
                            double deadline_s);

// Runs the level; request i sends requests[i % requests.size()] (built by
// MakeRequest or MakeTokenRequest). INVALID_ARGUMENT for a non-positive
// concurrency/request count or no requests.
absl::StatusOr<LevelSummary> RunLevel(
    moeserve::v1::Inference::Stub& stub,
    const std::vector<moeserve::v1::GenerateRequest>& requests,
    const LevelOptions& options);

}  // namespace moeserve::loadgen

#endif  // MOESERVE_TOOLS_LOADGEN_LEVEL_RUNNER_H_
