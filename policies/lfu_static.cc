#include "policies/lfu_static.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "policies/internal/recency.h"
#include "spdlog/spdlog.h"

namespace moeserve::policies {

ExpertProfile ExpertProfile::Zeros(int num_layers, int num_experts) {
  ExpertProfile p;
  p.num_layers = num_layers;
  p.num_experts = num_experts;
  p.counts.assign(static_cast<size_t>(num_layers) * num_experts, 0);
  return p;
}

absl::Status ExpertProfile::Add(const engine::StepStats& stats) {
  if (stats.num_layers != num_layers || stats.num_experts != num_experts ||
      stats.activations.size() != counts.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step stats of shape ", stats.num_layers, "x", stats.num_experts, " (",
        stats.activations.size(), " counts) do not match profile ", num_layers,
        "x", num_experts));
  }
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += stats.activations[i];
  return absl::OkStatus();
}

absl::Status WriteProfile(const std::string& path,
                          const ExpertProfile& profile) {
  if (profile.counts.size() !=
      static_cast<size_t>(profile.num_layers) * profile.num_experts) {
    return absl::InvalidArgumentError("profile counts do not match its shape");
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int l = 0; l < profile.num_layers; ++l) {
    auto begin = profile.counts.begin() + l * profile.num_experts;
    rows.push_back(std::vector<uint64_t>(begin, begin + profile.num_experts));
  }
  nlohmann::json doc = {{"num_layers", profile.num_layers},
                        {"num_experts", profile.num_experts},
                        {"counts", std::move(rows)}};
  std::ofstream out(path, std::ios::trunc);
  out << doc.dump() << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<ExpertProfile> ReadProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), /*cb=*/nullptr,
                                                   /*allow_exceptions=*/false);
  auto bad = [&path](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", path, ": ", why));
  };
  if (!doc.is_object()) return bad("not a JSON object");
  auto dim = [&doc](const char* key) -> int {
    auto it = doc.find(key);
    if (it == doc.end() || !it->is_number_unsigned()) return -1;
    const uint64_t v = it->get<uint64_t>();
    return v > 0 && v <= (1u << 20) ? static_cast<int>(v) : -1;
  };
  const int num_layers = dim("num_layers");
  const int num_experts = dim("num_experts");
  if (num_layers < 0 || num_experts < 0) {
    return bad("num_layers and num_experts must be positive integers");
  }
  auto counts = doc.find("counts");
  if (counts == doc.end() || !counts->is_array() ||
      counts->size() != static_cast<size_t>(num_layers)) {
    return bad("counts must be an array of num_layers rows");
  }
  ExpertProfile profile = ExpertProfile::Zeros(num_layers, num_experts);
  for (int l = 0; l < num_layers; ++l) {
    const nlohmann::json& row = (*counts)[l];
    if (!row.is_array() || row.size() != static_cast<size_t>(num_experts)) {
      return bad(absl::StrCat("counts[", l, "] must have num_experts values"));
    }
    for (int e = 0; e < num_experts; ++e) {
      if (!row[e].is_number_unsigned()) {
        return bad(absl::StrCat("counts[", l, "][", e,
                                "] is not a non-negative integer"));
      }
      profile.counts[l * num_experts + e] = row[e].get<uint64_t>();
    }
  }
  return profile;
}

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> LfuStaticPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys(
      "lfu_static", config, {"top_percent", "profile", "profile_steps"});
  if (!keys.ok()) return keys;
  Options options;
  absl::StatusOr<double> top_percent =
      engine::GetDoubleConfig(config, "top_percent", 10, 0, 100);
  if (!top_percent.ok()) return top_percent.status();
  options.top_percent = *top_percent;
  absl::StatusOr<int64_t> steps =
      engine::GetIntConfig(config, "profile_steps", 32, 1, 1 << 30);
  if (!steps.ok()) return steps.status();
  options.profile_steps = static_cast<int>(*steps);
  if (auto it = config.find("profile"); it != config.end()) {
    if (it->second.empty()) {
      return absl::InvalidArgumentError("config key 'profile': empty path");
    }
    absl::StatusOr<ExpertProfile> profile = ReadProfile(it->second);
    if (!profile.ok()) {
      return absl::Status(
          profile.status().code(),
          absl::StrCat("config key 'profile': ", profile.status().message()));
    }
    options.profile = *std::move(profile);
  }
  return std::make_unique<LfuStaticPolicy>(std::move(options));
}

