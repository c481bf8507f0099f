// Prints a registry shaped like the server's (DESIGN.md, "Metrics"), with
// awkward label values, so promtool_check_test can lint the exposition.
#include <cstdio>
#include <limits>
#include <string>

#include "base/status_macros.h"
#include "metrics/registry.h"

namespace moeserve::metrics {
namespace {

absl::Status Fill(Registry& r) {
  MOESERVE_ASSIGN_OR_RETURN(
      CounterFamily * requests,
      r.AddCounter("moeserve_expert_requests_total",
                   "Expert lookups by result.", {"policy", "result"}));
  for (const char* policy : {"lru", "self_spec"}) {
    (*requests->WithLabels({policy, "hit"}))->Inc(1234567);
    (*requests->WithLabels({policy, "miss"}))->Inc(89);
  }
  MOESERVE_ASSIGN_OR_RETURN(
      CounterFamily * bytes,
      r.AddCounter("moeserve_link_bytes_total",
                   "Bytes moved over the link.\nSecond \\ line.",
                   {"policy", "direction"}));
  (*bytes->WithLabels({"lru", "h2d"}))->Inc(3.5e12);
  (*bytes->WithLabels({"lru", "d2h"}))->Inc(0);
  MOESERVE_ASSIGN_OR_RETURN(
      CounterFamily * busy,
      r.AddCounter("moeserve_link_busy_seconds_total",
                   "Seconds the link was busy.", {"policy"}));
  (*busy->WithLabels({"lru"}))->Inc(0.125);
  MOESERVE_ASSIGN_OR_RETURN(
      HistogramFamily * ttft,
      r.AddHistogram("moeserve_time_to_first_token_seconds",
                     "Time to first token.", {"policy"},
                     DefaultLatencyBuckets()));
  Histogram* h = *ttft->WithLabels({"lru"});
  for (double v : {0.0005, 0.003, 0.2, 0.2, 7.0, 100.0}) h->Observe(v);
  MOESERVE_ASSIGN_OR_RETURN(GaugeFamily * usage,
                            r.AddGauge("moeserve_kv_cache_usage_ratio",
                                       "KV cache usage, 0-1.", {"policy"}));
  (*usage->WithLabels({"lru"}))->Set(0.42);
  (*usage->WithLabels({"weird \"quoted\" \\ back\nslash"}))->Set(-0.0);
  (*usage->WithLabels({"nan"}))->Set(std::nan(""));
  (*usage->WithLabels({"inf"}))->Set(std::numeric_limits<double>::infinity());
  MOESERVE_ASSIGN_OR_RETURN(
      CallbackGaugeFamily * waiting,
      r.AddCallbackGauge("moeserve_num_requests_waiting", "Requests waiting.",
                         {"policy"}));
  MOESERVE_RETURN_IF_ERROR(waiting->SetCallback({"lru"}, [] { return 3.0; }));
  MOESERVE_ASSIGN_OR_RETURN(
      GaugeFamily * info,
      r.AddGauge("moeserve_engine_info", "Engine configuration.",
                 {"policy", "model", "slow_tier"}));
  (*info->WithLabels({"lru", "/models/demo", "host"}))->Set(1);
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
