// EngineSpec: everything that defines one engine instance (what the server
// calls an engine, and what A/B compares): its name, offload policy and that
// policy's settings, its fast-tier budget, slow tier, link emulation,
// scheduler limits and (reserved for speculative decoding) its drafter.
// Settings belong to the engine, never to the process (two engines of one
// server may run two configurations of the same policy).
//
// The server fills specs from flags or --engines_config; the bench and the
// tests fill them directly. BuildEngine (engine_builder.h) turns one into a
// running engine.
#ifndef MOESERVE_ENGINE_BUILDER_ENGINE_SPEC_H_
#define MOESERVE_ENGINE_BUILDER_ENGINE_SPEC_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "engine/model_weights.h"
#include "engine/offload/link.h"

namespace moeserve::engine {

struct EngineSpec {
  // What requests (`policy` field), --ab and the `policy` metric label call
  // this engine: [a-z0-9_]{1,64}.
  std::string name = "lru";
  // Offload policy, by registry name (engine/offload/policy_registry.h).
  std::string policy = "lru";
  // The policy's own settings (key -> value), checked by its factory.
  std::map<std::string, std::string> policy_config;

  // Fast-tier budget: expert_cache_mb MiB when > 0, else this share of all
  // expert bytes, in (0, 1]. At least one expert blob either way.
  double expert_cache_ratio = 1.0;
  int64_t expert_cache_mb = 0;
  // Where every expert lives: "host" (RAM; the weights must be loaded with
  // packed experts) or "disk" (pread from the safetensors files).
  std::string slow_tier = "host";
  // Emulated slow -> fast link (off by default).
  LinkOptions link;
  // Expert slots in the compute backend's memory even on the CPU backend
  // (slots from Backend::Allocate, copies on copy streams, release events):
  // the device path without a GPU, for tests. Off a CPU backend the slots
  // are always there.
  bool fast_tier_in_backend_memory = false;
  // Hybrid execution (engine/host_experts.h), on a fast tier in a backend's
  // memory: the first cpu_moe_layers MoE layers' experts stay on the host
  // and are computed there; host_expert_threads sizes the host pool that
  // computes them (and the experts a policy computes in place); 0: half the
  // cores.
  int cpu_moe_layers = 0;
  int host_expert_threads = 0;
  // Host attention (engine/host_attention.h, seed 002 §4.2): 1 puts the KV
  // cache in host memory and computes attention on a CPU backend of its
  // own (host_expert_threads threads) while the device keeps the dense and
  // expert work. On a fast tier in device memory the kv_cache_bytes the
  // device no longer holds join the expert cache's budget. 0: off, unless
  // the policy asks for it (SpeculationDefaults::host_attention: the
  // throughput policy's host_attention key; ResolveSpeculation).
  int host_attention = 0;

  // Scheduler and KV cache (engine::EngineOptions).
  uint64_t kv_cache_bytes = 256ull << 20;
  int max_num_seqs = 64;
  int max_batched_tokens = 2048;
  int max_waiting = 256;
  // Per caller, 0 = off (SchedulerOptions::max_*_per_caller).
  int max_running_per_caller = 0;
  int max_waiting_per_caller = 0;

  // Speculative decoding. drafter: a registered drafter
  // (engine/spec_decode/drafter_registry.h: self, ...), "none", or "" for the
  // policy's own (its registered PolicyTraits: self_spec -> self, the
  // others none). num_speculative_tokens: draft tokens per step, > 0 fixed,
  // 0 adaptive, -1 the policy's own (adaptive for a policy without one).
  // BuildEngine resolves both; BuiltEngine::spec holds the result.
  std::string drafter;
  int num_speculative_tokens = -1;
  std::string draft_model_dir;  // external drafter only
  // Where a drafter's own expert weights (the int4 draft's pool) come
  // from: "shared" charges them to the fast-tier budget above (the honest
  // same-memory comparison), "extra" adds them on top (same expert cache).
  std::string draft_budget = "shared";
};

// The most draft tokens per step an engine may ask for.
inline constexpr int kMaxSpeculativeTokens = 16;

// Bounds CheckEngineSpec enforces through the settings table
// (engine_settings.h; issue 16: values outside them were
// accepted and then misapplied: a budget that wrapped when turned into
// bytes, a link so slow that its arithmetic overflowed into "no throttle").
// Fast-tier budget: 1 MiB .. 16 TiB (a budget above the model's experts
// holds the whole model, see ExpertCacheBytes).
inline constexpr int64_t kMaxExpertCacheMb = int64_t{1} << 24;
// Emulated link: 0 (off) or 1 MB/s .. 100 TB/s; latency 0 .. 1 s.
inline constexpr double kMinLinkGbps = 1e-3;
inline constexpr double kMaxLinkGbps = 1e5;
inline constexpr double kMaxLinkLatencyUs = 1e6;
inline constexpr double kMaxInplaceComputeRatio = 1e3;
// KV cache: 1 MiB .. 16 TiB per engine.
inline constexpr uint64_t kMaxKvCacheBytes = uint64_t{1} << 44;
// Scheduler: sequences per step, tokens per step, waiting requests.
inline constexpr int kMaxNumSeqs = 4096;
inline constexpr int kMaxBatchedTokens = 1 << 20;
inline constexpr int kMaxWaiting = 1 << 20;

// True for a usable engine name: [a-z0-9_], 1 to 64 characters.
bool IsValidEngineName(std::string_view name);

// Checks every field of `spec`: each setting's range or choices (the
// table in engine_settings.h), the drafter, that
// the policy is registered and that its factory accepts policy_config.
// INVALID_ARGUMENT (NOT_FOUND for an unknown policy) naming the field or the
// policy_config key; the message does not repeat the engine's name (callers
// prefix it with where the spec came from).
absl::Status CheckEngineSpec(const EngineSpec& spec);

// Fills in the drafter and k that `spec` leaves to its policy, and turns
// host_attention on when the policy asks for it (the
// policy's registered traits, PolicySpeculation in
// engine/offload/policy_registry.h; no policy is built), so that what an
// engine reports (ListModels, moeserve_engine_info, logs) is what it runs.
// BuildEngine calls it; so does the server before it registers
// engine_info, both after CheckEngineSpec. Errors: the registry's (unknown
// policy; a malformed policy_config key the traits read) or a policy k
// outside [0, kMaxSpeculativeTokens].
absl::Status ResolveSpeculation(EngineSpec* spec);

// Fast-tier bytes for `spec`'s budget on `weights` (at least one blob; a
// budget above all expert bytes holds the whole model, the residency never
// makes more slots than experts).
uint64_t ExpertCacheBytes(const ModelWeights& weights, double ratio,
                          int64_t megabytes);
uint64_t ExpertCacheBytes(const ModelWeights& weights, const EngineSpec& spec);

// "k1=v1,k2=v2" in key order ("" when empty): for labels and logs.
std::string PolicyConfigText(const std::map<std::string, std::string>& config);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_BUILDER_ENGINE_SPEC_H_