LfuStaticPolicy::LfuStaticPolicy(Options options)
    : options_(std::move(options)) {}

void LfuStaticPolicy::Attach(engine::ResidencyControl* control) {
  control_ = control;
  const int layers = control->num_layers();
  const int experts = control->num_experts();
  counts_ = ExpertProfile::Zeros(layers, experts);
  is_pinned_.assign(counts_.counts.size(), false);
  if (options_.profile.has_value()) {
    if (options_.profile->num_layers == layers &&
        options_.profile->num_experts == experts) {
      counts_ = *options_.profile;
      from_file_ = true;
    } else {
      spdlog::warn(
          "lfu_static: profile shape {}x{} does not match the model's {}x{}; "
          "profiling the first {} steps instead",
          options_.profile->num_layers, options_.profile->num_experts, layers,
          experts, options_.profile_steps);
    }
  }
}

int LfuStaticPolicy::PinBudget() const {
  const int64_t total =
      static_cast<int64_t>(control_->num_layers()) * control_->num_experts();
  int64_t n = static_cast<int64_t>(
      std::floor(total * options_.top_percent / 100.0 + 1e-9));
  if (options_.top_percent > 0 && n < 1) n = 1;
  n = std::min<int64_t>(
      n, control_->capacity_slots() - control_->experts_per_token());
  return static_cast<int>(std::clamp<int64_t>(n, 0, total));
}

void LfuStaticPolicy::PinTop() {
  pins_made_ = true;
  const int n = PinBudget();
  const int experts = counts_.num_experts;
  std::vector<std::tuple<uint64_t, int, int>> order;  // (-count, layer, e)
  order.reserve(counts_.counts.size());
  for (size_t i = 0; i < counts_.counts.size(); ++i) {
    order.emplace_back(~counts_.counts[i], static_cast<int>(i) / experts,
                       static_cast<int>(i) % experts);
  }
  std::partial_sort(order.begin(), order.begin() + n, order.end());
  for (int i = 0; i < n; ++i) {
    const engine::ExpertId id{std::get<1>(order[i]), std::get<2>(order[i])};
    if (control_->Pin(id)) {
      pinned_.push_back(id);
      is_pinned_[id.layer * experts + id.expert] = true;
    }
  }
  spdlog::info("lfu_static: pinned {} of {} experts (budget {})",
               pinned_.size(), counts_.counts.size(), n);
}

bool LfuStaticPolicy::IsPinned(engine::ExpertId id) const {
  const size_t i = static_cast<size_t>(id.layer) * counts_.num_experts +
                   static_cast<size_t>(id.expert);
  return id.layer >= 0 && id.expert >= 0 && id.expert < counts_.num_experts &&
         i < is_pinned_.size() && is_pinned_[i];
}

void LfuStaticPolicy::OnStepBegin(const engine::StepInfo& info) {
  (void)info;
  if (control_ != nullptr && from_file_ && !pins_made_) PinTop();
}

void LfuStaticPolicy::OnStepEnd(const engine::StepStats& stats) {
  if (control_ == nullptr || pins_made_ || from_file_) return;
  absl::Status added = counts_.Add(stats);
  if (!added.ok()) {
    spdlog::warn("lfu_static: {}", std::string(added.message()));
    return;
  }
  if (++steps_counted_ >= options_.profile_steps) PinTop();
}

void LfuStaticPolicy::OnLayerDone(int layer) {
  if (control_ == nullptr) return;
  for (int e : loaded_.OfLayer(layer)) {
    if (!IsPinned({layer, e})) control_->Evict({layer, e});
  }
}

void LfuStaticPolicy::ChooseVictims(
    std::span<const engine::ExpertId> candidates, int count,
    std::vector<engine::ExpertId>* victims) {
  internal::AppendLowestFirst(
      candidates, count,
      [this](engine::ExpertId id) -> uint64_t {
        const size_t i = static_cast<size_t>(id.layer) * counts_.num_experts +
                         static_cast<size_t>(id.expert);
        return id.layer >= 0 && id.expert >= 0 &&
                       id.expert < counts_.num_experts &&
                       i < counts_.counts.size()
                   ? counts_.counts[i]
                   : 0;
      },
      victims);
}

// Tests that run every policy see the pins after two steps.
MOESERVE_REGISTER_POLICY("lfu_static", LfuStaticPolicy::Create,
                         {.test_config = {{"profile_steps", "2"}}});

}  // namespace moeserve::policies
