// Server configuration, resolved once from the command-line flags at start-up
// (flags are never read on a hot path). Flag names follow DESIGN.md.
#ifndef MOESERVE_SERVER_SERVER_OPTIONS_H_
#define MOESERVE_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/request_validator.h"

namespace moeserve::server {

// One engine instance of an A/B split: an engine name and a weight.
struct AbArm {
  std::string policy;  // the engine's name (by default also its policy)
  double weight = 0;
};

// One engine instance: its name (what requests and metrics call it), its
// offload policy, and optionally its own fast-tier budget.
struct EngineSpec {
  std::string name;
  std::string policy;
  double expert_cache_ratio = 0;  // 0: the server-wide flags
  int64_t expert_cache_mb = 0;    // wins when > 0
};

struct ServerOptions {
  std::string host = "127.0.0.1";  // --host
  int port = 50051;                // --port (0: pick a free one)
  int metrics_port = 9400;         // --metrics_port (0: pick a free one)
  std::string model_dir;           // --model_dir
  std::string policy = "lru";      // --policy: the default engine
  std::vector<AbArm> ab;           // --ab=lru=0.5,overlap=0.5
  absl::Duration drain = absl::Seconds(30);  // --drain_seconds
  int max_receive_message_bytes = 4 << 20;   // --max_receive_message_mb
  int keepalive_time_ms = 60'000;            // --keepalive_time_ms
  int keepalive_timeout_ms = 20'000;         // --keepalive_timeout_ms
  // Compute.
  std::string backend = "cpu";  // --backend=cpu|cuda
  int cuda_device = 0;          // --cuda_device
  // Engine sizing.
  int threads = 0;                         // --threads (0: every core)
  uint64_t kv_cache_bytes = 256ull << 20;  // --kv_cache_mb
  int max_num_seqs = 64;                   // --max_num_seqs
  int max_batched_tokens = 2048;           // --max_batched_tokens
  int max_waiting = 256;                   // --max_waiting
  // Two-tier expert memory.
  double expert_cache_ratio = 1.0;  // --expert_cache_ratio (of expert bytes)
  int64_t expert_cache_mb = 0;      // --expert_cache_mb (wins when > 0)
  std::string slow_tier = "host";   // --slow_tier=host|disk
  double link_gbps = 0;             // --link_gbps (GB/s; 0: no emulation)
  double link_latency_us = 0;       // --link_latency_us
  std::string policy_config;        // --policy_config=k=v,k=v
  RequestLimits limits;

  // --engines, when given: every engine instance explicitly.
  std::vector<EngineSpec> engines;

  // The engine instances this configuration asks for: --engines if given;
  // else --policy, then every --ab arm not already named, each named after
  // its policy and using the server-wide budget.
  std::vector<EngineSpec> EngineSpecs() const;
  std::vector<std::string> EngineNames() const;
};

// Reads every flag and checks it; errors name the flag.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

// Parses "--engines" text: NAME=POLICY[@ratio=R|@mb=N],... e.g.
// "small=lru@ratio=0.25,big=lru@ratio=0.5". Exposed for tests.
absl::StatusOr<std::vector<EngineSpec>> ParseEngineSpecs(
    absl::string_view text);

// Parses "--ab" text such as "lru=0.5,overlap=0.5" (weights > 0; they are
// normalised to sum to 1). Exposed for tests.
absl::StatusOr<std::vector<AbArm>> ParseAbSplit(absl::string_view text);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_SERVER_OPTIONS_H_
