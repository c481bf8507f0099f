#include "policies/quant_draft.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::policies {

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> QuantDraftPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys(
      "quant_draft", config,
      {"num_speculative_tokens", "max_speculative_tokens", "ttft_slo_ms",
       "phase2_start"});
  if (!keys.ok()) return keys;
  Options options;
  absl::StatusOr<engine::SpeculativeTokens> k =
      engine::GetSpeculativeTokens(config);
  if (!k.ok()) return k.status();
  if (config.contains("max_speculative_tokens")) {
    options.max_speculative_tokens = k->max;
  }
  options.num_speculative_tokens = k->num;
  if (config.contains("ttft_slo_ms")) {
    absl::StatusOr<double> ms = engine::GetDoubleConfig(
        config, "ttft_slo_ms", /*default_value=*/0, /*min_value=*/0.001,
        /*max_value=*/3.6e6);
    if (!ms.ok()) return ms.status();
    options.ttft_slo_seconds = *ms / 1e3;
  }
  absl::StatusOr<double> phase2 = engine::GetDoubleConfig(
      config, "phase2_start", /*default_value=*/1.0 / 3.0,
      /*min_value=*/0, /*max_value=*/1);
  if (!phase2.ok()) return phase2.status();
  options.phase2_start = *phase2;
  return std::make_unique<QuantDraftPolicy>(options);
}

absl::StatusOr<engine::SpeculationDefaults> QuantDraftPolicy::Speculation(
    const engine::PolicyConfig& config) {
  (void)config;
  return engine::SpeculationDefaults{.drafter = "int4",
                                     .num_speculative_tokens = 0};
}

void QuantDraftPolicy::Attach(engine::ResidencyControl* control) {
  control_ = control;
  num_layers_ = std::max(control->num_layers(), 0);
  num_experts_ = std::max(control->num_experts(), 0);
  first_pos_.assign(static_cast<size_t>(num_layers_) * num_experts_, -1);
  window_ids_.clear();
  positions_seen_ = 0;
  phase_ = Phase::kNone;
  cursor_ = -1;
  issued_.clear();
  issued_low_.clear();
}

int QuantDraftPolicy::FirstPosition(engine::ExpertId id) const {
  if (id.layer < 0 || id.layer >= num_layers_ || id.expert < 0 ||
      id.expert >= num_experts_) {
    return -1;
  }
  return first_pos_[Index(id.layer, id.expert)];
}

double QuantDraftPolicy::ExpectedNewExperts(int k) const {
  double sum = 0;
  double last = 0;  // the last position measured stands for the ones after
  for (int p = 0; p <= k; ++p) {
    if (p < static_cast<int>(measured_.size()) && measured_[p]) {
      last = new_experts_[p];
    }
    sum += last;
  }
  return sum;
}

void QuantDraftPolicy::OnLookahead(const engine::ExpertLookahead& lookahead) {
  if (control_ == nullptr) return;
  const auto& positions = lookahead.experts;
  const int n = static_cast<int>(positions.size());
  if (n < positions_seen_) positions_seen_ = 0;  // a new draft
  // Rebuild the window (an earlier position may have grown since).
  for (const engine::ExpertId& id : window_ids_) {
    first_pos_[Index(id.layer, id.expert)] = -1;
  }
  window_ids_.clear();
  for (int p = 0; p < n; ++p) {
    const int layers =
        std::min(static_cast<int>(positions[p].size()), num_layers_);
    for (int l = 0; l < layers; ++l) {
      for (int e : positions[p][l]) {
        if (e < 0 || e >= num_experts_) continue;
        int& first = first_pos_[Index(l, e)];
        if (first >= 0) continue;
        first = p;
        window_ids_.push_back({l, e});
      }
    }
  }
  // new(p) for the positions that arrived with this call, before any
  // prefetch of this call.
  if (static_cast<int>(new_experts_.size()) < n) {
    new_experts_.resize(n, 0.0);
    measured_.resize(n, false);
  }
  std::vector<int> fresh(n, 0);
  for (const engine::ExpertId& id : window_ids_) {
    const int p = first_pos_[Index(id.layer, id.expert)];
    if (p >= positions_seen_ && !control_->IsResident(id)) ++fresh[p];
  }
  for (int p = positions_seen_; p < n; ++p) {
    new_experts_[p] = measured_[p] ? kNewExpertsDecay * new_experts_[p] +
                                         (1 - kNewExpertsDecay) * fresh[p]
                                   : fresh[p];
    measured_[p] = true;
  }
  positions_seen_ = n;
  if (n == 0) {
    phase_ = Phase::kNone;
    return;
  }
  const int planned =
      lookahead.planned_positions > 0 ? lookahead.planned_positions : n;
  if (n >= planned) {
    phase_ = Phase::kIII;
    PrefetchWindow(/*high=*/true);
  } else if (n < options_.phase2_start * planned - 1e-9) {
    phase_ = Phase::kI;
  } else {
    phase_ = Phase::kII;
    PrefetchWindow(/*high=*/false);
  }
}

