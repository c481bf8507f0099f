// The benchmark's output: a text table and the same figures as JSON.
// Thread-compatible value types and pure functions.
#ifndef MOESERVE_TOOLS_BENCH_REPORT_H_
#define MOESERVE_TOOLS_BENCH_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <vector>

#include "nlohmann/json.hpp"
#include "tools/bench/machine.h"
#include "tools/bench/model_bench.h"

namespace moeserve::bench {

struct RunReport {
  MachineInfo machine;
  int threads = 0;
  BenchOptions options;
  uint64_t bandwidth_bytes = 0;  // Size of the bandwidth probe's buffer.
  double bandwidth_gbps = 0;     // Measured read roofline.
  std::vector<ModelReport> models;
};

// Machine, roofline, then one row per (model, phase, batch) with tokens/s,
// weight MB/token, GB/s, fraction of the roofline and the tokens/s the
// roofline would allow at that many bytes per token.
void PrintReport(const RunReport& report, std::FILE* out);

// Every figure of PrintReport, plus the model shapes and options. Field
// names: see the README.
nlohmann::json ReportJson(const RunReport& report);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_REPORT_H_
