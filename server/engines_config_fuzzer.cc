// libFuzzer target: the --engines_config file parser (ParseEnginesConfig)
// and the --engines / --ab flag parsers (ParseEngineSpecs, ParseAbSplit).
//
// Built outside Bazel without the real policies and drafters (their code
// pulls in the whole engine): two stand-in policies registered here, "lru"
// and "lfu_static" (which accepts a top_percent key), are enough for
// CheckEngineSpec to accept engines, so the parser's later stages (the
// default engine, the A/B split) are reached too.
//
// Input: one mode byte (bit 0: the flag parsers; else the JSON file).
// Checked: no crash; an accepted config has 1..kMaxEngines engines, each
// passing CheckEngineSpec, and A/B weights that are finite and sum to 1.
//
// Built and run by tests/fuzz/run_fuzzers.sh (engines_config_fuzzer).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/builder/engine_spec.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "server/engines_config.h"
#include "server/server_options.h"

namespace {

namespace engine = moeserve::engine;
using moeserve::engine::EngineSpec;

class StandInPolicy : public moeserve::engine::OffloadPolicy {
 public:
  explicit StandInPolicy(std::string_view name) : name_(name) {}
  std::string_view name() const override { return name_; }
  void ChooseVictims(
      std::span<const moeserve::engine::ExpertId> candidates, int count,
      std::vector<moeserve::engine::ExpertId>* victims) override {
    for (int i = 0; i < count && i < static_cast<int>(candidates.size()); ++i) {
      victims->push_back(candidates[i]);
    }
  }

 private:
  std::string name_;
};

absl::StatusOr<std::unique_ptr<moeserve::engine::OffloadPolicy>> MakeLru(
    const engine::PolicyConfig& config) {
  if (auto st = engine::CheckConfigKeys("lru", config, {}); !st.ok()) {
    return st;
  }
  return std::make_unique<StandInPolicy>("lru");
}

absl::StatusOr<std::unique_ptr<moeserve::engine::OffloadPolicy>> MakeLfu(
    const engine::PolicyConfig& config) {
  if (auto st = engine::CheckConfigKeys("lfu_static", config, {"top_percent"});
      !st.ok()) {
    return st;
  }
  if (auto v = engine::GetDoubleConfig(config, "top_percent", 10, 0, 100);
      !v.ok()) {
    return v.status();
  }
  return std::make_unique<StandInPolicy>("lfu_static");
}

MOESERVE_REGISTER_POLICY("lru", MakeLru);
MOESERVE_REGISTER_POLICY("lfu_static", MakeLfu);

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "engines_config_fuzzer: %s\n", what.c_str());
  std::abort();
}

void CheckAb(const std::vector<moeserve::server::AbArm>& ab) {
  if (ab.empty()) return;
  double sum = 0;
  for (const auto& arm : ab) {
    if (!std::isfinite(arm.weight) || arm.weight < 0) {
      Fail("an A/B weight is not a finite number >= 0");
    }
    sum += arm.weight;
  }
  if (std::abs(sum - 1) > 1e-9) Fail("A/B weights do not sum to 1");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool flags = data[0] & 1;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  EngineSpec defaults;
  if (flags) {
    // "--engines text|--ab text" (the first '|' splits them).
    const size_t bar = text.find('|');
    auto specs =
        moeserve::server::ParseEngineSpecs(text.substr(0, bar), defaults);
    if (specs.ok() && specs->size() > moeserve::server::kMaxEngines) {
      Fail("--engines accepted more than kMaxEngines engines");
    }
    if (specs.ok()) {
      for (const EngineSpec& s : *specs) {
        if (s.expert_cache_mb < 0 ||
            s.expert_cache_mb > moeserve::engine::kMaxExpertCacheMb ||
            !(s.expert_cache_ratio > 0 && s.expert_cache_ratio <= 1)) {
          Fail("--engines accepted a budget out of range");
        }
      }
    }
    if (bar != std::string::npos) {
      auto ab = moeserve::server::ParseAbSplit(text.substr(bar + 1));
      if (ab.ok()) CheckAb(*ab);
    }
    return 0;
  }
  auto config = moeserve::server::ParseEnginesConfig(text, defaults);
  if (!config.ok()) return 0;
  if (config->engines.empty() ||
      config->engines.size() > moeserve::server::kMaxEngines) {
    Fail("accepted a config with 0 or too many engines");
  }
  for (const EngineSpec& spec : config->engines) {
    if (auto st = moeserve::engine::CheckEngineSpec(spec); !st.ok()) {
      Fail("accepted an engine CheckEngineSpec refuses: " + st.ToString());
    }
  }
  CheckAb(config->ab);
  return 0;
}
