// ResidencyMetrics: the expert-tier metric children of one engine
// (DESIGN.md "Metrics"), looked up once so the hot path only does atomic
// increments. Every pointer is null when no registry was given.
//
// Ownership: the children belong to the Registry, which must outlive this.
// Thread safety: Register once, before use; the children are lock-free.
#ifndef MOESERVE_ENGINE_OFFLOAD_RESIDENCY_METRICS_H_
#define MOESERVE_ENGINE_OFFLOAD_RESIDENCY_METRICS_H_

#include <string>

#include "absl/status/status.h"
#include "engine/offload/link.h"
#include "metrics/metric.h"
#include "metrics/registry.h"

namespace moeserve::engine {

class ResidencyMetrics {
 public:
  // Registers (or finds) every family and the children labelled
  // policy=`engine_name`; moeserve_link_emulation_info only when `link` is
  // emulated.
  absl::Status Register(metrics::Registry* registry,
                        const std::string& engine_name,
                        const LinkOptions& link);
  void SetCapacity(double bytes) {
    if (capacity_bytes != nullptr) capacity_bytes->Set(bytes);
  }

  metrics::Counter* hits = nullptr;         // result="hit"
  metrics::Counter* hit_loading = nullptr;  // result="hit_loading"
  metrics::Counter* misses = nullptr;
  metrics::Counter* inplace = nullptr;          // result="inplace"
  metrics::Counter* inplace_seconds = nullptr;  // ..._inplace_seconds_total
  metrics::Counter* inplace_wait_seconds = nullptr;
  metrics::Counter* link_bytes = nullptr;  // direction="h2d"
  metrics::Counter* link_busy_seconds = nullptr;
  metrics::Counter* stall_seconds = nullptr;
  metrics::Counter* prefetch_used = nullptr;
  metrics::Counter* prefetch_wasted = nullptr;
  metrics::Counter* prefetch_cancelled = nullptr;
  metrics::Gauge* cache_bytes[3] = {nullptr, nullptr, nullptr};  // empty,
                                                                 // loading,
                                                                 // ready
  metrics::Gauge* capacity_bytes = nullptr;
  metrics::Gauge* emulation_info = nullptr;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_RESIDENCY_METRICS_H_
