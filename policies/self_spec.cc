#include "policies/self_spec.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "spdlog/spdlog.h"

namespace moeserve::policies {

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> SelfSpecPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys =
      engine::CheckConfigKeys("self_spec", config,
                              {"draft_experts", "num_speculative_tokens",
                               "hotness_decay", "draft_from"});
  if (!keys.ok()) return keys;
  Options options;
  absl::StatusOr<std::string> draft_from =
      engine::GetChoiceConfig(config, "draft_from", {"pinned", "ready"});
  if (!draft_from.ok()) return draft_from.status();
  options.draft_from =
      *draft_from == "pinned" ? DraftFrom::kPinned : DraftFrom::kReady;
  absl::StatusOr<int64_t> draft =
      engine::GetIntConfig(config, "draft_experts", /*default_value=*/-1,
                           /*min_value=*/0, /*max_value=*/int64_t{1} << 20);
  if (!draft.ok()) return draft.status();
  options.draft_experts = static_cast<int>(*draft);
  absl::StatusOr<engine::SpeculationDefaults> speculation = Speculation(config);
  if (!speculation.ok()) return speculation.status();
  options.num_speculative_tokens = speculation->num_speculative_tokens;
  // [0, 1): GetDoubleConfig's bounds are inclusive.
  absl::StatusOr<double> decay =
      engine::GetDoubleConfig(config, "hotness_decay", /*default_value=*/0.5,
                              /*min_value=*/0, /*max_value=*/0.999999);
  if (!decay.ok()) return decay.status();
  options.hotness_decay = *decay;
  return std::make_unique<SelfSpecPolicy>(options);
}

absl::StatusOr<engine::SpeculationDefaults> SelfSpecPolicy::Speculation(
    const engine::PolicyConfig& config) {
  absl::StatusOr<int64_t> k = engine::GetIntConfig(
      config, "num_speculative_tokens", /*default_value=*/4,
      /*min_value=*/0, /*max_value=*/16);  // kMaxSpeculativeTokens
  if (!k.ok()) return k.status();
  return engine::SpeculationDefaults{
      .drafter = "self", .num_speculative_tokens = static_cast<int>(*k)};
}

void SelfSpecPolicy::Attach(engine::ResidencyControl* control) {
  control_ = control;
  num_layers_ = std::max(control->num_layers(), 0);
  num_experts_ = std::max(control->num_experts(), 0);
  draft_experts_ =
      options_.draft_experts >= 0
          ? options_.draft_experts
          : std::min(num_experts_, 2 * control->experts_per_token());
  max_union_ = std::max(control->experts_per_token(), 0);
  total_pins_ = 0;
  hotness_.assign(static_cast<size_t>(num_layers_) * num_experts_, 0.0);
  pinned_.assign(num_layers_, {});
}

int SelfSpecPolicy::pin_budget() const {
  if (control_ == nullptr) return 0;
  return std::max(control_->capacity_slots() - max_union_, 0);
}

int SelfSpecPolicy::pins_per_layer() const {
  if (control_ == nullptr || num_layers_ == 0) return 0;
  return std::max(
      std::min({draft_experts_, num_experts_, pin_budget() / num_layers_}), 0);
}

bool SelfSpecPolicy::IsDraftExpert(engine::ExpertId id) const {
  if (options_.draft_from == DraftFrom::kReady) return true;
  if (id.layer < 0 || id.layer >= num_layers_) return false;
  const std::vector<int>& pins = pinned_[id.layer];
  return std::binary_search(pins.begin(), pins.end(), id.expert);
}

std::vector<int> SelfSpecPolicy::DraftExperts(int layer) const {
  if (layer < 0 || layer >= num_layers_) return {};
  return pinned_[layer];
}

double SelfSpecPolicy::Hotness(engine::ExpertId id) const {
  if (id.layer < 0 || id.layer >= num_layers_ || id.expert < 0 ||
      id.expert >= num_experts_) {
    return 0;
  }
  return hotness_[Index(id.layer, id.expert)];
}

