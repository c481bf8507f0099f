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

// One engine instance of an A/B split: a name (= its policy) and a weight.
struct AbArm {
  std::string policy;
  double weight = 0;
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

  // The engine instances this configuration asks for: --policy, then every
  // --ab arm not already named, in order.
  std::vector<std::string> EngineNames() const;
};

// Reads every flag and checks it; errors name the flag.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

// Parses "--ab" text such as "lru=0.5,overlap=0.5" (weights > 0; they are
// normalised to sum to 1). Exposed for tests.
absl::StatusOr<std::vector<AbArm>> ParseAbSplit(absl::string_view text);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_SERVER_OPTIONS_H_
