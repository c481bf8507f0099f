// Offload-policy comparison (DESIGN.md "A/B comparison", offline): one fixed
// workload (prompts, greedy sampling, lengths) replayed through a fresh
// engine (engine::BuildEngine) per (expert-cache ratio, concurrency, policy,
// drafter), with the residency and speculative-decoding statistics of the
// timed part and latency per token.
//
// Drafter axis: every policy runs once per entry of `drafters`, through
// EngineSpec::drafter / num_speculative_tokens. An entry is EngineSpec's
// drafter verbatim, so the bench and the server mean the same: a registered
// drafter ("self", "int4", ...), "none" (no speculation at all, even for a
// policy that brings a drafter: self_spec, quant_draft) or "" (the policy's
// own drafter); "own" is a readable alias of "". Entries that resolve to the
// same (drafter, k) for a policy run once.
//
// Draft budget axis: a cell whose drafter keeps its own expert pool in fast
// memory (BuiltEngine::draft_bytes > 0: int4) runs once per entry of
// `draft_budgets` (EngineSpec::draft_budget): "shared" takes the pool out of
// the fast-tier budget (same memory), "extra" adds it on top (same expert
// cache). Other cells run once. A shared cell whose pool leaves no expert
// slot in the budget is skipped (PolicyReport::skipped).
//
// Oracle: every cell's target expert access trace (the (layer, expert)
// acquires of its timed part, in order; access_trace.h) is replayed with
// Belady's MIN at the cell's slot count (belady.h, warm start): the hit
// rate no demand-caching policy can beat on that trace.
//
// Runs on any Backend: on a device backend (CUDA) the fast tier's expert
// slots live in device memory and the link copies on the device's copy
// streams (the builder's choice for a non-CPU backend); on the CPU the slots
// are host RAM.
//
// Thread-compatible: one RunPolicyBench at a time per backend.
#ifndef MOESERVE_TOOLS_BENCH_POLICY_BENCH_H_
#define MOESERVE_TOOLS_BENCH_POLICY_BENCH_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tools/bench/copy_probe.h"
#include "tools/bench/machine.h"

namespace moeserve::bench {

struct PolicyBenchOptions {
  // With a tokenizer.model the prompts are text; without one (generated
  // random-weight models) synthetic token ids of the same lengths.
  std::string model_dir;
  std::string model_name;  // For the report; default: the directory's name.
  // When set, builds the weights instead of loading model_dir (a model
  // generated in memory, generated_model.h GenerateModelInMemory; no
  // tokenizer, so synthetic prompts); model_dir is then only reported.
  // Called once per RunPolicyBench, the weights freed when it returns.
  std::function<absl::StatusOr<std::unique_ptr<engine::ModelWeights>>()>
      make_weights;
  // Registered policy names; an entry "name:k=v:k2=v2" runs that policy
  // with those keys over policy_config (e.g. "self_spec:draft_from=ready"
  // beside "self_spec"), and is reported as the entry's text.
  std::vector<std::string> policies = {"on_demand", "lru", "lfu_static",
                                       "overlap"};
  // See the header comment: "none", "" / "own" or a registered drafter.
  std::vector<std::string> drafters = {"own"};
  // See the header comment: "shared" and/or "extra".
  std::vector<std::string> draft_budgets = {"shared"};
  // Baselines of every speculative cell (a policy other than lru that
  // drafts), added to the cells when absent: lru without drafter and lru
  // with that cell's drafter and k, placed before it (spec_summary.h).
  // moeserve_bench turns this on (--spec_baselines); off here so that other
  // callers (the optimiser) run exactly the cells they name.
  bool spec_baselines = false;
  // The external drafter's model (EngineSpec::draft_model_dir).
  std::string draft_model_dir;
  // EngineSpec::num_speculative_tokens for every drafted cell: > 0 fixed, 0
  // adaptive, -1 the policy's own (adaptive for a policy without one).
  int num_speculative_tokens = -1;
  std::vector<double> ratios = {0.25, 0.5};  // Fast tier / all expert bytes.
  // > 0: one fast tier of this many MiB instead of `ratios` (the ratio it
  // is of this model's expert bytes is reported), so checkpoints of one
  // model in different formats compare at the same memory.
  double expert_cache_mb = 0;
  std::vector<int> concurrencies = {1};  // Engine max_num_seqs.
  double link_gbps = 0;                  // 0: no link emulation.
  double link_latency_us = 0;
  double inplace_compute_ratio = 8;  // LinkOptions::inplace_compute_ratio
  std::string slow_tier = "host";    // "host" or "disk".
  // Hybrid execution (EngineSpec::cpu_moe_layers, host_expert_threads), and
  // the fast tier in the backend's memory on the CPU backend too (the
  // hybrid path without a GPU: EngineSpec::fast_tier_in_backend_memory).
  int cpu_moe_layers = 0;
  int host_expert_threads = 0;
  bool fast_tier_in_backend_memory = false;
  // EngineSpec::host_attention: KV cache and attention on the host (on a
  // device fast tier the KV bytes join the expert slots: see `slots`).
  int host_attention = 0;
  // EngineSpec::kv_cache_bytes.
  uint64_t kv_cache_bytes = 256ull << 20;

