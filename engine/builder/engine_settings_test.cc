#include "engine/builder/engine_settings.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "engine/builder/engine_setting_flags.h"
#include "engine/builder/engine_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(int, max_waiting);
ABSL_DECLARE_FLAG(double, link_gbps);
ABSL_DECLARE_FLAG(std::string, draft_budget);
ABSL_DECLARE_FLAG(int, kv_cache_mb);

namespace moeserve::engine {
namespace {

using ::testing::HasSubstr;

TEST(EngineSettings, NamesAreUniqueAndFindable) {
  std::vector<absl::string_view> names;
  for (const EngineSetting& s : EngineSettings()) {
    EXPECT_EQ(FindEngineSetting(s.name), &s);
    EXPECT_FALSE(s.help.empty()) << s.name;
    names.push_back(s.name);
  }
  EXPECT_THAT(
      names,
      ::testing::ElementsAre(
          "expert_cache_ratio", "expert_cache_mb", "slow_tier", "link_gbps",
          "link_latency_us", "inplace_compute_ratio", "kv_cache_mb",
          "max_num_seqs", "max_batched_tokens", "max_waiting",
          "max_running_per_caller", "max_waiting_per_caller", "drafter",
          "num_speculative_tokens", "draft_model_dir", "cpu_moe_layers",
          "host_expert_threads", "host_attention", "draft_budget"));
  EXPECT_EQ(FindEngineSetting("policy"), nullptr);
}

// Each default is accepted by its own row, and writing it back changes
// nothing.
TEST(EngineSettings, DefaultsRoundTrip) {
  for (const EngineSetting& s : EngineSettings()) {
    const SettingValue v = DefaultSettingValue(s);
    EXPECT_TRUE(CheckSettingValue(s, v).ok()) << s.name;
    EngineSpec spec;
    ASSERT_TRUE(SetSetting(s, v, &spec).ok()) << s.name;
    EXPECT_EQ(s.access.get(spec), v) << s.name;
  }
  EXPECT_TRUE(CheckEngineSettings(EngineSpec()).ok());
  EXPECT_EQ(DefaultSettingValue(*FindEngineSetting("kv_cache_mb")),
            SettingValue(int64_t{256}));
  EXPECT_EQ(DefaultSettingValue(*FindEngineSetting("draft_model_dir")),
            SettingValue(std::string("models/demo-draft")));
}

// The exact messages the server, its files and the e2e tests have always
// given (README, server/engines_config.h).
TEST(EngineSettings, MessagesNameTheSettingAndItsRange) {
  struct Case {
    const char* name;
    SettingValue value;
    SettingSource source;
    const char* message;
  };
  const Case cases[] = {
      {"expert_cache_ratio", 1.5, SettingSource::kSpecOrFlag,
       "expert_cache_ratio: must be in (0, 1], got 1.5"},
      {"expert_cache_ratio", 0.0, SettingSource::kSpecOrFlag,
       "expert_cache_ratio: must be in (0, 1], got 0"},
      {"expert_cache_mb", int64_t{1} << 44, SettingSource::kSpecOrFlag,
       "expert_cache_mb: must be in [1, 16777216] MiB (0: use "
       "expert_cache_ratio), got 17592186044416"},
      {"slow_tier", std::string("tape"), SettingSource::kSpecOrFlag,
       "slow_tier: must be host or disk, got 'tape'"},
      {"link_gbps", 1e-300, SettingSource::kSpecOrFlag,
       "link_gbps: must be 0 (off) or in [0.001, 100000] GB/s, got 1e-300"},
      {"link_latency_us", -1.0, SettingSource::kSpecOrFlag,
       "link_latency_us: must be in [0, 1e+06], got -1"},
      {"inplace_compute_ratio", 0.5, SettingSource::kSpecOrFlag,
       "inplace_compute_ratio: must be in [1, 1000], got 0.5"},
      {"kv_cache_mb", int64_t{0}, SettingSource::kSpecOrFlag,
       "kv_cache_mb: must be in [1, 16777216], got 0"},
      {"max_num_seqs", int64_t{0}, SettingSource::kSpecOrFlag,
       "max_num_seqs: must be in [1, 4096], got 0"},
      {"max_batched_tokens", int64_t{1} << 30, SettingSource::kSpecOrFlag,
       "max_batched_tokens: must be in [1, 1048576], got 1073741824"},
      {"max_waiting", int64_t{0}, SettingSource::kFile,
       "max_waiting: must be in [1, 1048576], got 0"},
      {"num_speculative_tokens", int64_t{-2}, SettingSource::kSpecOrFlag,
       "num_speculative_tokens: must be in [0, 16] (0: adaptive), got -2"},
      {"num_speculative_tokens", int64_t{-1}, SettingSource::kFile,
       "num_speculative_tokens: must be in [0, 16] (0: adaptive; leave it "
       "out for the policy's own), got -1"},
      {"draft_budget", std::string("more"), SettingSource::kFile,
       "draft_budget: must be shared or extra, got 'more'"},
  };
  for (const Case& c : cases) {
    const absl::Status st =
        CheckSettingValue(*FindEngineSetting(c.name), c.value, c.source);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(st.message(), c.message);
  }
}

TEST(EngineSettings, SpecialValues) {
  const EngineSetting& k = *FindEngineSetting("num_speculative_tokens");
  EXPECT_TRUE(CheckSettingValue(k, int64_t{-1}).ok());  // the policy's own
  EXPECT_TRUE(CheckSettingValue(k, int64_t{0}, SettingSource::kFile).ok());
  const EngineSetting& gbps = *FindEngineSetting("link_gbps");
  EXPECT_TRUE(CheckSettingValue(gbps, 0.0, SettingSource::kFile).ok());
  EXPECT_FALSE(CheckSettingValue(gbps, NAN).ok());
  const EngineSetting& mb = *FindEngineSetting("expert_cache_mb");
  EXPECT_TRUE(CheckSettingValue(mb, int64_t{0}, SettingSource::kFile).ok());
  EXPECT_FALSE(CheckSettingValue(mb, int64_t{-1}).ok());
  // Any drafter name here: the registry is CheckEngineSpec's to ask.
  EXPECT_TRUE(
      CheckSettingValue(*FindEngineSetting("drafter"), std::string("x")).ok());
}

// kv_cache_bytes is checked exactly in bytes, whole MiB or not.
TEST(EngineSettings, KvCacheBytesAreCheckedExactly) {
  EngineSpec spec;
  spec.kv_cache_bytes = (uint64_t{1} << 20) + 1;
  EXPECT_TRUE(CheckEngineSettings(spec).ok());
  spec.kv_cache_bytes = (uint64_t{1} << 20) - 1;
  EXPECT_THAT(CheckEngineSettings(spec).message(), HasSubstr("kv_cache_mb:"));
  spec.kv_cache_bytes = kMaxKvCacheBytes;
  EXPECT_TRUE(CheckEngineSettings(spec).ok());
  spec.kv_cache_bytes = kMaxKvCacheBytes + 1;
  EXPECT_THAT(CheckEngineSettings(spec).message(), HasSubstr("kv_cache_mb:"));
  spec.kv_cache_bytes = ~uint64_t{0};
  EXPECT_THAT(CheckEngineSettings(spec).message(), HasSubstr("kv_cache_mb:"));
  ASSERT_TRUE(
      SetSetting(*FindEngineSetting("kv_cache_mb"), int64_t{32}, &spec).ok());
  EXPECT_EQ(spec.kv_cache_bytes, uint64_t{32} << 20);
}

TEST(EngineSettings, SetRefusesTheWrongTypeAndBadValues) {
  EngineSpec spec;
  const EngineSetting& seqs = *FindEngineSetting("max_num_seqs");
  EXPECT_EQ(SetSetting(seqs, 2.0, &spec).code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(SetSetting(seqs, int64_t{1} << 40, &spec).ok());
  EXPECT_EQ(spec.max_num_seqs, 64);
  ASSERT_TRUE(SetSetting(seqs, int64_t{8}, &spec).ok());
  EXPECT_EQ(spec.max_num_seqs, 8);
  ASSERT_TRUE(
      SetSetting(*FindEngineSetting("inplace_compute_ratio"), 2.0, &spec).ok());
  EXPECT_EQ(spec.link.inplace_compute_ratio, 2.0);
}

// all_engine_setting_flags: one flag per row, with the row's default and
// help, read back by EngineSettingsFromFlags.
TEST(EngineSettingFlags, EveryRowHasItsFlag) {
  for (const EngineSetting& s : EngineSettings()) {
    const absl::CommandLineFlag* flag =
        absl::FindCommandLineFlag(std::string(s.name));
    ASSERT_NE(flag, nullptr) << s.name;
    EXPECT_EQ(flag->Help(), s.help) << s.name;
    const SettingValue d = DefaultSettingValue(s);
    EXPECT_EQ(flag->DefaultValue(), std::holds_alternative<double>(d)
                                        ? absl::UnparseFlag(std::get<double>(d))
                                        : SettingValueText(d))
        << s.name;
  }
  absl::FlagSaver saver;
  EngineSpec spec;
  spec.name = "x";
  spec.max_num_seqs = 3;
  ASSERT_TRUE(EngineSettingsFromFlags(&spec).ok());
  EXPECT_EQ(spec.name, "x");  // not a setting
  EXPECT_EQ(spec.max_num_seqs, 64);
  EXPECT_EQ(spec.draft_model_dir, "models/demo-draft");
  absl::SetFlag(&FLAGS_kv_cache_mb, 8);
  absl::SetFlag(&FLAGS_link_gbps, 2.5);
  ASSERT_TRUE(EngineSettingsFromFlags(&spec).ok());
  EXPECT_EQ(spec.kv_cache_bytes, uint64_t{8} << 20);
  EXPECT_EQ(spec.link.gbps, 2.5);
}

TEST(EngineSettingFlags, RefusalsNameTheFlag) {
  absl::FlagSaver saver;
  EngineSpec spec;
  absl::SetFlag(&FLAGS_max_waiting, 0);
  EXPECT_EQ(EngineSettingsFromFlags(&spec).message(),
            "--max_waiting: must be in [1, 1048576], got 0");
  absl::SetFlag(&FLAGS_max_waiting, 1);
  absl::SetFlag(&FLAGS_kv_cache_mb, -5);
  EXPECT_EQ(EngineSettingsFromFlags(&spec).message(),
            "--kv_cache_mb: must be in [1, 16777216], got -5");
  absl::SetFlag(&FLAGS_kv_cache_mb, 1);
  absl::SetFlag(&FLAGS_draft_budget, "shared,extra");
  EXPECT_EQ(EngineSettingsFromFlags(&spec).message(),
            "--draft_budget: must be shared or extra, got 'shared,extra'");
}

}  // namespace
}  // namespace moeserve::engine
