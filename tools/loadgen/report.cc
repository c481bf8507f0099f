#include "tools/loadgen/report.h"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace moeserve::loadgen {

MachineInfo DescribeMachine() {
  MachineInfo info;
  info.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        info.cpu_model = std::string(absl::StripAsciiWhitespace(
            absl::string_view(line).substr(colon + 1)));
      }
      break;
    }
  }
  if (info.cpu_model.empty()) info.cpu_model = "unknown CPU";
  return info;
}

std::string DescribeServer(const moeserve::v1::ListModelsResponse& models) {
  std::string out;
  for (const auto& m : models.models()) {
    absl::StrAppendFormat(
        &out, "model %s (%s, %u layers x %u experts, top-%u, hidden %u, %s)\n",
        m.name(), m.architecture(), m.num_layers(), m.num_experts(),
        m.num_experts_per_tok(), m.hidden_size(), m.dtype());
    for (const auto& e : m.engines()) {
      absl::StrAppendFormat(
          &out,
          "  engine %s: policy=%s backend=%s slow_tier=%s drafter=%s "
          "expert_cache_bytes=%u ab_weight=%g\n",
          e.name(), e.policy(), e.backend(), e.slow_tier(), e.drafter(),
          e.expert_cache_bytes(), e.ab_weight());
    }
  }
  return out;
}

ThroughputRatio ComputeRatio(const std::vector<LevelSummary>& levels) {
  ThroughputRatio r;
  if (levels.size() < 2) return r;
  const LevelSummary* low = &levels[0];
  const LevelSummary* high = &levels[0];
  for (const LevelSummary& l : levels) {
    if (l.concurrency < low->concurrency) low = &l;
    if (l.concurrency > high->concurrency) high = &l;
  }
  r.low_concurrency = low->concurrency;
  r.high_concurrency = high->concurrency;
  if (low->tokens_per_s > 0) r.ratio = high->tokens_per_s / low->tokens_per_s;
  return r;
}

Sweep MedianSweep(const std::vector<Sweep>& sweeps) {
  Sweep out;
  if (sweeps.empty()) return out;
  for (size_t i = 0; i < sweeps.front().size(); ++i) {
    std::vector<LevelSummary> same_level;
    for (const Sweep& s : sweeps) same_level.push_back(s[i]);
    out.push_back(MedianLevel(same_level));
  }
  return out;
}

ThroughputRatio MedianRatio(const std::vector<Sweep>& sweeps) {
  ThroughputRatio r;
  if (sweeps.empty()) return r;
  std::vector<double> ratios;
  for (const Sweep& s : sweeps) {
    r = ComputeRatio(s);
    ratios.push_back(r.ratio);
  }
  r.ratio = Median(ratios);
  return r;
}

std::string FormatTable(const std::vector<LevelSummary>& levels) {
  std::string out =
      absl::StrFormat("%5s %5s %5s %8s %7s %9s %9s %9s %9s %9s  %s\n", "conc",
                      "reqs", "ok", "wall_s", "tokens", "tok/s", "ttft_p50",
                      "ttft_p99", "tpot_p50", "tpot_p99", "errors");
  for (const LevelSummary& l : levels) {
    std::vector<std::string> errors;
    for (const auto& [code, count] : l.errors) {
      errors.push_back(absl::StrCat(code, "=", count));
    }
    if (l.time_capped) errors.push_back("time-capped");
    absl::StrAppendFormat(
        &out,
        "%5d %5d %5d %8.2f %7u %9.1f %7.1fms %7.1fms %7.2fms %7.2fms  %s\n",
        l.concurrency, l.requests_issued, l.requests_ok, l.wall_s, l.tokens,
        l.tokens_per_s, l.ttft_p50_ms, l.ttft_p99_ms, l.tpot_p50_ms,
        l.tpot_p99_ms, errors.empty() ? "-" : absl::StrJoin(errors, ","));
  }
  return out;
}

std::string ToJson(const MachineInfo& machine, const std::string& target,
                   uint32_t max_new_tokens, bool ignore_eos,
                   uint32_t prompt_tokens,
                   const moeserve::v1::ListModelsResponse& models,
                   const std::vector<Sweep>& sweeps) {
  auto levels_json = [](const Sweep& levels) {
    nlohmann::json out = nlohmann::json::array();
    for (const LevelSummary& l : levels) {
      out.push_back({{"concurrency", l.concurrency},
                     {"requests_planned", l.requests_planned},
                     {"requests_issued", l.requests_issued},
                     {"requests_ok", l.requests_ok},
                     {"time_capped", l.time_capped},
                     {"wall_s", l.wall_s},
                     {"tokens", l.tokens},
                     {"tokens_per_s", l.tokens_per_s},
                     {"ttft_p50_ms", l.ttft_p50_ms},
                     {"ttft_p99_ms", l.ttft_p99_ms},
                     {"tpot_p50_ms", l.tpot_p50_ms},
                     {"tpot_p99_ms", l.tpot_p99_ms},
                     {"errors", l.errors}});
    }
    return out;
  };
  nlohmann::json j;
  j["machine"] = {{"cpu_model", machine.cpu_model}, {"cores", machine.cores}};
  j["target"] = target;
  j["max_new_tokens"] = max_new_tokens;
  j["ignore_eos"] = ignore_eos;
  j["prompt_tokens"] = prompt_tokens;
  j["server"] = nlohmann::json::array();
  for (const auto& m : models.models()) {
    nlohmann::json engines = nlohmann::json::array();
    for (const auto& e : m.engines()) {
      engines.push_back({{"name", e.name()},
                         {"policy", e.policy()},
                         {"backend", e.backend()},
                         {"slow_tier", e.slow_tier()},
                         {"drafter", e.drafter()},
                         {"expert_cache_bytes", e.expert_cache_bytes()},
                         {"ab_weight", e.ab_weight()}});
    }
    j["server"].push_back({{"model", m.name()},
                           {"architecture", m.architecture()},
                           {"engines", engines}});
  }
  j["levels"] = levels_json(MedianSweep(sweeps));
  j["sweeps"] = nlohmann::json::array();
  std::vector<double> per_sweep;
  for (const Sweep& s : sweeps) {
    j["sweeps"].push_back(levels_json(s));
    per_sweep.push_back(ComputeRatio(s).ratio);
  }
  const ThroughputRatio r = MedianRatio(sweeps);
  j["throughput_ratio"] = {{"high_concurrency", r.high_concurrency},
                           {"low_concurrency", r.low_concurrency},
                           {"ratio", r.ratio},
                           {"per_sweep", per_sweep}};
  return j.dump(2) + "\n";
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  out << contents;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace moeserve::loadgen
