// Output of moeserve_loadgen: the machine and server labels, the per-level
// table, the throughput ratio (highest / lowest concurrency, same run) and
// the JSON report.
#ifndef MOESERVE_TOOLS_LOADGEN_REPORT_H_
#define MOESERVE_TOOLS_LOADGEN_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/moeserve.pb.h"
#include "tools/loadgen/stats.h"

namespace moeserve::loadgen {

// Where the figures were measured.
struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  int cores = 0;          // online logical CPUs
};

MachineInfo DescribeMachine();

// One line per model and engine, e.g.
// "model demo (mixtral, 4 layers x 8 experts, top-2) engine lru: lru ...".
std::string DescribeServer(const moeserve::v1::ListModelsResponse& models);

// The ratio throughput(highest concurrency) / throughput(lowest); 0 when
// fewer than two levels or the lowest level produced nothing.
struct ThroughputRatio {
  int high_concurrency = 0;
  int low_concurrency = 0;
  double ratio = 0;
};
ThroughputRatio ComputeRatio(const std::vector<LevelSummary>& levels);

// One sweep = every level once, in order; a run makes --repeats sweeps.
using Sweep = std::vector<LevelSummary>;

// Field-wise median of each level over the sweeps (see MedianLevel).
Sweep MedianSweep(const std::vector<Sweep>& sweeps);

// The median over sweeps of each sweep's own ratio (each ratio compares
// levels measured minutes apart in the same run, never across runs).
ThroughputRatio MedianRatio(const std::vector<Sweep>& sweeps);

// The fixed-width table printed after the run.
std::string FormatTable(const std::vector<LevelSummary>& levels);

// Everything above as one JSON document (pretty-printed): "levels" and
// "throughput_ratio" are the medians; "sweeps" holds every sweep.
// `prompt_tokens`: the length of the token-id prompts (0: the text prompts).
std::string ToJson(const MachineInfo& machine, const std::string& target,
                   uint32_t max_new_tokens, bool ignore_eos,
                   uint32_t prompt_tokens,
                   const moeserve::v1::ListModelsResponse& models,
                   const std::vector<Sweep>& sweeps);

// Writes `contents` to `path`.
absl::Status WriteFile(const std::string& path, const std::string& contents);

}  // namespace moeserve::loadgen

#endif  // MOESERVE_TOOLS_LOADGEN_REPORT_H_
