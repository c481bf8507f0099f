#include "engine/builder/engine_builder.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/offload/expert_residency.h"
#include "engine/offload/policy_registry.h"
#include "engine/offload/slow_tier.h"
#include "engine/spec_decode/drafter_registry.h"
#include "kernels/backend_factory.h"

namespace moeserve::engine {
namespace {

absl::Status InEngine(const EngineSpec& spec, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("engine '", spec.name,
                                                  "': ", status.message()));
}

// A drafter's own weights in fast memory (its DrafterTraits, e.g. the int4
// draft's pool): with draft_budget "shared" they come out of the expert
// cache's budget.
absl::Status ChargeDraftMemory(const ModelWeights& weights,
                               BuiltEngine* built) {
  MOESERVE_ASSIGN_OR_RETURN(built->draft_bytes,
                            spec_decode::DrafterFastMemoryBytes(
                                built->spec.drafter, weights.config()));
  if (built->draft_bytes == 0 || built->spec.draft_budget != "shared") {
    return absl::OkStatus();
  }
  const uint64_t blob = weights.expert({0, 0}).bytes;
  if (built->expert_cache_bytes < built->draft_bytes + blob) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert_cache_ratio: the ", built->spec.drafter, " draft takes ",
        built->draft_bytes, " bytes of the ", built->expert_cache_bytes,
        "-byte fast-tier budget, leaving less than one expert slot (", blob,
        " bytes); raise the budget or set draft_budget extra"));
  }
  built->expert_cache_bytes -= built->draft_bytes;
  return absl::OkStatus();
}

// Shows the draft's bytes as moeserve_expert_cache_bytes{state="draft"}
// beside the residency's empty/loading/ready.
absl::Status ExportDraftBytes(metrics::Registry* registry,
                              const BuiltEngine& built) {
  if (registry == nullptr || built.draft_bytes == 0) return absl::OkStatus();
  MOESERVE_ASSIGN_OR_RETURN(metrics::GaugeFamily * family,
                            registry->AddGauge("moeserve_expert_cache_bytes",
                                               "Fast-tier bytes by slot state.",
                                               {"policy", "state"}));
  MOESERVE_ASSIGN_OR_RETURN(metrics::Gauge * gauge,
                            family->WithLabels({built.spec.name, "draft"}));
  gauge->Set(static_cast<double>(built.draft_bytes));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertResidency>> NewResidency(
    const ModelWeights* weights, const EngineSpec& spec,
    uint64_t capacity_bytes, kernels::Backend* fast_tier_backend,
    metrics::Registry* registry) {
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<OffloadPolicy> policy,
                            CreatePolicy(spec.policy, spec.policy_config));
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<SlowTier> slow,
                            spec.slow_tier == "disk"
                                ? NewDiskSlowTier(weights)
                                : NewHostSlowTier(weights));
  return ExpertResidency::Create(weights, std::move(slow), capacity_bytes,
                                 spec.link, std::move(policy), registry,
                                 spec.name, fast_tier_backend);
}

// Hybrid execution (issue 32): on a fast tier in a backend's memory the
// residency gets a host CPU backend of its own to compute in-place experts
// (a policy's ComputeInPlace, --cpu_moe_layers) next to their weights; on a
// host fast tier only the static placement applies (the same CPU computes
// everything).
absl::Status EnableHybrid(const EngineSpec& spec,
                          kernels::Backend* fast_tier_backend,
                          ExpertResidency* residency) {
  ExpertResidency::HybridOptions hybrid;
  hybrid.cpu_moe_layers = spec.cpu_moe_layers;
  if (fast_tier_backend != nullptr) {
    MOESERVE_ASSIGN_OR_RETURN(
        hybrid.host, kernels::CreateBackend({.name = "cpu",
                                             .cpu_threads = HostExpertThreads(
                                                 spec.host_expert_threads)}));
  } else if (spec.cpu_moe_layers == 0) {
    return absl::OkStatus();
  }
  // Its messages name the setting (cpu_moe_layers).
  return residency->EnableHybrid(std::move(hybrid));
}

