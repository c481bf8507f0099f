// Server configuration, resolved once from the command-line flags at start-up
// (flags are never read on a hot path). Flag names follow DESIGN.md.
//
// Process-wide settings live here; everything that belongs to one engine
// instance (policy and its settings, budget, slow tier, link, scheduler
// limits) lives in its engine::EngineSpec.
#ifndef MOESERVE_SERVER_SERVER_OPTIONS_H_
#define MOESERVE_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/builder/engine_spec.h"
#include "server/request_validator.h"

namespace moeserve::server {

// Bounds of the server-wide flags (issue 16: each was accepted unbounded and
// then misapplied). Per-engine bounds are engine/builder/engine_spec.h's.
// Engines per process (--engines, --ab, --engines_config): each holds its
// own KV cache and fast tier.
inline constexpr size_t kMaxEngines = 16;
// --threads: at most 4 per core the machine reports, never above this.
inline constexpr int kMaxThreads = 1024;
// --drain_seconds.
inline constexpr int kMaxDrainSeconds = 3600;
// --max_input_tokens and --max_new_tokens_cap.
inline constexpr uint32_t kMaxTokensFlag = 1 << 20;
// --max_prompt_bytes.
inline constexpr int64_t kMaxPromptBytesFlag = int64_t{1} << 30;

// The most --threads may ask for on this machine: 4 x the cores
// std::thread::hardware_concurrency() reports (at least 4), at most
// kMaxThreads.
int MaxThreads();

// One engine instance of an A/B split: an engine name and a weight.
struct AbArm {
  std::string policy;  // the engine's name (by default also its policy)
  double weight = 0;
};

struct ServerOptions {
  std::string host = "127.0.0.1";  // --host
  int port = 50051;                // --port (0: pick a free one)
  int metrics_port = 9400;         // --metrics_port (0: pick a free one)
  // The OpenAI-compatible HTTP API (server/openai/): --http_port (0: off)
  // on --http_host (empty: --host).
  int http_port = 0;
  std::string http_host;
  // --http_head_timeout_s: on both HTTP ports (this one and the metrics
  // port), a request's head must be in within it (slowloris; metrics/README.md
  // "HTTP bounds").
  int http_head_timeout_s = 10;
  std::string model_dir;                     // --model_dir
  absl::Duration drain = absl::Seconds(30);  // --drain_seconds
  int max_receive_message_bytes = 4 << 20;   // --max_receive_message_mb
  int keepalive_time_ms = 60'000;            // --keepalive_time_ms
  int keepalive_timeout_ms = 20'000;         // --keepalive_timeout_ms
  // Compute (shared by every engine of the process).
  std::string backend = "cpu";  // --backend=cpu|cuda
  int cuda_device = 0;          // --cuda_device
  bool cuda_graphs = false;     // --cuda_graphs
  int threads = 0;              // --threads (0: every core)
  RequestLimits limits;
  std::string engines_config;  // --engines_config (the path; for logs)

  // The engine instances, every setting resolved (flags, --engines,
  // --engines_config; a drafter or k left to the policy is resolved to the
  // policy's own, as engine::BuildEngine would): [0] is the default engine,
  // the one a request that names none goes to when there is no A/B split.
  std::vector<engine::EngineSpec> engines = {engine::EngineSpec()};
  // The A/B split (weights sum to 1), or empty.
  std::vector<AbArm> ab;

  const engine::EngineSpec& default_engine() const { return engines.front(); }
  std::vector<std::string> EngineNames() const;
  // Share of unnamed requests that `engine` gets: its A/B weight, or 1 for
  // the default engine when there is no split, else 0.
  double AbWeight(const std::string& engine) const;
};

// The flags that decide the engine instances, as given.
struct EngineFlags {
  std::string policy = "lru";  // --policy
  bool policy_given = false;   // --policy was on the command line
  std::string policy_config;   // --policy_config (the --policy engine only)
  std::string ab;              // --ab
  std::string engines;         // --engines
  std::string engines_config;  // --engines_config
  // The server-wide per-engine flags (engine/builder/engine_settings.h:
  // --kv_cache_mb, --link_gbps, --drafter, ...): every engine's defaults.
  engine::EngineSpec defaults;
};

// Resolves `flags` into options->engines and options->ab, checking every
// engine (policy registered, policy_config keys, drafter registered, ranges)
// and resolving the drafter and num_speculative_tokens each engine leaves
// to its policy. Errors name the flag (and the file), the engine and the
// key; a bad value in flags.defaults (--drafter, --max_waiting, ...) is
// named as that flag.
absl::Status ResolveEngines(const EngineFlags& flags, ServerOptions* options);

// Reads every flag and checks it; errors name the flag.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

// Parses "--engines" text: NAME=POLICY[@ratio=R|@mb=N],... e.g.
// "small=lru@ratio=0.25,big=lru@ratio=0.5"; each engine starts from
// `defaults`. Exposed for tests.
absl::StatusOr<std::vector<engine::EngineSpec>> ParseEngineSpecs(
    absl::string_view text,
    const engine::EngineSpec& defaults = engine::EngineSpec());

// Parses "--ab" text such as "lru=0.5,overlap=0.5" (weights > 0; they are
// normalised to sum to 1). Exposed for tests.
absl::StatusOr<std::vector<AbArm>> ParseAbSplit(absl::string_view text);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_SERVER_OPTIONS_H_
