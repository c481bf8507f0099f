// The policy bench's closing summary (issue 33): every speculative cell next
// to the two baselines the papers compare against, measured in the same run.
//
// A speculative cell is one whose policy is not `lru` and that drafted
// (drafter != "none"). Its baselines are the cells of the same (ratio,
// concurrency) group, so of the same run, model and link:
//   - `lru` without a drafter (plain expert caching: Mixtral-Offloading's
//     cache, seed 003's and 001's offloading baseline);
//   - `lru` with the same drafter, the same k and the same draft budget (the
//     papers' speculative baselines decode with the same drafter: seed 003's
//     Mixtral-Offloading / MoE-Infinity / AdapMoE with SP-MoE's drafter,
//     seed 001's comparison at one int4 draft), so the ratio is the policy's
//     own contribution, not the speculation's.
// PolicyBenchOptions::spec_baselines makes the bench run both; a baseline
// that did not run (turned off, cut short by --max_seconds, skipped) leaves
// its ratios undefined (printed n/a, JSON null), never taken from another
// run. Every row carries the run's id and start time, so rows pasted from
// two runs cannot pass for one.
//
// Pure functions over a finished PolicyReport; thread-compatible.
#ifndef MOESERVE_TOOLS_BENCH_SPEC_SUMMARY_H_
#define MOESERVE_TOOLS_BENCH_SPEC_SUMMARY_H_

#include <cstdio>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace moeserve::bench {

struct PolicyReport;
struct PolicyResult;

// One speculative cell and its two baselines. Ratios: tok/s of the policy
// over the baseline's (> 1: the policy is faster), and the baseline's mean
// TPOT over the policy's (> 1: the policy's tokens come sooner); 0 where
// the baseline did not run.
struct SpecSummaryRow {
  const PolicyResult* policy = nullptr;
  const PolicyResult* lru = nullptr;          // lru, no drafter; or null.
  const PolicyResult* lru_drafter = nullptr;  // lru + same drafter; or null.
  double speedup_vs_lru = 0;
  double speedup_vs_lru_drafter = 0;
  double tpot_speedup_vs_lru = 0;
  double tpot_speedup_vs_lru_drafter = 0;
};

// The rows of `report`, in result order. Pointers into report.results.
std::vector<SpecSummaryRow> SpecSummaryRows(const PolicyReport& report);

// The cell that runs `policy`'s speculation on lru: the same drafter, k and
// draft budget. Exposed for the bench's cell list and the tests.
bool IsLruWithSameDrafter(const PolicyResult& candidate,
                          const PolicyResult& policy);

// The summary table (markdown), headed by the run id and time, model and
// link; nothing when the report has no speculative cell.
void PrintSpecSummary(const PolicyReport& report, std::FILE* out);

// The same rows as JSON objects (figures of all three cells, the ratios,
// null where undefined, and run_id on every row).
nlohmann::json SpecSummaryJson(const PolicyReport& report);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_SPEC_SUMMARY_H_
