#include "policies/throughput.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::policies {
namespace {

// Least-squares slope of y on x, clamped to >= 0; 0 when x spans fewer than
// `min_spread`.
double FitSlope(const std::vector<double>& x, const std::vector<double>& y,
                double min_spread) {
  if (x.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  if (*hi - *lo < min_spread) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
  mx /= x.size();
  my /= y.size();
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxx > 0 ? std::max(sxy / sxx, 0.0) : 0;
}

}  // namespace

double ResidentShare(int layers, int experts, int slots) {
  const double all = static_cast<double>(layers) * experts;
  if (all <= 0 || slots >= all) return 1.0;
  return std::max(0.0, slots - static_cast<double>(experts)) / all;
}

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> ThroughputPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys(
      "throughput", config,
      {"num_speculative_tokens", "max_speculative_tokens",
       "stream_all_coverage", "prefetch_priority", "drafter",
       "host_attention"});
  if (!keys.ok()) return keys;
  Options options;
  absl::StatusOr<engine::SpeculativeTokens> k =
      engine::GetSpeculativeTokens(config);
  if (!k.ok()) return k.status();
  options.max_speculative_tokens = k->max;
  options.num_speculative_tokens = k->num;
  absl::StatusOr<double> coverage = engine::GetDoubleConfig(
      config, "stream_all_coverage", /*default_value=*/0.9,
      /*min_value=*/0, /*max_value=*/1);
  if (!coverage.ok()) return coverage.status();
  options.stream_all_coverage = *coverage;
  absl::StatusOr<int64_t> priority =
      engine::GetIntConfig(config, "prefetch_priority", /*default_value=*/1,
                           /*min_value=*/-1000, /*max_value=*/1000);
  if (!priority.ok()) return priority.status();
  options.prefetch_priority = static_cast<int>(*priority);
  // The drafter key is the traits' (Speculation), checked here as well.
  if (absl::Status s = Speculation(config).status(); !s.ok()) return s;
  return std::make_unique<ThroughputPolicy>(std::move(options));
}

absl::StatusOr<engine::SpeculationDefaults> ThroughputPolicy::Speculation(
    const engine::PolicyConfig& config) {
  absl::StatusOr<engine::SpeculationDefaults> speculation =
      engine::DrafterKeySpeculation(config, "external");
  if (!speculation.ok()) return speculation.status();
  absl::StatusOr<int64_t> host_attention =
      engine::GetIntConfig(config, "host_attention", /*default_value=*/0,
                           /*min_value=*/0, /*max_value=*/1);
  if (!host_attention.ok()) return host_attention.status();
  speculation->host_attention = *host_attention == 1;
  return speculation;
}

void ThroughputPolicy::Attach(engine::ResidencyControl* control) {
  control_ = control;
  num_layers_ = std::max(control->num_layers(), 0);
  num_experts_ = std::max(control->num_experts(), 0);
  top_k_ = std::clamp(control->experts_per_token(), 0, num_experts_);
  cursor_ = -1;
  stream_all_ = false;
  lookahead_.assign(num_layers_, {});
}

double ThroughputPolicy::Coverage(double tokens) const {
  if (num_experts_ <= 0 || tokens <= 0) return 0;
  const double miss = 1.0 - static_cast<double>(top_k_) / num_experts_;
  return 1.0 - std::pow(std::max(miss, 0.0), tokens);
}

// ---- Speculative governor -------------------------------------------------

void ThroughputPolicy::Record(const engine::DraftLengthQuery& q) {
  const Sample s{q.mean_context_tokens, q.draft_seconds_per_position,
                 q.verify_seconds_base, q.verify_seconds_per_draft};
  if (!samples_.empty()) {
    const Sample& last = samples_.back();
    if (last.draft == s.draft && last.base == s.base &&
        last.per_draft == s.per_draft) {
      return;  // no new measurement since
    }
  }
  samples_.push_back(s);
  while (samples_.size() > kFitWindow) samples_.pop_front();
  std::vector<double> x, draft, base, per_draft;
  for (const Sample& r : samples_) {
    x.push_back(r.context);
    draft.push_back(r.draft);
    base.push_back(r.base);
    per_draft.push_back(r.per_draft);
  }
  draft_slope_ = FitSlope(x, draft, kMinContextSpread);
  base_slope_ = FitSlope(x, base, kMinContextSpread);
  per_draft_slope_ = FitSlope(x, per_draft, kMinContextSpread);
}

ThroughputPolicy::StepEstimate ThroughputPolicy::Estimate(
    const engine::DraftLengthQuery& q, int k) const {
  StepEstimate e;
  const double n = std::max(q.num_seqs, 1);
  // The timings moved from where they were measured to this context.
  const double shift =
      samples_.empty() ? 0 : q.mean_context_tokens - samples_.back().context;
  const double draft =
      std::max(q.draft_seconds_per_position + draft_slope_ * shift, 0.0);
  const double base =
      std::max(q.verify_seconds_base + base_slope_ * shift, 0.0);
  const double per_draft =
      std::max(q.verify_seconds_per_draft + per_draft_slope_ * shift, 0.0);
  e.tokens = 1;
  double run = 1;
  for (int i = 1; i <= k && i <= static_cast<int>(q.acceptance.size()); ++i) {
    run *= std::clamp(q.acceptance[i - 1], 0.0, 1.0);
    e.tokens += run;
  }
  const double layers = std::max(num_layers_, 1);
  const double slots_share =
      ResidentShare(num_layers_, num_experts_,
                    control_ != nullptr ? control_->capacity_slots() : 0);
  const double distinct = num_experts_ * Coverage(n * (k + 1));
  e.link_per_layer =
      std::max(q.link_seconds_per_expert, 0.0) * distinct * (1.0 - slots_share);
  e.compute_per_layer = (base + n * k * per_draft) / layers;
  e.draft_seconds = k * draft;
  const double c = e.compute_per_layer, x = e.link_per_layer;
  e.seconds = e.draft_seconds + x + (layers - 1) * std::max(c, x) + c;
  e.tokens_per_second = e.seconds > 0 ? n * e.tokens / e.seconds : 0;
  return e;
}