std::vector<engine::ExpertId> QuantDraftPolicy::UseOrder() const {
  std::vector<std::tuple<int, int, int>> order;
  for (const engine::ExpertId& id : window_ids_) {
    if (id.layer <= cursor_) continue;
    order.emplace_back(id.layer, first_pos_[Index(id.layer, id.expert)],
                       id.expert);
  }
  std::sort(order.begin(), order.end());
  std::vector<engine::ExpertId> ids;
  ids.reserve(order.size());
  for (const auto& [layer, pos, expert] : order) ids.push_back({layer, expert});
  return ids;
}

void QuantDraftPolicy::PrefetchWindow(bool high) {
  const int capacity = control_->capacity_slots();
  const int priority = high ? kHighPriority : kLowPriority;
  int used = 0;  // window experts resident or on their way
  for (const engine::ExpertId& id : UseOrder()) {
    if (used >= capacity) break;
    const std::pair<int, int> key{id.layer, id.expert};
    if (control_->IsResident(id)) {
      // Phase III: a low-priority prefetch still queued moves up.
      if (high && issued_low_.contains(key) && !control_->IsReady(id) &&
          control_->CancelPrefetch(id)) {
        issued_low_.erase(key);
        issued_.erase(key);
      } else {
        ++used;
        continue;
      }
    }
    if (!control_->Prefetch(id, priority)) break;  // no victim to be had
    issued_.insert(key);
    if (!high) issued_low_.insert(key);
    ++used;
  }
}

void QuantDraftPolicy::OnStepBegin(const engine::StepInfo& info) {
  (void)info;
  cursor_ = -1;
}

void QuantDraftPolicy::OnRoute(int layer, std::span<const int> experts,
                               std::span<const int> token_counts,
                               const float* hidden, int64_t n) {
  (void)experts, (void)token_counts, (void)hidden, (void)n;
  cursor_ = layer;
}

void QuantDraftPolicy::OnStepEnd(const engine::StepStats& stats) {
  (void)stats;
  if (control_ == nullptr) return;
  // What the verification did not need and is still queued goes back.
  std::vector<std::pair<int, int>> issued(issued_.begin(), issued_.end());
  std::sort(issued.begin(), issued.end());
  for (const auto& [layer, expert] : issued) {
    const engine::ExpertId id{layer, expert};
    if (control_->IsResident(id) && !control_->IsReady(id)) {
      control_->CancelPrefetch(id);
    }
  }
  issued_.clear();
  issued_low_.clear();
  for (const engine::ExpertId& id : window_ids_) {
    first_pos_[Index(id.layer, id.expert)] = -1;
  }
  window_ids_.clear();
  positions_seen_ = 0;
  phase_ = Phase::kNone;
  cursor_ = -1;
}

void QuantDraftPolicy::ChooseVictims(
    std::span<const engine::ExpertId> candidates, int count,
    std::vector<engine::ExpertId>* victims) {
  const size_t n =
      std::min(static_cast<size_t>(std::max(count, 0)), candidates.size());
  if (n == 0) return;
  // Ascending = most evictable first: outside the window (0) before inside
  // (1); inside, the farthest next use (highest layer, then latest earliest
  // position) first; then least recently used, then (layer, expert).
  std::vector<std::tuple<int, int, int, uint64_t, int, int>> order;
  order.reserve(candidates.size());
  for (const engine::ExpertId& id : candidates) {
    const int pos = FirstPosition(id);
    const bool in_window = pos >= 0 && id.layer > cursor_;
    order.emplace_back(in_window ? 1 : 0, in_window ? -id.layer : 0,
                       in_window ? -pos : 0, recency_.LastUse(id), id.layer,
                       id.expert);
  }
  std::partial_sort(order.begin(), order.begin() + n, order.end());
  for (size_t i = 0; i < n; ++i) {
    victims->push_back({std::get<4>(order[i]), std::get<5>(order[i])});
  }
}

