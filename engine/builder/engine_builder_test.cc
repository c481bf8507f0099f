// BuildEngine on the mixtral_tiny fixture: a spec becomes a serving engine
// with its own policy settings and budget, and every bad field is refused
// with a message naming the engine and the field or key.
#include "engine/builder/engine_builder.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/counting_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "metrics/registry.h"

namespace moeserve::engine {
namespace {

using ::testing::HasSubstr;

std::string FixtureDir() {
  return std::string(std::getenv("TEST_SRCDIR")) +
         "/moeserve/tests/golden/mixtral_tiny";
}

class EngineBuilderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    packed_ = ModelWeights::Load(FixtureDir())->release();
    unpacked_ =
        ModelWeights::Load(FixtureDir(), {.pack_experts = false})->release();
    tokenizer_ = Tokenizer::LoadFromModelDir(FixtureDir())->release();
    backend_ = new kernels::cpu::CpuBackend({.num_threads = 2});
  }

  SharedModel Model(bool packed = true) {
    return {packed ? packed_ : unpacked_, tokenizer_, backend_, &registry_};
  }

  // Greedy tokens of one request on `built`.
  static std::vector<int32_t> Generate(BuiltEngine& built) {
    GenerationRequest r;
    r.prompt = {1, 15, 27, 3};
    r.max_new_tokens = 6;
    r.ignore_eos = true;
    auto stream = built.engine->Submit(r);
    EXPECT_TRUE(stream.ok()) << stream.status();
    std::vector<int32_t> tokens;
    GenerationEvent e;
    while ((*stream)->Pop(&e, absl::Seconds(60))) {
      EXPECT_NE(e.finish, FinishReason::kError) << e.error;
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish != FinishReason::kNone) break;
    }
    return tokens;
  }

  static inline ModelWeights* packed_;
  static inline ModelWeights* unpacked_;
  static inline Tokenizer* tokenizer_;
  static inline kernels::cpu::CpuBackend* backend_;
  metrics::Registry registry_;
};

TEST_F(EngineBuilderTest, TwoConfiguredEnginesServeWithTheirOwnSettings) {
  EngineSpec lfu;
  lfu.name = "pinned";
  lfu.policy = "lfu_static";
  lfu.policy_config = {{"top_percent", "25"}, {"profile_steps", "2"}};
  lfu.expert_cache_ratio = 0.5;
  EngineSpec lru;
  lru.name = "lru";
  lru.policy = "lru";
  lru.expert_cache_mb = 1;
  lru.slow_tier = "disk";
  absl::StatusOr<BuiltEngine> a = BuildEngine(Model(), lfu);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<BuiltEngine> b = BuildEngine(Model(), lru);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->expert_cache_bytes, ExpertCacheBytes(*packed_, 0.5, 0));
  EXPECT_EQ(b->expert_cache_bytes,
            std::max<uint64_t>(1 << 20, packed_->expert({0, 0}).bytes));
  EXPECT_EQ(a->engine->options().name, "pinned");
  // Same greedy output whatever the policy (the invariance test's property).
  EXPECT_EQ(Generate(*a), Generate(*b));
  ASSERT_NE(a->residency, nullptr);
  const ResidencyStats stats = a->residency->stats();
  EXPECT_GT(stats.hits + stats.misses, 0u);
  EXPECT_LE(stats.capacity_bytes, a->expert_cache_bytes);
}

TEST_F(EngineBuilderTest, UnknownPolicyIsNotFoundAndNamesTheEngine) {
  EngineSpec spec;
  spec.name = "x";
  spec.policy = "no_such_policy";
  absl::StatusOr<BuiltEngine> built = BuildEngine(Model(), spec);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(built.status().message(), HasSubstr("engine 'x': policy:"));
  EXPECT_THAT(built.status().message(), HasSubstr("no_such_policy"));
}

TEST_F(EngineBuilderTest, PolicyConfigKeyOfAnotherPolicyIsRefused) {
  EngineSpec spec;
  spec.policy = "lru";
  spec.policy_config = {{"top_percent", "5"}};
  absl::StatusOr<BuiltEngine> built = BuildEngine(Model(), spec);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(built.status().message(),
              HasSubstr("engine 'lru': policy_config:"));
  EXPECT_THAT(built.status().message(), HasSubstr("top_percent"));
}