int ThroughputPolicy::ChooseDraftLength(const engine::DraftLengthQuery& q) {
  int max_k = std::max(std::min(q.max_k, options_.max_speculative_tokens), 0);
  const bool measured = !q.acceptance.empty() &&
                        q.draft_seconds_per_position > 0 &&
                        q.verify_seconds_base > 0;
  if (!measured) {
    zero_streak_ = 0;
    return std::clamp(options_.num_speculative_tokens, 0, max_k);
  }
  Record(q);
  max_k = std::min(max_k, static_cast<int>(q.acceptance.size()));
  int best_k = 0;
  double best = Estimate(q, 0).tokens_per_second;
  for (int k = 1; k <= max_k; ++k) {
    const double theta = Estimate(q, k).tokens_per_second;
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

// ---- Expert placement -----------------------------------------------------

void ThroughputPolicy::OnStepBegin(const engine::StepInfo& info) {
  cursor_ = -1;
  if (control_ == nullptr || num_layers_ == 0) return;
  stream_all_ = Coverage(info.num_tokens) >= options_.stream_all_coverage;
  StreamLayer(0, /*routing_layer_experts=*/0, {});
}

void ThroughputPolicy::OnLookahead(const engine::ExpertLookahead& lookahead) {
  // Only the complete window is kept (the engine delivers it last).
  if (lookahead.experts.size() <
      static_cast<size_t>(lookahead.planned_positions)) {
    return;
  }
  lookahead_.assign(num_layers_, {});
  for (const auto& position : lookahead.experts) {
    const int layers = std::min(static_cast<int>(position.size()), num_layers_);
    for (int l = 0; l < layers; ++l) {
      for (int e : position[l]) {
        if (e >= 0 && e < num_experts_) lookahead_[l].push_back(e);
      }
    }
  }
}

void ThroughputPolicy::OnRoute(int layer, std::span<const int> experts,
                               std::span<const int> token_counts,
                               const float* hidden, int64_t n) {
  (void)token_counts;
  cursor_ = layer;
  if (control_ == nullptr || layer + 1 >= num_layers_) return;
  std::vector<int> predicted;
  if (!stream_all_ && hidden != nullptr && n > 0 && top_k_ > 0) {
    predicted = control_->PredictExperts(layer + 1, hidden, n, top_k_);
  }
  StreamLayer(layer + 1, static_cast<int>(experts.size()),
              std::move(predicted));
}

void ThroughputPolicy::StreamLayer(int layer, int routing_layer_experts,
                                   std::vector<int> predicted) {
  std::vector<int> want;
  if (stream_all_) {
    for (int e = 0; e < num_experts_; ++e) want.push_back(e);
  } else {
    want = std::move(predicted);
    if (layer < static_cast<int>(lookahead_.size())) {
      want.insert(want.end(), lookahead_[layer].begin(),
                  lookahead_[layer].end());
    }
    want.erase(
        std::remove_if(want.begin(), want.end(),
                       [this](int e) { return e < 0 || e >= num_experts_; }),
        want.end());
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
  }
  std::vector<engine::ExpertId> missing;
  for (int e : want) {
    const engine::ExpertId id{layer, e};
    if (!control_->IsResident(id)) missing.push_back(id);
  }
  // The layer being computed keeps its slots.
  const int room = control_->capacity_slots() - routing_layer_experts;
  if (missing.empty() || static_cast<int>(missing.size()) > room) return;
  for (const engine::ExpertId& id : missing) recency_.Touch(id);
  control_->PrefetchBatch(missing, options_.prefetch_priority);
}

void ThroughputPolicy::OnStepEnd(const engine::StepStats& stats) {
  (void)stats;
  cursor_ = -1;
  // The window verified this step is spent.
  for (std::vector<int>& experts : lookahead_) experts.clear();
}

int ThroughputPolicy::NextUse(int layer) const {
  return layer > cursor_ ? layer - cursor_ : layer - cursor_ + num_layers_;
}

void ThroughputPolicy::ChooseVictims(
    std::span<const engine::ExpertId> candidates, int count,
    std::vector<engine::ExpertId>* victims) {
  const size_t n =
      std::min(static_cast<size_t>(std::max(count, 0)), candidates.size());
  if (n == 0) return;
  // Ascending = most evictable first: the farthest next use in the sweep,
  // then least recently used, then (layer, expert).
  std::vector<std::tuple<int, uint64_t, int, int>> order;
  order.reserve(candidates.size());
  for (const engine::ExpertId& id : candidates) {
    order.emplace_back(-NextUse(id.layer), recency_.LastUse(id), id.layer,
                       id.expert);
  }
  std::partial_sort(order.begin(), order.begin() + n, order.end());
  for (size_t i = 0; i < n; ++i) {
    victims->push_back({std::get<2>(order[i]), std::get<3>(order[i])});
  }
}

// Small k bounds keep the invariance test's verifications short; int4:
// those tests have no draft model.
MOESERVE_REGISTER_POLICY("throughput", ThroughputPolicy::Create,
                         {.speculation = ThroughputPolicy::Speculation,
                          .test_config = {{"drafter", "int4"},
                                          {"num_speculative_tokens", "2"},
                                          {"max_speculative_tokens", "4"}}});

}  // namespace moeserve::policies