double QuantDraftPolicy::CycleSeconds(const engine::DraftLengthQuery& q,
                                      int k) const {
  const double link = std::max(q.link_seconds_per_expert, 0.0);
  const double fetches = ExpectedNewExperts(k);
  const double draft = k * std::max(q.draft_seconds_per_position, 0.0);
  const double pcie_init = link * std::min(fetches, 1.0);
  const double pcie_new = link * std::max(fetches - 1.0, 0.0);
  const double verify =
      q.verify_seconds_base + k * std::max(q.verify_seconds_per_draft, 0.0);
  // Eq. (3): the draft runs while the first fetch is on the link.
  return std::max(draft, pcie_init) + pcie_new + verify;
}

int QuantDraftPolicy::SloDraftLength(const engine::DraftLengthQuery& q,
                                     int max_k) const {
  std::optional<double> budget = options_.ttft_slo_seconds;
  if (!budget.has_value() && options_.max_speculative_tokens.has_value()) {
    return max_k;  // the configured k_SLO (already in max_k)
  }
  const double prefill = std::max(q.prefill_seconds, 0.0);
  if (!budget.has_value()) budget = kTtftSlack * (prefill + CycleSeconds(q, 0));
  // T_cycle grows with k: the first k that misses the budget ends the range.
  int k = 0;
  while (k < max_k && prefill + CycleSeconds(q, k + 1) <= *budget) ++k;
  return k;
}

int QuantDraftPolicy::ChooseDraftLength(const engine::DraftLengthQuery& q) {
  int max_k = std::max(
      std::min(q.max_k, options_.max_speculative_tokens.value_or(q.max_k)), 0);
  const bool measured = !q.acceptance.empty() &&
                        q.draft_seconds_per_position > 0 &&
                        q.verify_seconds_base > 0;
  if (!measured) {
    zero_streak_ = 0;
    // T_verify(1) is measured only by a pass without drafts, which a
    // governor drafting num_speculative_tokens every step never runs.
    const bool needs_base = !q.acceptance.empty() &&
                            q.draft_seconds_per_position > 0 &&
                            q.verify_seconds_base <= 0;
    if (needs_base && --base_probe_wait_ < 0) {
      base_probe_wait_ = kProbeInterval - 1;
      return 0;
    }
    return std::clamp(options_.num_speculative_tokens, 0, max_k);
  }
  max_k = std::min(max_k, static_cast<int>(q.acceptance.size()));
  max_k = SloDraftLength(q, max_k);
  int best_k = 0;
  double best = 1.0 / CycleSeconds(q, 0);
  double tokens = 1;
  double run = 1;  // P(drafts 1..k all accepted)
  for (int k = 1; k <= max_k; ++k) {
    run *= std::clamp(q.acceptance[k - 1], 0.0, 1.0);
    tokens += run;
    const double theta = tokens / CycleSeconds(q, k);
    if (theta > best * (1 + 1e-12)) {
      best = theta;
      best_k = k;
    }
  }
  if (best_k == 0 && max_k >= 1) {
    if (++zero_streak_ >= kProbeInterval) {
      zero_streak_ = 0;
      return 1;  // a probe: acceptance is measured only while drafting
    }
    return 0;
  }
  zero_streak_ = 0;
  return best_k;
}

// Small k bounds keep the invariance test's verifications short.
MOESERVE_REGISTER_POLICY("quant_draft", QuantDraftPolicy::Create,
                         {.speculation = QuantDraftPolicy::Speculation,
                          .test_config = {{"num_speculative_tokens", "2"},
                                          {"max_speculative_tokens", "4"}}});

}  // namespace moeserve::policies
