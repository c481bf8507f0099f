// What the two hand-off tests (serving_handoff_test: the pumps under TSan;
// grpc_handoff_test: the same through real gRPC) share: the server options
// of their two-engine setup on the mixtral_tiny fixture, the fake tokenizer
// sized for it, and reading a metric back from the registry.
#ifndef MOESERVE_SERVER_TESTING_HANDOFF_FIXTURE_H_
#define MOESERVE_SERVER_TESTING_HANDOFF_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer.h"
#include "metrics/registry.h"
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

}  // namespace moeserve::server::testing

#endif  // MOESERVE_SERVER_TESTING_HANDOFF_FIXTURE_H_
