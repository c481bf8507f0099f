// BuildEngine: the one function that turns a loaded model plus an
// EngineSpec into a running engine (offload policy + slow tier + fast tier
// + link + scheduler). The server, moeserve_bench and every test that needs
// an offloaded engine call it; nothing else assembles one.
//
// Layering: this package sits above policies/ (it creates policies by name)
// and below server/ and tools/. engine/ itself never includes it.
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

// Whether weights for these specs must be loaded with packed experts (any
// engine with a host slow tier).
bool NeedsPackedExperts(std::span<const EngineSpec> specs);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_BUILDER_ENGINE_BUILDER_H_
