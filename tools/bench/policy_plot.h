// The policy comparison as an image: `moeserve_bench --policies=... --plot=F`.
//
// One column of panels per fast-tier ratio; the top row is tokens/s, the
// bottom row link KiB per token; in each panel a group of bars per policy
// (and drafter, when one ran), one bar per concurrency. Rendered by gnuplot
// (Debian's gnuplot-nox, PNG through its cairo terminal): this code writes
// the data and the script and runs it; it draws nothing itself.
#ifndef MOESERVE_TOOLS_BENCH_POLICY_PLOT_H_
#define MOESERVE_TOOLS_BENCH_POLICY_PLOT_H_

#include <string>

#include "absl/status/status.h"
#include "tools/bench/policy_bench.h"

namespace moeserve::bench {

// gnuplot data: for each ratio (in report order) two blocks, tokens/s then
// link KiB/token, separated by two blank lines (gnuplot's `index`); a row per
// policy label, a column per concurrency, "-" where a cell did not run.
std::string PolicyPlotData(const PolicyReport& report);

// The gnuplot script that renders `data_path` into `png_path`.
std::string PolicyPlotScript(const PolicyReport& report,
                             const std::string& data_path,
                             const std::string& png_path);

// Writes the data and script beside `png_path` (as png_path + ".dat" and
// ".gp", kept so the figure can be re-rendered or restyled) and runs
// `gnuplot`. FAILED_PRECONDITION when gnuplot is not installed; INTERNAL
// with gnuplot's exit status when it fails.
absl::Status WritePolicyPlot(const PolicyReport& report,
                             const std::string& png_path);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_POLICY_PLOT_H_
