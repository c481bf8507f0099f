#include "tools/bench/spec_summary.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/bench/policy_bench.h"

namespace moeserve::bench {
namespace {

bool SameGroup(const PolicyResult& a, const PolicyResult& b) {
  return a.ratio == b.ratio && a.concurrency == b.concurrency;
}

// a / b, or 0 when either is not positive (a cell that did not run).
double Ratio(double a, double b) { return a > 0 && b > 0 ? a / b : 0; }

std::string Speedup(double v) {
  return v > 0 ? absl::StrFormat("%.2fx", v) : "n/a";
}

std::string TokS(const PolicyResult* r) {
  return r != nullptr ? absl::StrFormat("%.1f", r->tokens_per_s) : "n/a";
}

std::string Tpot(const PolicyResult* r) {
  return r != nullptr ? absl::StrFormat("%.2f", r->tpot_mean_ms) : "n/a";
}

// "self k=4", "int4 k=adaptive shared".
std::string DrafterOf(const PolicyResult& r) {
  std::string s = DrafterLabel(r.drafter, r.num_speculative_tokens);
  if (!r.draft_budget.empty()) absl::StrAppend(&s, " ", r.draft_budget);
  return s;
}

// "2 GB/s + 10 us" or "none (memory speed)".
std::string LinkOf(const PolicyReport& rep) {
  const PolicyBenchOptions& o = rep.options;
  return o.link_gbps > 0 ? absl::StrFormat("%.3g GB/s + %.3g us", o.link_gbps,
                                           o.link_latency_us)
                         : std::string("none (memory speed)");
}

nlohmann::json CellJson(const PolicyResult* r) {
  if (r == nullptr) return nullptr;
  return {{"policy", r->policy},
          {"drafter", r->drafter},
          {"num_speculative_tokens", r->num_speculative_tokens},
          {"draft_budget", r->draft_budget},
          {"tokens_per_s", r->tokens_per_s},
          {"tpot_mean_ms", r->tpot_mean_ms},
          {"tpot_p50_ms", r->tpot_p50_ms},
          {"tpot_p99_ms", r->tpot_p99_ms},
          {"hit_rate", r->hit_rate},
          {"link_bytes_per_token", r->link_bytes_per_token},
          {"repeat_tokens_per_s", r->repeat_tokens_per_s}};
}

nlohmann::json OrNull(double v) {
  return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

bool IsLruWithSameDrafter(const PolicyResult& candidate,
                          const PolicyResult& policy) {
  return candidate.policy == "lru" && candidate.drafter == policy.drafter &&
         candidate.num_speculative_tokens == policy.num_speculative_tokens &&
         candidate.draft_budget == policy.draft_budget &&
         SameGroup(candidate, policy);
}

std::vector<SpecSummaryRow> SpecSummaryRows(const PolicyReport& report) {
  std::vector<SpecSummaryRow> rows;
  for (const PolicyResult& p : report.results) {
    if (p.policy == "lru" || p.drafter == "none") continue;
    SpecSummaryRow row{.policy = &p};
    for (const PolicyResult& c : report.results) {
      if (c.policy == "lru" && c.drafter == "none" && SameGroup(c, p)) {
        row.lru = &c;
      }
      if (IsLruWithSameDrafter(c, p)) row.lru_drafter = &c;
    }
    if (row.lru != nullptr) {
      row.speedup_vs_lru = Ratio(p.tokens_per_s, row.lru->tokens_per_s);
      row.tpot_speedup_vs_lru = Ratio(row.lru->tpot_mean_ms, p.tpot_mean_ms);
    }
    if (row.lru_drafter != nullptr) {
      row.speedup_vs_lru_drafter =
          Ratio(p.tokens_per_s, row.lru_drafter->tokens_per_s);
      row.tpot_speedup_vs_lru_drafter =
          Ratio(row.lru_drafter->tpot_mean_ms, p.tpot_mean_ms);
    }
    rows.push_back(row);
  }
  return rows;
}

void PrintSpecSummary(const PolicyReport& rep, std::FILE* out) {
  const std::vector<SpecSummaryRow> rows = SpecSummaryRows(rep);
  if (rows.empty()) return;
  std::fprintf(
      out,
      "\nsummary: speculative policies vs lru and lru + the same drafter, "
      "all cells of THIS run (run %s, started %s; model %s; link %s; "
      "backend %s; median of %d repeats). x lru = policy tok/s / lru tok/s; "
      "TPOT = mean over requests of (last token - first token) / (tokens - "
      "1), a verification's tokens spread over its time; TPOT gain = "
      "baseline TPOT / policy TPOT. n/a: that baseline did not run in this "
      "run%s\n\n",
      rep.run_id.c_str(), rep.started_utc.c_str(), rep.model_name.c_str(),
      LinkOf(rep).c_str(), rep.backend.c_str(), rep.options.repeats,
      rep.options.spec_baselines ? "" : " (--spec_baselines=false)");
  std::fprintf(out,
               "| run | model | link | ratio | conc | policy | drafter | "
               "tok/s | TPOT ms | lru tok/s | lru TPOT | x lru | TPOT gain "
               "vs lru | lru+drafter tok/s | lru+drafter TPOT | x "
               "lru+drafter | TPOT gain vs lru+drafter |\n");
  std::fprintf(out,
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
               "---|---|\n");
  for (const SpecSummaryRow& row : rows) {
    const PolicyResult& p = *row.policy;
    std::fprintf(
        out,
        "| %s | %s | %s | %.2f | %d | %s | %s | %.1f | %.2f | %s | %s | %s "
        "| %s | %s | %s | %s | %s |\n",
        rep.run_id.c_str(), rep.model_name.c_str(), LinkOf(rep).c_str(),
        p.ratio, p.concurrency, p.policy.c_str(), DrafterOf(p).c_str(),
        p.tokens_per_s, p.tpot_mean_ms, TokS(row.lru).c_str(),
        Tpot(row.lru).c_str(), Speedup(row.speedup_vs_lru).c_str(),
        Speedup(row.tpot_speedup_vs_lru).c_str(), TokS(row.lru_drafter).c_str(),
        Tpot(row.lru_drafter).c_str(),
        Speedup(row.speedup_vs_lru_drafter).c_str(),
        Speedup(row.tpot_speedup_vs_lru_drafter).c_str());
  }
}

nlohmann::json SpecSummaryJson(const PolicyReport& rep) {
  nlohmann::json rows = nlohmann::json::array();
  for (const SpecSummaryRow& row : SpecSummaryRows(rep)) {
    const PolicyResult& p = *row.policy;
    rows.push_back(
        {{"run_id", rep.run_id},
         {"model", rep.model_name},
         {"link", LinkOf(rep)},
         {"expert_cache_ratio", p.ratio},
         {"concurrency", p.concurrency},
         {"policy", CellJson(&p)},
         {"lru", CellJson(row.lru)},
         {"lru_same_drafter", CellJson(row.lru_drafter)},
         {"speedup_vs_lru", OrNull(row.speedup_vs_lru)},
         {"speedup_vs_lru_same_drafter", OrNull(row.speedup_vs_lru_drafter)},
         {"tpot_speedup_vs_lru", OrNull(row.tpot_speedup_vs_lru)},
         {"tpot_speedup_vs_lru_same_drafter",
          OrNull(row.tpot_speedup_vs_lru_drafter)}});
  }
  return rows;
}

}  // namespace moeserve::bench
