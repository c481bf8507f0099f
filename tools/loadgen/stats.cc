#include "tools/loadgen/stats.h"

#include <algorithm>
#include <cmath>

namespace moeserve::loadgen {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * values.size());
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

LevelSummary Summarize(int concurrency, int requests_planned, bool time_capped,
                       double wall_s,
                       const std::vector<RequestSample>& samples) {
  LevelSummary s;
  s.concurrency = concurrency;
  s.requests_planned = requests_planned;
  s.requests_issued = static_cast<int>(samples.size());
  s.time_capped = time_capped;
  s.wall_s = wall_s;
  std::vector<double> ttft_ms;
  std::vector<double> tpot_ms;
  for (const RequestSample& r : samples) {
    if (!r.ok) {
      ++s.errors[r.status_code];
      continue;
    }
    ++s.requests_ok;
    s.tokens += r.tokens;
    if (r.ttft_s >= 0) ttft_ms.push_back(r.ttft_s * 1e3);
    if (r.tpot_s >= 0) tpot_ms.push_back(r.tpot_s * 1e3);
  }
  s.tokens_per_s = wall_s > 0 ? s.tokens / wall_s : 0;
  s.ttft_p50_ms = Percentile(ttft_ms, 50);
  s.ttft_p99_ms = Percentile(ttft_ms, 99);
  s.tpot_p50_ms = Percentile(tpot_ms, 50);
  s.tpot_p99_ms = Percentile(tpot_ms, 99);
  return s;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

LevelSummary MedianLevel(const std::vector<LevelSummary>& repeats) {
  LevelSummary m = repeats.front();
  m.requests_planned = m.requests_issued = m.requests_ok = 0;
  m.tokens = 0;
  m.errors.clear();
  m.time_capped = false;
  auto median_of = [&](double LevelSummary::*field) {
    std::vector<double> v;
    for (const LevelSummary& r : repeats) v.push_back(r.*field);
    return Median(v);
  };
  for (const LevelSummary& r : repeats) {
    m.requests_planned += r.requests_planned;
    m.requests_issued += r.requests_issued;
    m.requests_ok += r.requests_ok;
    m.tokens += r.tokens;
    m.time_capped = m.time_capped || r.time_capped;
    for (const auto& [code, count] : r.errors) m.errors[code] += count;
  }
  m.wall_s = median_of(&LevelSummary::wall_s);
  m.tokens_per_s = median_of(&LevelSummary::tokens_per_s);
  m.ttft_p50_ms = median_of(&LevelSummary::ttft_p50_ms);
  m.ttft_p99_ms = median_of(&LevelSummary::ttft_p99_ms);
  m.tpot_p50_ms = median_of(&LevelSummary::tpot_p50_ms);
  m.tpot_p99_ms = median_of(&LevelSummary::tpot_p99_ms);
  return m;
}

}  // namespace moeserve::loadgen
