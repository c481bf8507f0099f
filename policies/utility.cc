#include "policies/utility.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

namespace moeserve::policies {
namespace {

using engine::ExpertId;

// The `gamma` key: the draft length, in [1, 16].
absl::StatusOr<int64_t> GetGamma(const engine::PolicyConfig& config) {
  return engine::GetIntConfig(config, "gamma", UtilityPolicy::Options().gamma,
                              /*min_value=*/1, /*max_value=*/16);
}

// round(count * window / tokens), half up; tokens > 0.
int Normalise(int64_t count, int window, int64_t tokens) {
  return static_cast<int>((2 * count * window + tokens) / (2 * tokens));
}

}  // namespace

// ---------------------------------------------------------------- estimator

int UtilityPolicy::NextLevel(const Estimate& e, int f, int max_utility) {
  const int delta = f - e.last_frequency;
  if (delta >= e.up) return std::min(max_utility, e.level + 1);
  if (-delta >= e.down) return std::max(0, e.level - 1);
  return e.level;
}

void UtilityPolicy::Observe(Estimate* e, int f, int max_utility,
                            double lambda) {
  const int delta = f - e->last_frequency;
  e->level = NextLevel(*e, f, max_utility);
  auto calibrate = [lambda](int boundary, int magnitude) {
    return static_cast<int>(
        std::floor((1 - lambda) * boundary + lambda * magnitude));
  };
  if (delta > 0) e->up = calibrate(e->up, delta);
  if (delta < 0) e->down = calibrate(e->down, -delta);
  e->last_frequency = f;
}

// ---------------------------------------------------------------- tau

int UtilityPolicy::SolveTau(const TauProblem& p) {
  const int k = p.max_utility;
  auto at = [](const auto& v, int u) {
    return u < static_cast<int>(v.size()) ? v[u] : 0;
  };
  double routed_total = 0;
  for (int u = 0; u <= k; ++u) routed_total += at(p.routed_at, u);
  int best = -1;
  double best_objective = std::numeric_limits<double>::infinity();
  for (int tau = 1; tau <= k; ++tau) {
    int64_t hot = 0, missing = 0;
    double routed_cold = 0, routed_hot = 0;
    for (int u = 0; u <= k; ++u) {
      if (u >= tau) {
        hot += at(p.experts_at, u);
        missing += at(p.missing_at, u);
        routed_hot += at(p.routed_at, u);
      } else {
        routed_cold += at(p.routed_at, u);
      }
    }
    if (hot > p.slots_left) continue;  // memory (11)
    double objective = 0;
    double total = p.fast_seconds * routed_total;
    if (p.balance) {
      const double cpu = p.inplace_seconds * routed_cold;
      const double gpu = p.fast_seconds * routed_hot;
      objective = std::abs(cpu - gpu);  // (9)
      total = std::max(cpu, gpu);
    }
    // I/O (10), with a little slack for rounding.
    if (p.link_seconds * missing > (total + p.draft_seconds) * (1 + 1e-9)) {
      continue;
    }
    if (objective < best_objective) {
      best = tau;
      best_objective = objective;
    }
  }
  return best < 0 ? k : best;
}

// ---------------------------------------------------------------- factory

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> UtilityPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys(
      "utility", config,
      {"gamma", "max_utility", "forgetting_factor", "initial_tau", "drafter"});
  if (!keys.ok()) return keys;
  Options options;
  absl::StatusOr<int64_t> gamma = GetGamma(config);
  if (!gamma.ok()) return gamma.status();
  options.gamma = static_cast<int>(*gamma);
  absl::StatusOr<int64_t> k =
      engine::GetIntConfig(config, "max_utility", std::min(4, options.gamma),
                           /*min_value=*/1, /*max_value=*/options.gamma);
  if (!k.ok()) return k.status();
  options.max_utility = static_cast<int>(*k);
  absl::StatusOr<double> lambda = engine::GetDoubleConfig(
      config, "forgetting_factor", options.forgetting_factor,
      /*min_value=*/0, /*max_value=*/1);
  if (!lambda.ok()) return lambda.status();
  if (*lambda <= 0) {
    return absl::InvalidArgumentError(
        "config key 'forgetting_factor': must be > 0, got 0");
  }
  options.forgetting_factor = *lambda;
  absl::StatusOr<int64_t> tau =
      engine::GetIntConfig(config, "initial_tau", options.initial_tau,
                           /*min_value=*/1, /*max_value=*/options.max_utility);
  if (!tau.ok()) return tau.status();
  options.initial_tau = static_cast<int>(*tau);
  // The drafter key is the traits' (Speculation), checked here as well.
  if (absl::Status s = Speculation(config).status(); !s.ok()) return s;
  return std::make_unique<UtilityPolicy>(std::move(options));
}

