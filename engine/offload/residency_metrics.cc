#include "engine/offload/residency_metrics.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace moeserve::engine {
namespace {

using Labels = std::vector<std::string>;

absl::Status CounterChild(metrics::Registry* r, const char* name,
                          const char* help, Labels names, Labels values,
                          metrics::Counter** out) {
  absl::StatusOr<metrics::CounterFamily*> f =
      r->AddCounter(name, help, std::move(names));
  if (!f.ok()) return f.status();
  absl::StatusOr<metrics::Counter*> c = (*f)->WithLabels(values);
  if (!c.ok()) return c.status();
  *out = *c;
  return absl::OkStatus();
}

absl::Status GaugeChild(metrics::Registry* r, const char* name,
                        const char* help, Labels names, Labels values,
                        metrics::Gauge** out) {
  absl::StatusOr<metrics::GaugeFamily*> f =
      r->AddGauge(name, help, std::move(names));
  if (!f.ok()) return f.status();
  absl::StatusOr<metrics::Gauge*> g = (*f)->WithLabels(values);
  if (!g.ok()) return g.status();
  *out = *g;
  return absl::OkStatus();
}

}  // namespace

absl::Status ResidencyMetrics::Register(metrics::Registry* r,
                                        const std::string& p,
                                        const LinkOptions& link) {
  const char* kRequests = "moeserve_expert_requests_total";
  const char* kRequestsHelp =
      "Expert acquisitions by the target forward pass: hit (ready), "
      "hit_loading (resident but still in flight), miss, inplace (computed "
      "on the slow tier, not moved).";
  const char* kPrefetch = "moeserve_prefetch_total";
  const char* kPrefetchHelp =
      "Prefetched experts: used before eviction, evicted unused, or "
      "cancelled before their transfer started.";
  const char* kCache = "moeserve_expert_cache_bytes";
  const char* kCacheHelp = "Fast-tier bytes by slot state.";
  const Labels pr = {"policy", "result"};
  const Labels po = {"policy", "outcome"};
  const Labels ps = {"policy", "state"};
  absl::Status s[] = {
      CounterChild(r, kRequests, kRequestsHelp, pr, {p, "hit"}, &hits),
      CounterChild(r, kRequests, kRequestsHelp, pr, {p, "hit_loading"},
                   &hit_loading),
      CounterChild(r, kRequests, kRequestsHelp, pr, {p, "miss"}, &misses),
      CounterChild(r, kRequests, kRequestsHelp, pr, {p, "inplace"}, &inplace),
      CounterChild(r, "moeserve_expert_inplace_seconds_total",
                   "Emulated slow-tier compute time of experts computed in "
                   "place (inplace_compute_ratio x measured, plus reads).",
                   {"policy"}, {p}, &inplace_seconds),
      CounterChild(r, "moeserve_expert_inplace_wait_seconds_total",
                   "Time layers waited for their in-place experts beyond "
                   "the fast tier's work (emulated overlap).",
                   {"policy"}, {p}, &inplace_wait_seconds),
      CounterChild(r, "moeserve_link_bytes_total",
                   "Bytes moved over the slow-to-fast link.",
                   {"policy", "direction"}, {p, "h2d"}, &link_bytes),
      CounterChild(r, "moeserve_link_busy_seconds_total",
                   "Wall time the link spent on transfers.", {"policy"}, {p},
                   &link_busy_seconds),
      CounterChild(r, "moeserve_expert_stall_seconds_total",
                   "Time compute waited for an expert transfer.", {"policy"},
                   {p}, &stall_seconds),
      CounterChild(r, kPrefetch, kPrefetchHelp, po, {p, "used"},
                   &prefetch_used),
      CounterChild(r, kPrefetch, kPrefetchHelp, po, {p, "wasted"},
                   &prefetch_wasted),
      CounterChild(r, kPrefetch, kPrefetchHelp, po, {p, "cancelled"},
                   &prefetch_cancelled),
      GaugeChild(r, kCache, kCacheHelp, ps, {p, "empty"}, &cache_bytes[0]),
      GaugeChild(r, kCache, kCacheHelp, ps, {p, "loading"}, &cache_bytes[1]),
      GaugeChild(r, kCache, kCacheHelp, ps, {p, "ready"}, &cache_bytes[2]),
      GaugeChild(r, "moeserve_expert_cache_capacity_bytes",
                 "Fast-tier capacity (slots x expert blob bytes).", {"policy"},
                 {p}, &capacity_bytes),
  };
  for (const absl::Status& st : s) {
    if (!st.ok()) return st;
  }
  if (!link.emulated()) return absl::OkStatus();
  absl::Status st = GaugeChild(
      r, "moeserve_link_emulation_info",
      "1 when the link emulates a bandwidth (GB/s) and latency (us).",
      {"policy", "gbps", "latency_us"},
      {p, absl::StrCat(link.gbps), absl::StrCat(link.latency_us)},
      &emulation_info);
  if (st.ok()) emulation_info->Set(1);
  return st;
}

}  // namespace moeserve::engine
