// Prints a registry shaped like the server's (DESIGN.md, "Metrics"), with
// awkward label values, so promtool_check_test can lint the exposition.
#include <cstdio>
#include <limits>
#include <string>

#include "metrics/registry.h"

namespace moeserve::metrics {
namespace {

absl::Status Fill(Registry& r) {
  auto requests =
      r.AddCounter("moeserve_expert_requests_total",
                   "Expert lookups by result.", {"policy", "result"});
  if (!requests.ok()) return requests.status();
  for (const char* policy : {"lru", "self_spec"}) {
    (*(*requests)->WithLabels({policy, "hit"}))->Inc(1234567);
    (*(*requests)->WithLabels({policy, "miss"}))->Inc(89);
  }
  auto bytes = r.AddCounter("moeserve_link_bytes_total",
                            "Bytes moved over the link.\nSecond \\ line.",
                            {"policy", "direction"});
  if (!bytes.ok()) return bytes.status();
  (*(*bytes)->WithLabels({"lru", "h2d"}))->Inc(3.5e12);
  (*(*bytes)->WithLabels({"lru", "d2h"}))->Inc(0);
  auto busy = r.AddCounter("moeserve_link_busy_seconds_total",
                           "Seconds the link was busy.", {"policy"});
  if (!busy.ok()) return busy.status();
  (*(*busy)->WithLabels({"lru"}))->Inc(0.125);
  auto ttft = r.AddHistogram("moeserve_time_to_first_token_seconds",
                             "Time to first token.", {"policy"},
                             DefaultLatencyBuckets());
  if (!ttft.ok()) return ttft.status();
  Histogram* h = *(*ttft)->WithLabels({"lru"});
  for (double v : {0.0005, 0.003, 0.2, 0.2, 7.0, 100.0}) h->Observe(v);
  auto usage = r.AddGauge("moeserve_kv_cache_usage_ratio",
                          "KV cache usage, 0-1.", {"policy"});
  if (!usage.ok()) return usage.status();
  (*(*usage)->WithLabels({"lru"}))->Set(0.42);
  (*(*usage)->WithLabels({"weird \"quoted\" \\ back\nslash"}))->Set(-0.0);
  (*(*usage)->WithLabels({"nan"}))->Set(std::nan(""));
  (*(*usage)->WithLabels({"inf"}))
      ->Set(std::numeric_limits<double>::infinity());
  auto waiting = r.AddCallbackGauge("moeserve_num_requests_waiting",
                                    "Requests waiting.", {"policy"});
  if (!waiting.ok()) return waiting.status();
  absl::Status s = (*waiting)->SetCallback({"lru"}, [] { return 3.0; });
  if (!s.ok()) return s;
  auto info = r.AddGauge("moeserve_engine_info", "Engine configuration.",
                         {"policy", "model", "slow_tier"});
  if (!info.ok()) return info.status();
  (*(*info)->WithLabels({"lru", "/models/demo", "host"}))->Set(1);
  auto preempt = r.AddCounter("moeserve_num_preemptions_total", "Preemptions.",
                              {"policy"});
  return preempt.status();  // no children: HELP and TYPE only
}

}  // namespace
}  // namespace moeserve::metrics

int main() {
  moeserve::metrics::Registry registry;
  if (absl::Status s = moeserve::metrics::Fill(registry); !s.ok()) {
    std::fprintf(stderr, "metrics_dump: %s\n", s.ToString().c_str());
    return 1;
  }
  std::fputs(registry.Serialize().c_str(), stdout);
  return 0;
}
