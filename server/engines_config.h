// --engines_config: a JSON file that lists the engine instances of one
// server, each with its own settings, and optionally the A/B split over
// them (DESIGN.md "Command line"):
//
//   {
//     "engines": [
//       {"name": "pinned", "policy": "lfu_static",
//        "policy_config": {"top_percent": 5}, "expert_cache_ratio": 0.25},
//       {"name": "lru", "policy": "lru", "expert_cache_mb": 512}
//     ],
//     "ab": {"pinned": 0.5, "lru": 0.5},
//     "default": "lru"
//   }
//
// Engine keys: name (required), policy (default: the name), policy_config
// (object; values are strings, numbers or booleans), and every engine
// setting under its flag's name, read and checked through the settings
// table (engine/builder/engine_settings.h): expert_cache_ratio,
// expert_cache_mb, slow_tier, link_gbps, link_latency_us,
// inplace_compute_ratio, kv_cache_mb, max_num_seqs, max_batched_tokens,
// max_waiting, drafter, num_speculative_tokens, draft_model_dir, draft_budget.
// A key an engine leaves out takes the server-wide flag's value. "default" (the
// engine of requests that name none when there is no "ab") defaults to the
// first engine.
//
// Speculation: "drafter" is a registered drafter ("self", "int4"), "none",
// or "" (the policy's own: self_spec -> self, quant_draft -> int4, the
// others none);
// "num_speculative_tokens" is 1..16 (fixed) or 0 (adaptive); left out (and
// no --num_speculative_tokens), the policy's own (quant_draft: 0, its
// governor picks k). "draft_budget" ("shared" | "extra", default
// --draft_budget) says whether the int4 draft's pool comes out of the
// engine's fast-tier budget or on top of it. ParseEnginesConfig keeps
// "" and -1 as they are; ResolveEngines resolves them (server_options.h).
// So one file can A/B "lru" against "lru + self draft":
//   {"engines": [{"name": "lru", "policy": "lru"},
//                {"name": "lru_self", "policy": "lru", "drafter": "self"}],
//    "ab": {"lru": 1, "lru_self": 1}}
//
// Refused, with a message naming the file, the engine and the key: unknown
// keys, wrong types, duplicate names, unknown policies, policy_config keys
// or drafters (the message lists the registered ones), num_speculative_tokens
// outside 0..16, draft_budget other than shared / extra, A/B weights that
// are negative, sum to 0 or to infinity, or name no engine, more than
// kMaxEngines engines, and values outside CheckEngineSpec's bounds
// (engine/builder/engine_spec.h: e.g. max_waiting 0, link_gbps 1e-300).
#ifndef MOESERVE_SERVER_ENGINES_CONFIG_H_
#define MOESERVE_SERVER_ENGINES_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/builder/engine_spec.h"
#include "server/server_options.h"

namespace moeserve::server {

struct EnginesConfig {
  std::vector<engine::EngineSpec> engines;  // [0] is the default engine
  std::vector<AbArm> ab;                    // weights normalised; may be empty
};

// Parses the file's text. Each engine starts from `defaults` (the
// server-wide flags). Errors are INVALID_ARGUMENT (NOT_FOUND for an unknown
// policy) and name the engine and key, not the file.
absl::StatusOr<EnginesConfig> ParseEnginesConfig(
    absl::string_view text, const engine::EngineSpec& defaults);

// Reads and parses `path`; errors start with "--engines_config=PATH: ".
absl::StatusOr<EnginesConfig> LoadEnginesConfig(
    const std::string& path, const engine::EngineSpec& defaults);

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_ENGINES_CONFIG_H_
