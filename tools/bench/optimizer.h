// moeserve_bench --optimize: SpecMoEOff's hyperparameter optimizer (seeds
// 002 §5.3) for the `throughput` policy. For one model, fast-tier budget
// (expert-cache ratio) and link (emulated GB/s and latency) it
//   1. profiles the per-op costs on the CPU backend (§5.3 "profiling-based
//      estimator"):
//      - the target's forward pass over N tokens at mean attended context s
//        with every expert resident (compute only), on a grid of batch
//        sizes x verify-chunk lengths x contexts plus two prefills, fitted
//        by non-negative least squares to
//          t(N, s) = a + b N + c N s + d L E Cov(N),
//        Cov(N) = 1 - (1 - K/E)^N the expected share of a layer's experts N
//        tokens touch (the d term: each touched expert's weights are read);
//      - the draft model's forward (the external drafter) over B tokens,
//        fitted to a + b N + c N s;
//      - from a short speculative run of the policy bench (concurrency 1,
//        k = max_k, the workload's requests with profile_new_tokens tokens
//        each): the link seconds per expert
//        transfer (link busy seconds / transfers: the emulated link as the
//        residency drives it), the acceptance per position (p_i =
//        accepted_i / accepted_{i-1}) and a per-sequence per-step overhead
//        (wall time the forward and draft models do not explain: sampling,
//        verification, scheduling; calibrated on that run only);
//   2. simulates the compute / link pipeline of a verification step (the
//      seed's DAG, §4.2: layer l + 1's experts load while layer l computes;
//      PipelineSeconds) and estimates the workload's tokens/s for every
//      (max_num_seqs b, k) of the grid (EstimateWorkload), and recommends
//      the best (§5.3 "problem solving": vary the variables, keep the
//      largest throughput);
//   3. runs the policy bench at the recommended point and a few others and
//      reports estimated vs measured tokens/s with the relative error.
// Deviations from the seed: b is searched (the seed fixes it to the
// largest that fits in memory; here memory is no constraint at demo sizes,
// and the measured batches are small); no micro-batches; the acceptance
// comes from a run on the bench's own prompts, not an offline dataset.
//
// CPU backend only (the forward profile reads experts from host memory).
// Thread-compatible: one RunOptimizer at a time.
#ifndef MOESERVE_TOOLS_BENCH_OPTIMIZER_H_
#define MOESERVE_TOOLS_BENCH_OPTIMIZER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"

namespace moeserve::bench {

struct OptimizerOptions {
  std::string model_dir;
  std::string draft_model_dir;  // the external drafter's model
  std::string policy = "throughput";
  double ratio = 0.25;  // fast tier / all expert bytes
  double link_gbps = 0;
  double link_latency_us = 0;
  std::string slow_tier = "host";
  std::vector<int> batches = {1, 2, 4, 8};  // max_num_seqs candidates
  int max_k = 6;                            // k in [0, max_k]
  // The workload estimated and measured (as the policy bench's).
  int num_requests = 8;
  int max_new_tokens = 48;
  int warmup_tokens = 4;
  int profile_new_tokens = 24;  // per request of the short speculative run
  int forward_repeats = 3;      // best of, per profiled forward shape
  int threads = 0;              // report only
};

// y ~ sum coef[i] * x[i], least squares with coef >= 0 (an active set:
// negative coefficients are dropped and the rest refitted).
std::vector<double> FitNonNegative(const std::vector<std::vector<double>>& x,
                                   const std::vector<double>& y);

// 1 - (1 - top_k / experts)^tokens.
double Coverage(int experts, int top_k, double tokens);
// The share of touched experts already resident: 1 when slots >= layers *
// experts, else max(0, slots - experts) / (layers * experts) (as the
// throughput policy's ResidentShare).
double ResidentShareOf(int layers, int experts, int slots);
// The seed's pipeline as a DAG walked in topological order: layer l's load
// starts when layer l - 1's load is done and layer l - 1's compute has
// started (the policy streams l while l - 1 computes; layer 0 at the step's
// start); layer l computes when its load and layer l - 1's compute are
// done. Returns the last compute's end.
double PipelineSeconds(int layers, double compute_per_layer,
                       double link_per_layer);
// 1 + sum_{i<=k} prod_{j<=i} p_j.
double ExpectedTokens(const std::vector<double>& acceptance, int k);

struct CostModel {
  int layers = 0, experts = 0, top_k = 0, slots = 0;
  std::vector<double> target;  // a, b, c, d (see the header comment)
  std::vector<double> draft;   // a, b, c
  double link_seconds_per_expert = 0;
  double overhead_seconds_per_seq_step = 0;
  std::vector<double> acceptance;  // per position
  // Seconds of one forward over n tokens at mean attended context s.
  double Target(double n, double s) const;
  double Draft(double n, double s) const;
  double LinkPerLayer(double n) const;
};

struct Workload {
  std::vector<int> prompt_lengths;  // one per request
  int max_new_tokens = 0;
};

struct WorkloadEstimate {
  int batch = 0, k = 0;
  double step_seconds = 0;       // one decode step of a full batch
  double draft_seconds = 0;      // its drafting
  double verify_seconds = 0;     // its pipeline
  double link_per_layer = 0;     // its x
  double compute_per_layer = 0;  // its c
  double tokens_per_step = 0;    // per sequence, E[tokens](k)
  double seq_steps = 0;          // decode steps x sequences, whole workload
  double seconds = 0;            // the whole workload
  double tokens_per_s = 0;
};

// The workload run with max_num_seqs = batch and k drafts per step: the
// requests in waves of `batch` (all submitted at once, equal lengths); a
// wave = one prefill forward (and one draft prefill when k > 0), one plain
// decode step (the first token after a prefill is never speculative),
// then (max_new_tokens - 2) / E[tokens](k) steps at the wave's mean
// context.
WorkloadEstimate EstimateWorkload(const CostModel& m, const Workload& w,
                                  int batch, int k);

struct ForwardSample {
  std::string model;  // "target" or "draft"
  int batch = 0, chunk = 0;
  int64_t context = 0;  // start position
  double seconds = 0, fitted = 0;
};

struct OptimizerCheck {
  int batch = 0, k = 0;
  bool recommended = false;
  double estimated_tokens_per_s = 0;
  double measured_tokens_per_s = 0;
  double relative_error = 0;  // (estimated - measured) / measured
  // The same estimate without the calibrated per-step overhead.
  double estimated_no_overhead = 0;
  double measured_mean_k = -1;
  double measured_acceptance = -1;
};

struct OptimizerReport {
  OptimizerOptions options;
  std::string model_name;
  int layers = 0, experts = 0, top_k = 0, slots = 0;
  uint64_t expert_blob_bytes = 0;
  double emulated_seconds_per_expert = 0;  // latency + blob / gbps; 0: off
  CostModel model;
  Workload workload;
  std::vector<ForwardSample> samples;
  double profile_run_tokens_per_s = 0;
  std::vector<WorkloadEstimate> grid;
  WorkloadEstimate best;
  std::vector<OptimizerCheck> checks;
  double mean_abs_relative_error = 0;
  bool outputs_identical = true;  // across every measured run
};

absl::StatusOr<OptimizerReport> RunOptimizer(const OptimizerOptions& options,
                                             kernels::Backend* backend);
void PrintOptimizerReport(const OptimizerReport& report, std::FILE* out);
nlohmann::json OptimizerReportJson(const OptimizerReport& report);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_OPTIMIZER_H_
