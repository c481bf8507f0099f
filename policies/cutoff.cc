#include "policies/cutoff.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::policies {

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> CutoffPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys(
      "cutoff", config, {"max_cutoff_layer", "prefetch_priority", "drafter"});
  if (!keys.ok()) return keys;
  Options options;
  if (config.contains("max_cutoff_layer")) {
    absl::StatusOr<int64_t> max_layer = engine::GetIntConfig(
        config, "max_cutoff_layer", /*default_value=*/0, /*min_value=*/0,
        /*max_value=*/std::numeric_limits<int>::max());
    if (!max_layer.ok()) return max_layer.status();
    options.max_cutoff_layer = static_cast<int>(*max_layer);
  }
  absl::StatusOr<int64_t> priority =
      engine::GetIntConfig(config, "prefetch_priority", /*default_value=*/1,
                           /*min_value=*/-1000, /*max_value=*/1000);
  if (!priority.ok()) return priority.status();
  options.prefetch_priority = static_cast<int>(*priority);
  // The drafter key is the traits' (Speculation), checked here as well.
  if (absl::Status s = Speculation(config).status(); !s.ok()) return s;
  return std::make_unique<CutoffPolicy>(std::move(options));
}

absl::StatusOr<engine::SpeculationDefaults> CutoffPolicy::Speculation(
    const engine::PolicyConfig& config) {
  return engine::DrafterKeySpeculation(config, "external");
}

void CutoffPolicy::Attach(engine::ResidencyControl* control) {
  control_ = control;
  num_layers_ = std::max(control->num_layers(), 0);
  num_experts_ = std::max(control->num_experts(), 0);
  cutoff_layer_ = -1;
}

int CutoffPolicy::ChooseDraftLength(const engine::DraftLengthQuery& q) {
  if (q.draft_seconds_per_position > 0) {
    draft_seconds_ = q.draft_seconds_per_position;
  }
  if (q.link_seconds_per_expert > 0) link_seconds_ = q.link_seconds_per_expert;
  return -1;
}

void CutoffPolicy::OnLookahead(const engine::ExpertLookahead& lookahead) {
  if (control_ == nullptr) return;
  const auto& positions = lookahead.experts;
  const int n = static_cast<int>(positions.size());
  // Per layer, the distinct experts any known position predicts, ascending.
  std::vector<std::vector<int>> window(num_layers_);
  for (int p = 0; p < n; ++p) {
    const int layers =
        std::min(static_cast<int>(positions[p].size()), num_layers_);
    for (int l = 0; l < layers; ++l) {
      for (int e : positions[p][l]) {
        if (e >= 0 && e < num_experts_) window[l].push_back(e);
      }
    }
  }
  // Split into resident (needed, stays) and missing (to prefetch).
  std::vector<std::vector<engine::ExpertId>> missing(num_layers_);
  int needed = 0;
  for (int l = 0; l < num_layers_; ++l) {
    std::vector<int>& experts = window[l];
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    for (int e : experts) {
      const engine::ExpertId id{l, e};
      if (control_->IsResident(id)) {
        ++needed;
        recency_.Touch(id);  // a prediction counts as a use
      } else {
        missing[l].push_back(id);
      }
    }
  }
  // The cutoff layer: the last layer before a constraint breaks.
  int cap = num_layers_ - 1;
  if (options_.max_cutoff_layer >= 0) {
    cap = std::min(cap, options_.max_cutoff_layer);
  }
  const int free_slots = control_->capacity_slots() - needed;
  const bool timed = draft_seconds_ > 0 && link_seconds_ > 0;
  const int planned = std::max(lookahead.planned_positions, n);
  const double hide_seconds = draft_seconds_ * (planned - n);
  int cutoff = -1;
  int64_t count = 0;
  for (int l = 0; l <= cap; ++l) {
    count += static_cast<int64_t>(missing[l].size());
    if (count > free_slots) break;  // (a) memory
    // (b) time, with a little slack for rounding.
    if (timed && count * link_seconds_ > hide_seconds * (1 + 1e-9)) break;
    cutoff = l;
  }
  cutoff_layer_ = cutoff;
  control_->SetPolicyGauge(
      "moeserve_spec_cutoff_layer",
      "SP-MoE cutoff layer L of the last drafting window: layers <= L were "
      "prefetched (-1: none).",
      cutoff);
  // One batched submission per layer, ascending.
  for (int l = 0; l <= cutoff; ++l) {
    if (missing[l].empty()) continue;
    for (const engine::ExpertId& id : missing[l]) recency_.Touch(id);
    control_->PrefetchBatch(missing[l], options_.prefetch_priority);
  }
}

MOESERVE_REGISTER_POLICY("cutoff", CutoffPolicy::Create,
                         {.speculation = CutoffPolicy::Speculation,
                          .test_config = {{"drafter", "int4"}}});

}  // namespace moeserve::policies
