#include "policies/cpu_cold.h"

#include <algorithm>
#include <cmath>

namespace moeserve::policies {

int CpuColdPolicy::ThresholdRows(const engine::ExpertCosts& costs,
                                 int max_rows) {
  max_rows = std::clamp(max_rows, 0, kMaxRows);
  const double link = costs.link_seconds;
  const double first = costs.host_seconds_first_row;
  const double per_row = costs.host_seconds_per_row;
  const double fast =
      costs.fast_compute_seconds > 0 ? costs.fast_compute_seconds : 0;
  if (max_rows == 0 || !std::isfinite(link) || !std::isfinite(first) ||
      !std::isfinite(per_row) || !std::isfinite(fast) || link <= 0 ||
      first <= 0) {
    return 0;
  }
  const double copy = link + fast;
  if (!(costs.HostSeconds(1) < copy)) return 0;
  // A host cost that does not grow with the rows: cheaper at every count.
  if (per_row <= 0) return max_rows;
  // first + (m - 1) x per_row < copy  <=>  m - 1 < q, q > 0: m = ceil(q),
  // then corrected for rounding.
  const double q = (copy - first) / per_row;
  if (q >= max_rows) return max_rows;
  int m = std::max(1, static_cast<int>(std::ceil(q)));
  while (m > 1 && !(costs.HostSeconds(m) < copy)) --m;
  while (m < max_rows && costs.HostSeconds(m + 1) < copy) ++m;
  return m;
}

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> CpuColdPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys("cpu_cold", config,
                                              {"max_rows", "threshold_rows"});
  if (!keys.ok()) return keys;
  Options options;
  absl::StatusOr<int64_t> max_rows = engine::GetIntConfig(
      config, "max_rows", kMaxRows, /*min_value=*/0, /*max_value=*/kMaxRows);
  if (!max_rows.ok()) return max_rows.status();
  options.max_rows = static_cast<int>(*max_rows);
  if (config.contains("threshold_rows")) {
    absl::StatusOr<int64_t> fixed =
        engine::GetIntConfig(config, "threshold_rows", 0, /*min_value=*/0,
                             /*max_value=*/kMaxRows);
    if (!fixed.ok()) return fixed.status();
    options.threshold_rows = static_cast<int>(*fixed);
  }
  return std::make_unique<CpuColdPolicy>(options);
}

void CpuColdPolicy::Attach(engine::ResidencyControl* control) {
  control_ = control;
  inplace_refused_ = false;
  UpdateThreshold();
}

void CpuColdPolicy::UpdateThreshold() {
  if (control_ == nullptr || inplace_refused_) {
    threshold_ = 0;
  } else if (options_.threshold_rows.has_value()) {
    threshold_ = std::min(*options_.threshold_rows, options_.max_rows);
  } else {
    threshold_ = ThresholdRows(control_->expert_costs(), options_.max_rows);
  }
}

void CpuColdPolicy::OnRoute(int layer, std::span<const int> experts,
                            std::span<const int> token_counts,
                            const float* hidden, int64_t n) {
  (void)hidden, (void)n;
  UpdateThreshold();
  if (threshold_ <= 0) return;
  const size_t routed = std::min(experts.size(), token_counts.size());
  for (size_t i = 0; i < routed; ++i) {
    const int rows = token_counts[i];
    if (rows < 1 || rows > threshold_) continue;
    const engine::ExpertId id{layer, experts[i]};
    if (control_->IsResident(id)) continue;
    if (!control_->ComputeInPlace(id)) {
      // A control that cannot compute in place (a device fast tier without
      // host compute): lru from here on.
      inplace_refused_ = true;
      threshold_ = 0;
      return;
    }
  }
}

void CpuColdPolicy::OnStepEnd(const engine::StepStats& stats) {
  (void)stats;
  if (control_ == nullptr) return;
  UpdateThreshold();
  control_->SetPolicyGauge(
      "moeserve_cpu_cold_threshold_rows",
      "cpu_cold: the most rows (tokens of one layer routed to one expert) at "
      "which a missing expert is computed in place on the host instead of "
      "copied to the fast tier; 0: none (lru).",
      threshold_);
}

MOESERVE_REGISTER_POLICY("cpu_cold", CpuColdPolicy::Create,
                         {.test_config = {{"threshold_rows", "1"}}});

}  // namespace moeserve::policies
