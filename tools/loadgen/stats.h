// Per-request measurements and their per-level summary (throughput,
// TTFT/TPOT percentiles, errors by gRPC status code).
#ifndef MOESERVE_TOOLS_LOADGEN_STATS_H_
#define MOESERVE_TOOLS_LOADGEN_STATS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moeserve::loadgen {

// One Generate call as the client saw it.
struct RequestSample {
  bool ok = false;
  std::string status_code;  // "OK", "UNAVAILABLE", ... (grpc::StatusCode)
  uint32_t tokens = 0;      // generated tokens received
  double ttft_s = -1;       // call start -> first message with tokens
  double tpot_s = -1;       // (t_last - t_first) / (tokens - 1); -1 if < 2
};

// What one concurrency level measured.
struct LevelSummary {
  int concurrency = 0;
  int requests_planned = 0;
  int requests_issued = 0;
  int requests_ok = 0;
  bool time_capped = false;  // stopped issuing at --max_seconds_per_level
  double wall_s = 0;         // level start -> last request done
  uint64_t tokens = 0;       // tokens of successful requests
  double tokens_per_s = 0;   // tokens / wall_s
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0;
  std::map<std::string, int> errors;  // status code name -> count
};

// Nearest-rank percentile (p in [0, 100]) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double p);

// Folds the samples of one level into its summary.
LevelSummary Summarize(int concurrency, int requests_planned, bool time_capped,
                       double wall_s,
                       const std::vector<RequestSample>& samples);

// Field-wise median of the same level measured in several repeats (counts
// are summed, errors merged); `repeats` must be non-empty.
LevelSummary MedianLevel(const std::vector<LevelSummary>& repeats);

// Median of `values` (mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> values);

}  // namespace moeserve::loadgen

#endif  // MOESERVE_TOOLS_LOADGEN_STATS_H_