absl::StatusOr<engine::SpeculationDefaults> UtilityPolicy::Speculation(
    const engine::PolicyConfig& config) {
  absl::StatusOr<int64_t> gamma = GetGamma(config);
  if (!gamma.ok()) return gamma.status();
  absl::StatusOr<engine::SpeculationDefaults> speculation =
      engine::DrafterKeySpeculation(config, "external");
  if (speculation.ok()) {
    speculation->num_speculative_tokens = static_cast<int>(*gamma);
  }
  return speculation;
}

// ---------------------------------------------------------------- hooks

void UtilityPolicy::Attach(engine::ResidencyControl* control) {
  control_ = control;
  num_layers_ = std::max(control->num_layers(), 0);
  num_experts_ = std::max(control->num_experts(), 0);
  const size_t n = static_cast<size_t>(num_layers_) * num_experts_;
  const int boundary = std::max(1, options_.gamma / 2);
  estimates_.assign(n, Estimate{.up = boundary, .down = boundary});
  view_.assign(n, 0);
  tau_.assign(num_layers_, options_.initial_tau);
  routed_at_.assign(
      static_cast<size_t>(num_layers_) * (options_.max_utility + 1), 0);
  routed_seen_.assign(num_layers_, false);
  step_counts_.assign(n, 0);
  step_tokens_.assign(num_layers_, 0);
  step_routed_ = step_inplace_ = 0;
  inplace_refused_ = false;
  lookahead_this_step_ = false;
  issued_.clear();
}

int UtilityPolicy::ChooseDraftLength(const engine::DraftLengthQuery& q) {
  if (q.draft_seconds_per_position > 0) {
    draft_seconds_ = q.draft_seconds_per_position;
  }
  return -1;
}

void UtilityPolicy::OnRoute(int layer, std::span<const int> experts,
                            std::span<const int> token_counts, const float*,
                            int64_t n) {
  if (control_ == nullptr || layer < 0 || layer >= num_layers_) return;
  const int k = options_.max_utility;
  std::vector<double> routed(k + 1, 0);
  int64_t sum = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    const int e = experts[i];
    if (e < 0 || e >= num_experts_) continue;
    const ExpertId id{layer, e};
    const int count = i < token_counts.size() ? token_counts[i] : 1;
    step_counts_[Index(id)] += count;
    sum += count;
    const int level = view_[Index(id)];
    routed[level] += 1;
    ++step_routed_;
    if (inplace_refused_ || level >= tau_[layer] || control_->IsResident(id)) {
      continue;
    }
    if (control_->ComputeInPlace(id)) {
      ++step_inplace_;
    } else {
      inplace_refused_ = true;
    }
  }
  const int top_k = std::max(control_->experts_per_token(), 1);
  step_tokens_[layer] += n > 0 ? n : (sum + top_k - 1) / top_k;
  // R[u]: EMA of the routed experts per level.
  double* r = &routed_at_[static_cast<size_t>(layer) * (k + 1)];
  const double lambda = routed_seen_[layer] ? options_.forgetting_factor : 1;
  for (int u = 0; u <= k; ++u) r[u] = (1 - lambda) * r[u] + lambda * routed[u];
  routed_seen_[layer] = true;
}

