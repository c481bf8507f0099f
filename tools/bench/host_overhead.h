// moeserve_bench --host_overhead (issue 30 item 1): what a decode step costs
// the host, per MoE layer, on a device that does no arithmetic
// (kernels/null_backend.h) wrapped in a counting one
// (kernels/counting_backend.h). Same shapes as the real model, no
// arithmetic: the wall time of a decode step is the host's own work (the
// scheduler, the forward pass's launches and syncs, routing read back, the
// offload policy and residency, the sampler, token delivery), and the
// counts say how many launches, syncs, copies and allocations it made.
//
// For each (policy, expert-cache ratio, batch) cell: a fresh engine
// (engine::BuildEngine, no drafter, the fast tier in the backend's memory
// so misses take the device path: slots from Allocate, copies on copy
// streams, release events; no link emulation and no charge for experts
// computed in place, LinkOptions::inplace_compute_ratio 1); `batch`
// requests of prompt_len synthetic ids submitted together
// (Engine::SubmitAll), greedy, EOS ignored. Runs of 1 + N and 1 + 2N new
// tokens: their difference in counts is N decode steps of `batch`
// sequences (prefill and the first token cancel out). Wall time: from the
// first token to the last of the 1 + 2N run (2N decode steps); CPU time:
// the pair's difference; each the median of `timed_runs` pairs (counts:
// the first pair). Before them one untimed 1 + 2N run grows every
// workspace, so allocations_per_step is what a warm engine allocates.
//
// Routing on the null device is a hash (NullBackend::RouterTopK): uniform
// over the experts and changing every layer, so the caching policies see
// misses at about 1 - ratio of acquires. Every run restarts it, so the
// 1 + N run routes as the first 1 + N tokens of the 1 + 2N run: launches
// and on_demand's copies and misses difference exactly; a caching policy
// starts each run with the previous one's cache, so its copies and misses
// are exact to within that start.
//
// Thread-compatible: one RunHostOverhead at a time.
#ifndef MOESERVE_TOOLS_BENCH_HOST_OVERHEAD_H_
#define MOESERVE_TOOLS_BENCH_HOST_OVERHEAD_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "nlohmann/json.hpp"
#include "tools/bench/generated_model.h"
#include "tools/bench/machine.h"

namespace moeserve::bench {

struct HostOverheadOptions {
  // The model: a directory, or (gen.kind non-empty) a generated
  // random-weight one (generated_model.h): built in memory, or written to
  // gen_dir when that is set (needed by the disk slow tier).
  std::string model_dir;
  GeneratedModelSpec gen;
  std::string gen_dir;
  std::string model_name;  // For the report; default: the directory's name.
  std::vector<std::string> policies = {"on_demand", "lru"};
  std::vector<double> ratios = {0.5};  // Fast tier / all expert bytes.
  std::vector<int> batch_sizes = {1, 16};
  std::string slow_tier = "host";  // "host" or "disk".
  int prompt_len = 16;             // Synthetic ids per request.
  int decode_steps = 32;           // N (see the header comment).
  int timed_runs = 3;              // Run pairs timed; the median is kept.
  // Graph mode (MoeModel's dense segments as Backend::RunGraph regions, as
  // --cuda_graphs runs them on a GPU), counted as a recording backend would
  // count it (CountingBackendOptions::simulate_graphs): the launches a
  // decode step would make with CUDA graphs. The host time still runs every
  // op eagerly on the null device.
  bool graphs = false;
  // Called after each cell with the report so far.
  std::function<void(const struct HostOverheadReport&)> on_row_done;
};

// One (policy, ratio, batch) cell. "Per MoE layer" divides by decode steps
// and by the model's layers (every layer of these models is an MoE layer),
// so the step's work outside the layers (embedding, lm_head, sampling) is
// shared out among them.
struct HostOverheadRow {
  std::string policy;
  double ratio = 0;
  int batch = 0;
  int slots = 0;  // Fast-tier expert slots.
  double launches_per_moe_layer = 0;
  double syncs_per_moe_layer = 0;
  double copies_to_device_per_moe_layer = 0;
  double copies_to_host_per_moe_layer = 0;
  double bytes_to_device_per_step = 0;
  double bytes_to_host_per_step = 0;
  double allocations_per_step = 0;
  double allocated_bytes_per_step = 0;
  // Wall time of a decode step (first to last token of the 1 + 2N run),
  // median over the timed runs, and per layer (/ layers).
  double host_us_per_step = 0;
  double host_us_per_layer = 0;
  std::vector<double> run_us_per_step;  // Every timed run, in order.
  // CPU time (user + system, every thread of the process: the engine's,
  // the link's, the reader's) of a decode step: the 1 + 2N run's less the
  // 1 + N run's, / N; median over the pairs. Less sensitive than the wall
  // time to other processes on the machine; no wake-up latency.
  double host_cpu_us_per_step = 0;
  double host_cpu_us_per_layer = 0;
  std::vector<double> run_cpu_us_per_step;
  // The residency's stall time (compute waiting on the link) per decode
  // step: on the null device the link's own thread handing a slot over.
  double stall_us_per_step = 0;
  // Of the decode steps' target acquires (the residency's statistics).
  double hit_rate = 0;
  double misses_per_moe_layer = 0;
};

struct HostOverheadReport {
  MachineInfo machine;
  std::string backend;  // "null" (the inner backend's name).
  HostOverheadOptions options;
  std::string model_name;
  int layers = 0, experts = 0, top_k = 0;
  uint64_t expert_blob_bytes = 0;
  std::vector<HostOverheadRow> rows;
};

// Loads (or generates) the model of `options` and runs every cell.
absl::StatusOr<HostOverheadReport> RunHostOverhead(
    const HostOverheadOptions& options);
// The same on weights already loaded (with packed experts for the host slow
// tier); options' model fields only name the report.
absl::StatusOr<HostOverheadReport> RunHostOverhead(
    const HostOverheadOptions& options, const engine::ModelWeights& weights);

// "on_demand r=0.50 batch 16: 23.0 launches, ..." for one row.
void PrintHostOverheadRow(const HostOverheadRow& row, std::FILE* out);
// The header lines and every row.
void PrintHostOverheadReport(const HostOverheadReport& report, std::FILE* out);
// {"mode": "host_overhead", "machine": ..., "host_overhead": [rows]}.
nlohmann::json HostOverheadJson(const HostOverheadReport& report);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_HOST_OVERHEAD_H_