  std::string policy_config;  // "k=v,..." passed to every policy.
  int num_requests = 8;       // Prompts cycle through a fixed list.
  int max_new_tokens = 48;    // Every request generates exactly this.
  int warmup_tokens = 4;      // Untimed warm-up request per engine.
  // Each (ratio, concurrency) group runs its policies round-robin this many
  // times (fresh engine each time); the run with the median tokens/s of each
  // policy is reported. Interleaving spreads background load evenly.
  int repeats = 1;
  int threads = 0;  // CPU kernel threads (report only; 0 on a GPU backend).
  // A time budget in seconds (0: none). Once it has passed, counted from
  // the start of the first run, no new run starts; the report holds what
  // finished (PolicyReport::complete false). The first run always runs.
  double max_seconds = 0;
  // Called after each (ratio, concurrency) group with the report so far,
  // finished as the final one is (speedups, identical outputs): a caller
  // that prints or saves it keeps the figures of a run cut short.
  std::function<void(const struct PolicyReport&)> on_group_done;
};

// One (ratio, concurrency, policy, drafter) run; figures cover the timed
// workload only.
struct PolicyResult {
  std::string policy;
  std::string drafter_entry;  // As given in PolicyBenchOptions::drafters.
  std::string drafter;        // Resolved (BuiltEngine::spec): "none", "self".
  int num_speculative_tokens = 0;  // Resolved; 0 adaptive (with a drafter).
  // EngineSpec::draft_budget when the drafter has its own pool, else "".
  std::string draft_budget;
  uint64_t draft_bytes = 0;  // BuiltEngine::draft_bytes.
  double ratio = 0;
  int concurrency = 0;
  int slots = 0;  // Fast-tier expert slots.
  int64_t tokens = 0;
  double wall_seconds = 0;
  double tokens_per_s = 0;
  // Over on_demand without drafter in the same (ratio, concurrency); 0 when
  // that cell was not run.
  double speedup_vs_on_demand = 0;
  // Over the same policy without drafter (same ratio, concurrency); 0 when
  // that cell was not run (self_spec: only with drafter entry "off").
  double speedup_vs_no_drafter = 0;
  double tpot_mean_ms = 0;  // Mean over requests of their mean token gap.
  double tpot_p50_ms = 0;   // Over every inter-token gap of every request.
  double tpot_p99_ms = 0;
  double ttft_mean_ms = 0;  // Submit to first token (queueing included).
  // Target acquires only (the draft view counts nothing); inplace: served
  // in place from the slow tier (utility), neither hit nor miss.
  uint64_t hits = 0, hits_loading = 0, misses = 0, inplace = 0;
  // hits / (hits + hits_loading + misses + inplace).
  double hit_rate = 0;
  double hit_loading_share = 0;  // hits_loading / the same.
  double inplace_share = 0;      // inplace / the same.
  // Seconds the in-place experts took (measured on the hybrid path;
  // inplace_compute_ratio x measured on a host fast tier).
  double inplace_seconds = 0;
  // The hybrid path's host compute of one expert, timed at engine start
  // (ExpertCosts::host_seconds_*), in us; 0 without host compute.
  double host_expert_us = 0;
  double host_expert_us_per_row = 0;
  // Belady's MIN on this run's access trace at `slots` (warm start).
  uint64_t trace_accesses = 0;
  uint64_t oracle_hits = 0;
  double oracle_hit_rate = 0;
  uint64_t link_bytes = 0;
  uint64_t link_transfers = 0;
  double link_bytes_per_token = 0;
  double transfers_per_token = 0;  // link_transfers / tokens.
  double link_busy_seconds = 0;
  // link_bytes / link_busy_seconds / 1e9: the rate the link moved experts
  // while busy (the emulated rate when emulation is on); 0: no busy time.
  double expert_copy_gbps = 0;
  double expert_copy_vs_plain = 0;  // Over PolicyReport::copy_probe's rate.
  double stall_seconds = 0;
  double stall_share = 0;                   // stall_seconds / wall_seconds.
  double link_busy_share = 0;               // link_busy_seconds / wall_seconds.
  std::vector<double> repeat_tokens_per_s;  // Every repeat, in run order.
  uint64_t prefetch_loads = 0, prefetch_used = 0, prefetch_wasted = 0;
  uint64_t prefetch_cancelled = 0;  // Queued prefetches withdrawn, no bytes.
  double prefetch_precision = -1;   // prefetch_used / loads; -1: no prefetch.
  // Speculative decoding (engine::SpecStats deltas over the timed part).
  uint64_t drafts = 0;  // Verifications with >= 1 draft token.
  uint64_t draft_tokens = 0, accepted_tokens = 0;
  // [i]: verifications whose draft i + 1 was accepted (SpecStats).
  std::vector<uint64_t> accepted_per_position;
  double acceptance_rate = -1;          // accepted / draft tokens; -1: none.
  double tokens_per_verification = -1;  // 1 + accepted / drafts; -1: none.
  double mean_k = -1;                   // draft tokens / drafts; -1: none.
  double draft_seconds = 0, verify_seconds = 0;
  double draft_share = 0;                     // draft_seconds / wall_seconds.
  double verify_share = 0;                    // verify_seconds / wall_seconds.
  std::vector<std::vector<int32_t>> outputs;  // Per request, for the check.
};

struct PolicyReport {
  // This run: its start (UTC, "2026-11-28T14:03:07Z") and an id made of the
  // start time and the process id ("20261128T140307Z-p12345"), printed on
  // every summary row so rows of two runs cannot be mixed by accident.
  std::string started_utc;
  std::string run_id;
  MachineInfo machine;
  std::string backend;  // Backend::name().
  // Expert slots in device memory filled by device copies (a GPU backend);
  // false: host RAM filled by slow-tier reads (the CPU backend).
  bool fast_tier_on_device = false;
  int threads = 0;
  PolicyBenchOptions options;
  std::string model_name;
  int layers = 0, experts = 0, top_k = 0;
  uint64_t expert_blob_bytes = 0;  // One padded expert (one transfer).
  uint64_t all_expert_bytes = 0;   // Unpadded, all layers.
  double miss_transfer_us = 0;     // latency + blob / link; 0: no emulation.
  double expert_compute_us = 0;    // ExpertFfn, one token, measured here.
  // Hybrid execution in this run (cpu_moe_layers, a device fast tier or
  // --hybrid_on_cpu): the host's memory read bandwidth, measured here.
  bool hybrid = false;
  double host_read_gbps = 0;
  int host_read_threads = 0;
  int expert_compute_samples = 0;     // Distinct experts it cycled over.
  CopyProbe copy_probe;               // Plain pinned copies of one blob.
  std::vector<int> prompt_lengths;    // Tokens per request (BOS included).
  bool synthetic_prompts = false;     // No tokenizer: random ids (prompts.h).
  uint64_t prompt_seed = 0;           // Their seed, when synthetic.
  bool outputs_identical = false;     // Across every run.
  int distinct_generated_tokens = 0;  // Token ids in one run's outputs.
  std::vector<PolicyResult> results;
  // Cells not run, each with why (a shared draft pool larger than the
  // budget).
  std::vector<std::string> skipped;
  // False when PolicyBenchOptions::max_seconds ended the run early (or the
  // report is a progress snapshot); runs_not_started counts the runs of the
  // planned matrix that never began.
  bool complete = true;
  int runs_not_started = 0;
};

absl::StatusOr<PolicyReport> RunPolicyBench(const PolicyBenchOptions& options,
                                            kernels::Backend* backend);

void PrintPolicyReport(const PolicyReport& report, std::FILE* out);
// A cell's drafter and k as the reports print them: "none", "self k=4",
// "int4 k=adaptive" (k 0).
std::string DrafterLabel(const std::string& drafter, int k);
nlohmann::json PolicyReportJson(const PolicyReport& report);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_POLICY_BENCH_H_