TEST_F(EngineBuilderTest, EveryBadFieldIsRefusedByName) {
  struct Case {
    std::string field;
    void (*mutate)(EngineSpec*);
  };
  const std::vector<Case> cases = {
      {"name", [](EngineSpec* s) { s->name = "Bad Name"; }},
      {"expert_cache_ratio", [](EngineSpec* s) { s->expert_cache_ratio = 0; }},
      {"expert_cache_ratio",
       [](EngineSpec* s) { s->expert_cache_ratio = 1.5; }},
      {"expert_cache_mb", [](EngineSpec* s) { s->expert_cache_mb = -1; }},
      {"slow_tier", [](EngineSpec* s) { s->slow_tier = "tape"; }},
      {"link_gbps", [](EngineSpec* s) { s->link.gbps = -1; }},
      {"link_latency_us", [](EngineSpec* s) { s->link.latency_us = -1; }},
      {"inplace_compute_ratio",
       [](EngineSpec* s) { s->link.inplace_compute_ratio = 0.5; }},
      {"kv_cache_mb", [](EngineSpec* s) { s->kv_cache_bytes = 0; }},
      {"max_num_seqs", [](EngineSpec* s) { s->max_num_seqs = 0; }},
      {"max_batched_tokens", [](EngineSpec* s) { s->max_batched_tokens = 0; }},
      {"max_waiting", [](EngineSpec* s) { s->max_waiting = -1; }},
      {"drafter", [](EngineSpec* s) { s->drafter = "no_such_drafter"; }},
      {"num_speculative_tokens",
       [](EngineSpec* s) { s->num_speculative_tokens = -2; }},
      // Issue 16: accepted before, then misapplied.
      {"expert_cache_mb",
       [](EngineSpec* s) { s->expert_cache_mb = int64_t{1} << 44; }},
      {"link_gbps", [](EngineSpec* s) { s->link.gbps = 1e-300; }},
      {"link_gbps", [](EngineSpec* s) { s->link.gbps = 1e300; }},
      {"link_gbps", [](EngineSpec* s) { s->link.gbps = NAN; }},
      {"link_latency_us", [](EngineSpec* s) { s->link.latency_us = 1e300; }},
      {"inplace_compute_ratio",
       [](EngineSpec* s) { s->link.inplace_compute_ratio = 1e300; }},
      {"kv_cache_mb", [](EngineSpec* s) { s->kv_cache_bytes = ~uint64_t{0}; }},
      {"max_num_seqs", [](EngineSpec* s) { s->max_num_seqs = 1 << 30; }},
      {"max_batched_tokens",
       [](EngineSpec* s) { s->max_batched_tokens = 1 << 30; }},
      {"max_waiting", [](EngineSpec* s) { s->max_waiting = 0; }},
      {"max_waiting", [](EngineSpec* s) { s->max_waiting = 1 << 30; }},
      {"host_attention", [](EngineSpec* s) { s->host_attention = 2; }},
      {"host_attention", [](EngineSpec* s) { s->host_attention = -1; }},
  };
  for (const Case& c : cases) {
    EngineSpec spec;
    c.mutate(&spec);
    const absl::Status st = CheckEngineSpec(spec);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(st.message(), HasSubstr(c.field + ":"));
  }
  EXPECT_TRUE(CheckEngineSpec(EngineSpec()).ok());
  // The bounds themselves are accepted.
  EngineSpec edge;
  edge.expert_cache_mb = kMaxExpertCacheMb;
  edge.link.gbps = kMinLinkGbps;
  edge.link.latency_us = kMaxLinkLatencyUs;
  edge.max_waiting = 1;
  EXPECT_TRUE(CheckEngineSpec(edge).ok());
}

// A budget in MiB large enough to wrap when shifted into bytes must not
// become a tiny (or zero) fast tier.
TEST_F(EngineBuilderTest, HugeMegabyteBudgetDoesNotWrap) {
  const uint64_t all = packed_->expert_bytes();
  EXPECT_GE(ExpertCacheBytes(*packed_, 1.0, int64_t{1} << 44), all);
  EXPECT_GE(ExpertCacheBytes(*packed_, 1.0, INT64_MAX), all);
}

TEST_F(EngineBuilderTest, HostSlowTierNeedsPackedExperts) {
  EngineSpec spec;
  absl::StatusOr<BuiltEngine> built =
      BuildEngine(Model(/*packed=*/false), spec);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kFailedPrecondition);
  spec.slow_tier = "disk";
  EXPECT_TRUE(BuildEngine(Model(/*packed=*/false), spec).ok());
  const std::vector<EngineSpec> specs = {spec};
  EXPECT_FALSE(NeedsPackedExperts(specs));
}