void UtilityPolicy::OnLookahead(const engine::ExpertLookahead& lookahead) {
  if (control_ == nullptr) return;
  const auto& positions = lookahead.experts;
  const int n = static_cast<int>(positions.size());
  if (n == 0 || n < lookahead.planned_positions) return;  // partial window
  // Positions predicting each expert, for the layers the window covers.
  std::vector<int> predicted(view_.size(), 0);
  std::vector<bool> covered(num_layers_, false);
  for (const auto& layers : positions) {
    const int count = std::min(static_cast<int>(layers.size()), num_layers_);
    for (int l = 0; l < count; ++l) {
      covered[l] = true;
      for (int e : layers[l]) {
        if (e >= 0 && e < num_experts_) ++predicted[Index({l, e})];
      }
    }
  }
  const int window = options_.gamma + 1;
  for (int l = 0; l < num_layers_; ++l) {
    if (!covered[l]) continue;
    for (int e = 0; e < num_experts_; ++e) {
      const size_t i = Index({l, e});
      const int p = Normalise(predicted[i], window, n);
      view_[i] = NextLevel(estimates_[i], p, options_.max_utility);
    }
  }
  draft_positions_ = n;
  lookahead_this_step_ = true;
  UpdateTaus();
  PlanPrefetch();
}

void UtilityPolicy::OnStepBegin(const engine::StepInfo&) {
  if (control_ != nullptr && !lookahead_this_step_) PlanPrefetch();
}

void UtilityPolicy::OnStepEnd(const engine::StepStats&) {
  if (control_ == nullptr) return;
  const int window = options_.gamma + 1;
  for (int l = 0; l < num_layers_; ++l) {
    const int64_t tokens = step_tokens_[l];
    if (tokens <= 0) continue;
    for (int e = 0; e < num_experts_; ++e) {
      const size_t i = Index({l, e});
      Observe(&estimates_[i], Normalise(step_counts_[i], window, tokens),
              options_.max_utility, options_.forgetting_factor);
    }
  }
  for (size_t i = 0; i < view_.size(); ++i) view_[i] = estimates_[i].level;
  UpdateTaus();
  // What the step did not need and is still queued goes back.
  for (const ExpertId& id : issued_) {
    if (control_->IsResident(id) && !control_->IsReady(id)) {
      control_->CancelPrefetch(id);
    }
  }
  issued_.clear();
  lookahead_this_step_ = false;
  control_->SetPolicyGauge(
      "moeserve_utility_cold_share",
      "Share of the last step's routed experts computed in place (utility).",
      step_routed_ > 0 ? static_cast<double>(step_inplace_) / step_routed_ : 0);
  double tau_sum = 0;
  for (int t : tau_) tau_sum += t;
  control_->SetPolicyGauge(
      "moeserve_utility_mean_tau",
      "Hot/cold utility threshold tau, averaged over layers (utility).",
      num_layers_ > 0 ? tau_sum / num_layers_ : 0);
  std::fill(step_counts_.begin(), step_counts_.end(), 0);
  std::fill(step_tokens_.begin(), step_tokens_.end(), 0);
  step_routed_ = step_inplace_ = 0;
}

// ---------------------------------------------------------------- decisions

