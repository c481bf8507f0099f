#include "tools/bench/policy_plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

extern char** environ;

namespace moeserve::bench {
namespace {

// What one bar group is called: the policy, its drafter when one ran, and
// the draft budget when the drafter has its own pool.
std::string Label(const PolicyResult& r) {
  std::string label = r.policy;
  if (!r.drafter.empty() && r.drafter != "none") {
    absl::StrAppend(&label, "+", r.drafter);
  }
  if (!r.draft_budget.empty())
    absl::StrAppend(&label, " (", r.draft_budget, ")");
  return label;
}

// Text inside gnuplot's double quotes: no quote or backslash can end it.
std::string Quoted(const std::string& s) {
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\\", "/"}, {"\"", "'"}}),
                      "\"");
}

struct Axes {
  std::vector<double> ratios;       // In report order.
  std::vector<int> concurrency;     // Ascending.
  std::vector<std::string> labels;  // In report order.
};

Axes AxesOf(const PolicyReport& report) {
  Axes a;
  std::set<int> conc;
  for (const PolicyResult& r : report.results) {
    if (std::find(a.ratios.begin(), a.ratios.end(), r.ratio) == a.ratios.end())
      a.ratios.push_back(r.ratio);
    const std::string label = Label(r);
    if (std::find(a.labels.begin(), a.labels.end(), label) == a.labels.end())
      a.labels.push_back(label);
    conc.insert(r.concurrency);
  }
  a.concurrency.assign(conc.begin(), conc.end());
  return a;
}

}  // namespace

std::string PolicyPlotData(const PolicyReport& report) {
  const Axes axes = AxesOf(report);
  // (ratio, label, concurrency) -> the first result of that cell.
  std::map<std::tuple<double, std::string, int>, const PolicyResult*> cells;
  for (const PolicyResult& r : report.results) {
    cells.try_emplace({r.ratio, Label(r), r.concurrency}, &r);
  }
  std::string out;
  for (double ratio : axes.ratios) {
    for (int metric = 0; metric < 2; ++metric) {
      absl::StrAppend(&out, "# ratio ", ratio,
                      metric == 0 ? ": tokens/s" : ": link KiB/token",
                      "; columns: label, then concurrency ",
                      absl::StrJoin(axes.concurrency, " "), "\n");
      for (const std::string& label : axes.labels) {
        absl::StrAppend(&out, Quoted(label));
        for (int c : axes.concurrency) {
          auto it = cells.find({ratio, label, c});
          if (it == cells.end()) {
            absl::StrAppend(&out, " -");
            continue;
          }
          const PolicyResult& r = *it->second;
          absl::StrAppend(
              &out, " ",
              absl::StrFormat("%.3f", metric == 0
                                          ? r.tokens_per_s
                                          : r.link_bytes_per_token / 1024.0));
        }
        absl::StrAppend(&out, "\n");
      }
      absl::StrAppend(&out, "\n\n");
    }
  }
  return out;
}

std::string PolicyPlotScript(const PolicyReport& report,
                             const std::string& data_path,
                             const std::string& png_path) {
  const Axes axes = AxesOf(report);
  const int columns = std::max<int>(1, axes.ratios.size());
  const int width = std::max(
      640, columns * (180 + 42 * static_cast<int>(axes.labels.size())));
  std::string link = "link at host memory speed";
  if (report.options.link_gbps > 0) {
    link = absl::StrFormat("emulated link %.3g GB/s + %.3g us",
                           report.options.link_gbps,
                           report.options.link_latency_us);
  } else if (report.fast_tier_on_device) {
    link = "device copies";
  }
  std::string s;
  absl::StrAppend(
      &s, "set terminal pngcairo size ", width, ",760 font \",9\" noenhanced\n",
      "set output ", Quoted(png_path), "\n", "set datafile missing \"-\"\n",
      "set style data histograms\n", "set style histogram clustered gap 1\n",
      "set style fill solid 0.85 border -1\n", "set boxwidth 0.9\n",
      "set grid ytics\n", "set yrange [0:*]\n",
      "set xtics rotate by -40 scale 0 font \",8\"\n",
      "set key above horizontal font \",8\"\n");
  absl::StrAppend(
      &s, "set multiplot layout 2,", columns, " title ",
      Quoted(absl::StrCat("moeserve_bench: ", report.model_name, " on ",
                          report.backend, ", ", link, "; ",
                          report.options.num_requests, " requests x ",
                          report.options.max_new_tokens, " tokens")),
      "\n");
  for (int metric = 0; metric < 2; ++metric) {
    for (size_t i = 0; i < axes.ratios.size(); ++i) {
      const int block = static_cast<int>(2 * i) + metric;
      absl::StrAppend(&s, "set title ",
                      Quoted(absl::StrFormat("fast tier %.2f of all experts",
                                             axes.ratios[i])),
                      "\n", "set ylabel ",
                      Quoted(metric == 0 ? "tokens/s" : "link KiB / token"),
                      "\n");
      std::vector<std::string> series;
      for (size_t c = 0; c < axes.concurrency.size(); ++c) {
        series.push_back(absl::StrCat(
            c == 0 ? Quoted(data_path) : "''", " index ", block, " using ",
            c + 2, c == 0 ? ":xtic(1)" : "", " title ",
            Quoted(absl::StrCat("concurrency ", axes.concurrency[c]))));
      }
      absl::StrAppend(&s, "plot ", absl::StrJoin(series, ", "), "\n");
    }
  }
  absl::StrAppend(&s, "unset multiplot\n");
  return s;
}

absl::Status WritePolicyPlot(const PolicyReport& report,
                             const std::string& png_path) {
  if (report.results.empty()) {
    return absl::FailedPreconditionError("--plot: no policy results to plot");
  }
  const std::string data_path = png_path + ".dat";
  const std::string script_path = png_path + ".gp";
  for (const auto& [path, text] :
       {std::pair{data_path, PolicyPlotData(report)},
        std::pair{script_path,
                  PolicyPlotScript(report, data_path, png_path)}}) {
    std::ofstream out(path);
    out << text;
    if (!out.good()) {
      return absl::InternalError(absl::StrCat("--plot: cannot write ", path));
    }
  }
  pid_t pid = 0;
  char gnuplot[] = "gnuplot";
  std::string script = script_path;
  char* argv[] = {gnuplot, script.data(), nullptr};
  const int rc = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv, environ);
  if (rc == ENOENT) {
    return absl::FailedPreconditionError(
        "--plot needs gnuplot (Debian: apt-get install gnuplot-nox); the data "
        "and script are in " +
        data_path + " and " + script_path);
  }
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("--plot: cannot run gnuplot: ", std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("--plot: waitpid: ", std::strerror(errno)));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("--plot: gnuplot ", script_path,
                                            " failed (status ", status, ")"));
  }
  return absl::OkStatus();
}

}  // namespace moeserve::bench