// Hybrid execution (issue 32): --cpu_moe_layers is checked against the
// model, the host pool is built on a fast tier in backend memory, and the
// output does not change.
TEST_F(EngineBuilderTest, CpuMoeLayersAreCheckedAndKeepTheOutput) {
  EngineSpec spec;
  spec.expert_cache_ratio = 0.5;
  absl::StatusOr<BuiltEngine> plain = BuildEngine(Model(), spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<int32_t> expected = Generate(*plain);
  const int layers = packed_->num_layers();

  spec.cpu_moe_layers = layers + 1;
  absl::StatusOr<BuiltEngine> built = BuildEngine(Model(), spec);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(built.status().message(), HasSubstr("cpu_moe_layers"));
  EXPECT_THAT(built.status().message(),
              HasSubstr(absl::StrCat("[0, ", layers, "]")));

  spec.cpu_moe_layers = -1;
  built = BuildEngine(Model(), spec);
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(built.status().message(), HasSubstr("cpu_moe_layers"));

  for (bool in_backend_memory : {false, true}) {
    spec.cpu_moe_layers = 1;
    spec.host_expert_threads = 1;
    spec.fast_tier_in_backend_memory = in_backend_memory;
    built = BuildEngine(Model(), spec);
    ASSERT_TRUE(built.ok()) << built.status();
    // On the device path the host pool exists and was timed at start.
    EXPECT_EQ(built->residency->host_compute() != nullptr, in_backend_memory);
    if (in_backend_memory) {
      EXPECT_GT(built->residency->expert_costs().host_seconds_first_row, 0);
    }
    EXPECT_EQ(Generate(*built), expected);
    // Layer 0 never moves: every expert of it was computed in place.
    const ResidencyStats stats = built->residency->stats();
    EXPECT_GT(stats.inplace, 0u);
  }
}

// Host attention (issue 33, seed 002 §4.2): the KV cache leaves the
// device, whose backend then allocates no pool for it; on a fast tier in
// device memory those bytes join the expert cache; greedy output does not
// change.
TEST_F(EngineBuilderTest, HostAttentionMovesTheKvCacheOffTheDevice) {
  EngineSpec spec;
  spec.expert_cache_ratio = 0.25;
  spec.kv_cache_bytes = 4 << 20;
  spec.host_expert_threads = 1;
  kernels::CountingBackend device(backend_);
  const SharedModel model{packed_, tokenizer_, &device, nullptr};
  for (bool in_backend_memory : {false, true}) {
    spec.fast_tier_in_backend_memory = in_backend_memory;
    spec.host_attention = 0;
    const int64_t before_off = device.counts().allocated_bytes;
    absl::StatusOr<BuiltEngine> off = BuildEngine(model, spec);
    ASSERT_TRUE(off.ok()) << off.status();
    const int64_t device_off = device.counts().allocated_bytes - before_off;
    const std::vector<int32_t> expected = Generate(*off);
    EXPECT_EQ(off->kv_bytes_to_experts, 0u);

    spec.host_attention = 1;
    const int64_t before_on = device.counts().allocated_bytes;
    absl::StatusOr<BuiltEngine> on = BuildEngine(model, spec);
    ASSERT_TRUE(on.ok()) << on.status();
    const int64_t device_on = device.counts().allocated_bytes - before_on;
    EXPECT_TRUE(on->engine->stats().kv_total_blocks > 0);
    EXPECT_EQ(Generate(*on), expected) << in_backend_memory;
    // Device bytes other than the expert slots: the KV pool went.
    auto slots = [&](const BuiltEngine& b) {
      return in_backend_memory
                 ? static_cast<int64_t>(b.residency->stats().capacity_bytes)
                 : int64_t{0};
    };
    EXPECT_GT((device_off - slots(*off)) - (device_on - slots(*on)),
              static_cast<int64_t>(spec.kv_cache_bytes) * 9 / 10);
    if (in_backend_memory) {
      EXPECT_EQ(on->kv_bytes_to_experts, spec.kv_cache_bytes);
      EXPECT_EQ(on->expert_cache_bytes,
                off->expert_cache_bytes + spec.kv_cache_bytes);
      EXPECT_GT(on->residency->stats().slots, off->residency->stats().slots);
    } else {
      // Expert slots in host RAM: no device memory to give them.
      EXPECT_EQ(on->kv_bytes_to_experts, 0u);
      EXPECT_EQ(on->expert_cache_bytes, off->expert_cache_bytes);
    }
  }
}

// The throughput policy's host_attention key asks for the same engine.
TEST_F(EngineBuilderTest, ThroughputPolicyKeyBuildsHostAttention) {
  EngineSpec spec;
  spec.expert_cache_ratio = 0.25;
  spec.kv_cache_bytes = 4 << 20;
  spec.host_expert_threads = 1;
  spec.fast_tier_in_backend_memory = true;
  spec.policy = "throughput";
  spec.drafter = "none";
  spec.policy_config = {{"host_attention", "1"}};
  const SharedModel model{packed_, tokenizer_, backend_, nullptr};
  absl::StatusOr<BuiltEngine> built = BuildEngine(model, spec);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->spec.host_attention, 1);
  EXPECT_EQ(built->kv_bytes_to_experts, spec.kv_cache_bytes);
  spec.policy_config.clear();
  absl::StatusOr<BuiltEngine> plain = BuildEngine(model, spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->spec.host_attention, 0);
  EXPECT_EQ(plain->kv_bytes_to_experts, 0u);
}

TEST(PolicyConfigTextTest, SortedKeyValuePairs) {
  EXPECT_EQ(PolicyConfigText({}), "");
  EXPECT_EQ(PolicyConfigText({{"top_percent", "5"}, {"profile_steps", "2"}}),
            "profile_steps=2,top_percent=5");
}

}  // namespace
}  // namespace moeserve::engine