void UtilityPolicy::UpdateTaus() {
  const engine::ExpertCosts costs = control_->expert_costs();
  // On the hybrid path the host's compute of one expert is timed when the
  // engine starts: the in-place cost until in-place experts are measured.
  const double inplace_seconds = costs.inplace_compute_seconds > 0
                                     ? costs.inplace_compute_seconds
                                     : costs.HostSeconds(1);
  const bool measured = costs.link_seconds > 0 &&
                        costs.fast_compute_seconds > 0 && inplace_seconds > 0;
  if (!inplace_refused_ && !measured) {
    std::fill(tau_.begin(), tau_.end(), options_.initial_tau);
    return;
  }
  const int k = options_.max_utility;
  // Resident hot experts per layer, under the current taus.
  std::vector<TauProblem> problems(num_layers_);
  std::vector<int64_t> hot_resident(num_layers_, 0);
  int64_t hot_resident_total = 0;
  for (int l = 0; l < num_layers_; ++l) {
    TauProblem& p = problems[l];
    p.experts_at.assign(k + 1, 0);
    p.missing_at.assign(k + 1, 0);
    for (int e = 0; e < num_experts_; ++e) {
      const int level = view_[Index({l, e})];
      const bool resident = control_->IsResident({l, e});
      ++p.experts_at[level];
      if (!resident) ++p.missing_at[level];
      if (resident && level >= tau_[l]) ++hot_resident[l];
    }
    hot_resident_total += hot_resident[l];
  }
  const double draft =
      num_layers_ > 0 ? draft_seconds_ * draft_positions_ / num_layers_ : 0;
  for (int l = 0; l < num_layers_; ++l) {
    TauProblem& p = problems[l];
    p.max_utility = k;
    const double* r = &routed_at_[static_cast<size_t>(l) * (k + 1)];
    p.routed_at.assign(r, r + k + 1);
    p.slots_left =
        control_->capacity_slots() - (hot_resident_total - hot_resident[l]);
    p.link_seconds = costs.link_seconds;
    p.fast_seconds = costs.fast_compute_seconds;
    p.inplace_seconds = inplace_seconds;
    p.draft_seconds = draft;
    p.balance = !inplace_refused_;
    tau_[l] = SolveTau(p);
  }
}

void UtilityPolicy::PlanPrefetch() {
  struct Entry {
    int level;
    ExpertId id;
  };
  std::vector<Entry> candidates, residents;
  for (int l = 0; l < num_layers_; ++l) {
    for (int e = 0; e < num_experts_; ++e) {
      const ExpertId id{l, e};
      const int level = view_[Index(id)];
      if (control_->IsResident(id)) {
        residents.push_back({level, id});
      } else if (level >= tau_[l]) {
        candidates.push_back({level, id});
      }
    }
  }
  // Level descending, then layer, then expert (already in that order).
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Entry& a, const Entry& b) { return a.level > b.level; });
  std::stable_sort(
      residents.begin(), residents.end(),
      [](const Entry& a, const Entry& b) { return a.level < b.level; });
  int64_t free_slots =
      control_->capacity_slots() - static_cast<int64_t>(residents.size());
  size_t displaced = 0;
  std::vector<std::vector<ExpertId>> by_level(options_.max_utility + 1);
  for (const Entry& c : candidates) {
    if (free_slots > 0) {
      --free_slots;
    } else if (displaced < residents.size() &&
               residents[displaced].level < c.level) {
      ++displaced;
    } else {
      break;
    }
    by_level[c.level].push_back(c.id);
  }
  for (int u = options_.max_utility; u >= 0; --u) {
    if (by_level[u].empty()) continue;
    for (const ExpertId& id : by_level[u]) {
      recency_.Touch(id);
      issued_.push_back(id);
    }
    control_->PrefetchBatch(by_level[u], /*priority=*/u);
  }
}

void UtilityPolicy::ChooseVictims(std::span<const ExpertId> candidates,
                                  int count, std::vector<ExpertId>* victims) {
  std::vector<ExpertId> order(candidates.begin(), candidates.end());
  auto key = [this](const ExpertId& id) {
    const int level = Index(id) < view_.size() ? view_[Index(id)] : 0;
    return std::make_tuple(level, recency_.LastUse(id), id.layer, id.expert);
  };
  std::sort(
      order.begin(), order.end(),
      [&](const ExpertId& a, const ExpertId& b) { return key(a) < key(b); });
  const size_t n =
      std::min(static_cast<size_t>(std::max(count, 0)), order.size());
  victims->insert(victims->end(), order.begin(), order.begin() + n);
}

MOESERVE_REGISTER_POLICY("utility", UtilityPolicy::Create,
                         {.speculation = UtilityPolicy::Speculation,
                          .test_config = {{"drafter", "int4"},
                                          {"gamma", "2"},
                                          {"max_utility", "2"}}});

}  // namespace moeserve::policies
