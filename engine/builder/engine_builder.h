// BuildEngine: the one function that turns a loaded model plus an
// EngineSpec into a running engine (offload policy + slow tier + fast tier
// + link + scheduler, and the drafter). The server, moeserve_bench and
// every test that needs an offloaded engine call it; nothing else
// assembles one. The engine owns the residency, which owns the policy and
// the slow tier; the residency is also the engine's SpeculationAdvisor.
//
// Layering: this package creates policies and drafters by name through
// their registries (engine/offload/policy_registry.h,
// engine/spec_decode/drafter_registry.h) and links every registered one; it
// sits below server/ and tools/. The rest of engine/ never includes it.
#ifndef MOESERVE_ENGINE_BUILDER_ENGINE_BUILDER_H_
#define MOESERVE_ENGINE_BUILDER_ENGINE_BUILDER_H_

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "engine/builder/engine_spec.h"
#include "engine/engine.h"
#include "engine/model_weights.h"
#include "engine/offload/expert_residency.h"
#include "engine/tokenizer.h"
#include "kernels/backend.h"
#include "metrics/registry.h"

namespace moeserve::engine {

// What every engine of one process shares, read-only. Borrowed: all must
// outlive the engines built from them.
struct SharedModel {
  const ModelWeights* weights = nullptr;
  const Tokenizer* tokenizer = nullptr;
  kernels::Backend* backend = nullptr;    // compute (and, off the CPU, slots)
  metrics::Registry* registry = nullptr;  // may be null: no metrics
};

// A running engine and handles to what it is made of.
struct BuiltEngine {
  EngineSpec spec;
  // The fast-tier budget the spec resolved to on this model (the expert
  // cache; with draft_budget "shared" the draft's bytes are taken out).
  uint64_t expert_cache_bytes = 0;
  // The drafter's own expert weights in fast memory (int4 pool), or 0.
  uint64_t draft_bytes = 0;
  // Host attention on a fast tier in device memory: the KV cache bytes the
  // device does not hold, added to expert_cache_bytes; else 0.
  uint64_t kv_bytes_to_experts = 0;
  std::unique_ptr<Engine> engine;
  // The engine's fast tier (hit/miss and link statistics). Owned by
  // `engine`; valid while it lives.
  const ExpertResidency* residency = nullptr;
};

// Checks `spec` (CheckEngineSpec) and builds the engine. Errors name the
// engine ("engine 'NAME': ..."). The engine is not warmed up (Engine::WarmUp).
// REQUIRES: for spec.slow_tier "host", model.weights has packed experts.
absl::StatusOr<BuiltEngine> BuildEngine(const SharedModel& model,
                                        const EngineSpec& spec);

// The two-tier expert memory `spec` asks for with `capacity_bytes` of fast
// tier: its policy (by name), its slow tier (host RAM or disk) and the
// residency over them, which owns both. BuildEngine hands it to the engine,
// which owns it. `fast_tier_backend`: the backend whose memory holds the
// expert slots (VRAM on CUDA); null for host RAM. Borrowed, as are
// `weights` and `registry` (may be null).
// REQUIRES: for slow_tier "host", `weights` was loaded with packed experts.
absl::StatusOr<std::unique_ptr<ExpertResidency>> NewResidency(
    const ModelWeights* weights, const EngineSpec& spec,
    uint64_t capacity_bytes, kernels::Backend* fast_tier_backend,
    metrics::Registry* registry);

// Whether weights for these specs must be loaded with packed experts (any
// engine with a host slow tier).
bool NeedsPackedExperts(std::span<const EngineSpec> specs);

// The threads of an engine's host expert pool (hybrid execution):
// `host_expert_threads` when > 0, else half this machine's cores (at least
// one).
int HostExpertThreads(int host_expert_threads);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_BUILDER_ENGINE_BUILDER_H_
