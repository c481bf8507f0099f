// What the two hand-off tests (serving_handoff_test: the pumps under TSan;
// grpc_handoff_test: the same through real gRPC) share: the server options
// of their two-engine setup on the mixtral_tiny fixture, the fake tokenizer
// sized for it, the kinds of client and their requests, what each client
// must see, and the per-reason counts the registry must show afterwards.
#ifndef MOESERVE_SERVER_TESTING_HANDOFF_FIXTURE_H_
#define MOESERVE_SERVER_TESTING_HANDOFF_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/tokenizer.h"
#include "metrics/registry.h"
#include "proto/moeserve.pb.h"
#include "server/server_options.h"

namespace moeserve::server::testing {

// Two engines (lru and overlap, A/B 50/50) with half the experts in the
// fast tier (so link threads work too) and at most 4 running sequences (so
// requests queue), on tests/golden/mixtral_tiny.
absl::StatusOr<ServerOptions> HandOffOptions();

// engine/testing's fake tokenizer with the fixture's vocabulary size.
std::unique_ptr<engine::Tokenizer> HandOffTokenizer(
    const ServerOptions& options);

// The sum of the samples of `name` in `registry` whose label text contains
// each of `labels` (e.g. "finished_reason=\"deadline\"").
double SumOfSamples(const metrics::Registry& registry, const std::string& name,
                    const std::vector<std::string>& labels = {});

// What a client does with its request.
enum class Client {
  kComplete,       // streams it to the end (12 tokens)
  kCancel,         // cancels the stream after 2 tokens
  kDeadline,       // streams a long one with a short deadline
  kUnary,          // GenerateUnary to the end (12 tokens)
  kUnaryDeadline,  // GenerateUnary, a long one with a short deadline
  kAborted,        // streams a long one that is aborted by id after 2 tokens
};
// Each round's clients cycle through these.
inline constexpr Client kClientKinds[] = {
    Client::kComplete, Client::kCancel,        Client::kDeadline,
    Client::kUnary,    Client::kUnaryDeadline, Client::kAborted};

bool IsUnary(Client kind);
// The client's deadline from the moment it sends, or InfiniteDuration.
absl::Duration DeadlineFor(Client kind);
// Request `i` of `kind`, with request_id "r<i>".
v1::GenerateRequest HandOffRequest(int i, Client kind);

// What a client saw: the call's status, its finish reason, its tokens.
struct Outcome {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  int tokens = 0;
};

// EXPECTs what a client of `kind` must see.
void ExpectOutcome(Client kind, const Outcome& outcome);

// Waits (up to 60 s) until `registry` counts every request of `sent` as
// finished and no engine runs or queues any, then EXPECTs that, and each
// finish reason's count.
void ExpectAllCounted(const metrics::Registry& registry,
                      const std::map<Client, int>& sent);

}  // namespace moeserve::server::testing

#endif  // MOESERVE_SERVER_TESTING_HANDOFF_FIXTURE_H_