absl::StatusOr<BuiltEngine> BuildEngine(const SharedModel& model,
                                        const EngineSpec& spec) {
  if (absl::Status st = CheckEngineSpec(spec); !st.ok()) {
    return InEngine(spec, st);
  }
  if (spec.slow_tier == "host" &&
      model.weights->expert({0, 0}).data == nullptr) {
    return InEngine(spec, absl::FailedPreconditionError(
                              "slow_tier host needs the weights loaded with "
                              "packed experts"));
  }
  if (spec.slow_tier == "disk" && !model.weights->has_files()) {
    return InEngine(spec, absl::FailedPreconditionError(
                              "slow_tier disk preads the model files, and "
                              "these weights were built in memory (no "
                              "files); use slow_tier host"));
  }
  if (spec.slow_tier == "disk" && !model.weights->experts_in_files()) {
    return InEngine(
        spec, absl::FailedPreconditionError(absl::StrCat(
                  "slow_tier disk preads BF16 experts from the model files, "
                  "and this checkpoint's experts are ",
                  model.weights->expert_format_description(),
                  ", converted at load; use slow_tier host")));
  }
  BuiltEngine built;
  built.spec = spec;
  if (absl::Status st = ResolveSpeculation(&built.spec); !st.ok()) {
    return InEngine(spec, st);
  }
  // On a GPU the expert slots are VRAM owned by the backend; on the CPU
  // they are plain host RAM filled by SlowTier::Read.
  kernels::Backend* fast_tier_backend =
      model.backend->device() == kernels::Device::kCpu &&
              !spec.fast_tier_in_backend_memory
          ? nullptr
          : model.backend;
  built.expert_cache_bytes = ExpertCacheBytes(*model.weights, spec);
  if (built.spec.host_attention != 0 && fast_tier_backend != nullptr) {
    // The device memory the KV cache would take goes to the expert cache.
    built.kv_bytes_to_experts = spec.kv_cache_bytes;
    built.expert_cache_bytes += spec.kv_cache_bytes;
  }
  if (absl::Status st = ChargeDraftMemory(*model.weights, &built); !st.ok()) {
    return InEngine(spec, st);
  }
  EngineOptions options;
  options.name = spec.name;
  options.kv_cache_bytes = spec.kv_cache_bytes;
  options.max_num_seqs = spec.max_num_seqs;
  options.max_batched_tokens = spec.max_batched_tokens;
  options.max_waiting = spec.max_waiting;
  options.max_running_per_caller = spec.max_running_per_caller;
  options.max_waiting_per_caller = spec.max_waiting_per_caller;
  options.registry = model.registry;
  options.num_speculative_tokens = built.spec.num_speculative_tokens;
  options.max_speculative_tokens = kMaxSpeculativeTokens / 2;
  // The engine's two-tier expert memory: the residency, owning its policy
  // and slow tier; the engine owns the residency.
  absl::StatusOr<std::unique_ptr<ExpertResidency>> residency =
      NewResidency(model.weights, spec, built.expert_cache_bytes,
                   fast_tier_backend, model.registry);
  if (!residency.ok()) return InEngine(spec, residency.status());
  if (absl::Status st = EnableHybrid(spec, fast_tier_backend, residency->get());
      !st.ok()) {
    return InEngine(spec, st);
  }
  ExpertResidency* raw_residency = residency->get();
  options.advisor = raw_residency;
  if (built.spec.host_attention != 0) {
    absl::StatusOr<std::unique_ptr<kernels::Backend>> host =
        kernels::CreateBackend(
            {.name = "cpu",
             .cpu_threads = HostExpertThreads(spec.host_expert_threads)});
    if (!host.ok()) return InEngine(spec, host.status());
    options.host_attention = *std::move(host);
  }
  if (built.spec.drafter != "none") {
    const spec_decode::DrafterFactory* factory =
        spec_decode::FindDrafter(built.spec.drafter);
    if (factory == nullptr) {
      return InEngine(
          spec, absl::NotFoundError(absl::StrCat(
                    "drafter '", built.spec.drafter, "' is not registered")));
    }
    spec_decode::DrafterContext context;
    context.weights = model.weights;
    context.draft_experts = raw_residency->draft_experts();
    context.residency = raw_residency;
    context.policy = raw_residency->policy();
    context.backend = model.backend;
    context.draft_model_dir = built.spec.draft_model_dir;
    // Runs inside Engine::Create, once the target model and KV cache exist.
    options.make_drafter = [factory, context](MoeModel* target,
                                              KvCache* kv) mutable {
      context.target = target;
      context.kv = kv;
      return (*factory)(context);
    };
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(model.weights, model.tokenizer, model.backend, options,
                     *std::move(residency));
  if (!engine.ok()) return InEngine(spec, engine.status());
  built.engine = *std::move(engine);
  if (absl::Status st = ExportDraftBytes(model.registry, built); !st.ok()) {
    return InEngine(spec, st);
  }
  built.residency = raw_residency;
  return built;
}

bool NeedsPackedExperts(std::span<const EngineSpec> specs) {
  return std::any_of(specs.begin(), specs.end(),
                     [](const EngineSpec& s) { return s.slow_tier == "host"; });
}

int HostExpertThreads(int host_expert_threads) {
  if (host_expert_threads > 0) return host_expert_threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
}

}  // namespace moeserve::engine