std::vector<int> SelfSpecPolicy::Ranked(int layer) const {
  std::vector<int> ranked;
  for (int e = 0; e < num_experts_; ++e) {
    if (hotness_[Index(layer, e)] > 0) ranked.push_back(e);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) {
    return hotness_[Index(layer, a)] > hotness_[Index(layer, b)];
  });
  return ranked;
}

void SelfSpecPolicy::ShrinkToBudget() {
  const int n = pins_per_layer();
  for (int layer = 0; layer < num_layers_; ++layer) {
    std::vector<int>& pins = pinned_[layer];
    if (static_cast<int>(pins.size()) <= n) continue;
    // Keep the n hottest, ties by lower id.
    std::vector<int> order = pins;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return hotness_[Index(layer, a)] > hotness_[Index(layer, b)];
    });
    std::vector<int> drop(order.begin() + n, order.end());
    std::sort(drop.begin(), drop.end());
    for (int e : drop) {
      control_->Unpin({layer, e});
      --total_pins_;
    }
    order.resize(n);
    std::sort(order.begin(), order.end());
    pins = std::move(order);
  }
}

void SelfSpecPolicy::OnRoute(int layer, std::span<const int> experts,
                             std::span<const int> token_counts,
                             const float* hidden, int64_t n) {
  (void)layer, (void)token_counts, (void)hidden, (void)n;
  if (control_ == nullptr) return;
  const int u = static_cast<int>(experts.size());
  if (u <= max_union_) return;
  max_union_ = u;
  ShrinkToBudget();
}

void SelfSpecPolicy::OnStepEnd(const engine::StepStats& stats) {
  if (control_ == nullptr) return;
  if (stats.num_layers != num_layers_ || stats.num_experts != num_experts_ ||
      stats.activations.size() != hotness_.size()) {
    spdlog::warn(
        "self_spec: step stats of shape {}x{} ({} counts) do not match the "
        "model's {}x{}; pins unchanged",
        stats.num_layers, stats.num_experts, stats.activations.size(),
        num_layers_, num_experts_);
    return;
  }
  for (size_t i = 0; i < hotness_.size(); ++i) {
    hotness_[i] = hotness_[i] * options_.hotness_decay + stats.activations[i];
  }
  const int n = pins_per_layer();
  // The next draft experts of every layer, then unpin all leavers before
  // pinning any newcomer, so the total never passes the budget.
  std::vector<std::vector<int>> next(num_layers_);
  for (int layer = 0; layer < num_layers_; ++layer) {
    const std::vector<int>& pins = pinned_[layer];
    for (int e : Ranked(layer)) {
      if (static_cast<int>(next[layer].size()) >= n) break;
      const bool pinned = std::binary_search(pins.begin(), pins.end(), e);
      if (pinned || control_->IsResident({layer, e})) {
        next[layer].push_back(e);
      }
    }
    std::sort(next[layer].begin(), next[layer].end());
  }
  for (int layer = 0; layer < num_layers_; ++layer) {
    std::vector<int> kept;
    for (int e : pinned_[layer]) {
      if (std::binary_search(next[layer].begin(), next[layer].end(), e)) {
        kept.push_back(e);
      } else {
        control_->Unpin({layer, e});
        --total_pins_;
      }
    }
    pinned_[layer] = std::move(kept);
  }
  for (int layer = 0; layer < num_layers_; ++layer) {
    std::vector<int>& pins = pinned_[layer];
    for (int e : next[layer]) {
      if (std::binary_search(pins.begin(), pins.end(), e)) continue;
      // Resident (checked above; nothing has run since), so no transfer.
      if (control_->Pin({layer, e})) {
        pins.insert(std::lower_bound(pins.begin(), pins.end(), e), e);
        ++total_pins_;
      }
    }
  }
}

// Tests that run every policy see pins replaced within a few steps.
MOESERVE_REGISTER_POLICY("self_spec", SelfSpecPolicy::Create,
                         {.speculation = SelfSpecPolicy::Speculation,
                          .test_config = {{"hotness_decay", "0"}}});

}  // namespace moeserve::policies
