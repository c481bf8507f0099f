// What the server reports of each engine's speculation: ListModels and
// moeserve_engine_info show the drafter and k the engine runs (resolved
// from its policy where the flags and --engines_config leave them open),
// never the unresolved "" / -1. And an A/B of "lru" against "lru + self
// draft" in one process serves the same greedy tokens from both.
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"
#include "proto/moeserve.pb.h"
#include "server/engine_host.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "server/testing/handoff_fixture.h"

namespace moeserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<ServerOptions> Options(const std::string& config,
                                      double expert_cache_ratio = 0.5) {
  ServerOptions options;
  options.model_dir = std::string(std::getenv("TEST_SRCDIR")) +
                      "/moeserve/tests/golden/mixtral_tiny";
  options.threads = 2;
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/engines.json";
  std::ofstream(path) << config;
  EngineFlags flags;
  flags.engines_config = path;
  flags.defaults.expert_cache_ratio = expert_cache_ratio;
  flags.defaults.kv_cache_bytes = 8 << 20;
  flags.defaults.max_num_seqs = 4;
  if (absl::Status st = ResolveEngines(flags, &options); !st.ok()) return st;
  return options;
}

// Greedy tokens of one request on `engine`.
std::vector<uint32_t> Greedy(EngineHost* host, const std::string& engine) {
  v1::GenerateRequest r;
  r.set_policy(engine);
  for (uint32_t id : {1u, 7u, 9u, 11u}) r.add_prompt_token_ids(id);
  r.mutable_sampling()->set_max_new_tokens(16);
  r.mutable_sampling()->set_ignore_eos(true);
  absl::StatusOr<std::unique_ptr<GenerateCall>> call =
      host->StartGenerate(r, absl::InfiniteFuture(), "test");
  EXPECT_TRUE(call.ok()) << call.status();
  std::vector<uint32_t> tokens;
  if (!call.ok()) return tokens;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  v1::GenerateResponse response;
  absl::Status final_status;
  while (absl::Now() < give_up) {
    if (!(*call)->Next(&response, &final_status)) {
      absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    tokens.insert(tokens.end(), response.token_ids().begin(),
                  response.token_ids().end());
    if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      EXPECT_EQ(response.finish_reason(), v1::LENGTH);
      EXPECT_TRUE(final_status.ok()) << final_status;
      return tokens;
    }
  }
  ADD_FAILURE() << "no finish within 60 s on " << engine;
  return tokens;
}

// A server's metrics and engine host for `options`, and what ListModels
// says of each engine, by name.
struct Served {
  metrics::Registry registry;
  std::unique_ptr<ServerMetrics> server_metrics;
  std::unique_ptr<EngineHost> host;
  std::map<std::string, v1::EngineInfo> engines;
};

void Serve(const absl::StatusOr<ServerOptions>& options, Served* served) {
  ASSERT_TRUE(options.ok()) << options.status();
  absl::StatusOr<std::unique_ptr<ServerMetrics>> server_metrics =
      ServerMetrics::Create(&served->registry, *options, [] { return true; });
  ASSERT_TRUE(server_metrics.ok()) << server_metrics.status();
  served->server_metrics = *std::move(server_metrics);
  absl::StatusOr<std::unique_ptr<EngineHost>> host = EngineHost::Create(
      *options, &served->registry, testing::HandOffTokenizer(*options));
  ASSERT_TRUE(host.ok()) << host.status();
  served->host = *std::move(host);
  const v1::ListModelsResponse models = served->host->ListModels();
  ASSERT_EQ(models.models_size(), 1);
  for (const v1::EngineInfo& e : models.models(0).engines()) {
    served->engines[e.name()] = e;
  }
}

TEST(EngineInfoTest, ListModelsAndEngineInfoShowTheResolvedDrafterAndK) {
  absl::StatusOr<ServerOptions> options = Options(R"({
    "engines": [
      {"name": "lru", "policy": "lru"},
      {"name": "lru_self", "policy": "lru", "drafter": "self",
       "num_speculative_tokens": 3},
      {"name": "self_spec"},
      {"name": "self_spec_off", "policy": "self_spec", "drafter": "none"}
    ],
    "ab": {"lru": 1, "lru_self": 1}
  })");
  Served served;
  ASSERT_NO_FATAL_FAILURE(Serve(options, &served));
  metrics::Registry& registry = served.registry;
  EngineHost* host = served.host.get();
  std::map<std::string, v1::EngineInfo>& engines = served.engines;
  ASSERT_EQ(engines.size(), 4u);
  EXPECT_EQ(engines["lru"].drafter(), "none");
  EXPECT_EQ(engines["lru_self"].drafter(), "self");
  EXPECT_EQ(engines["lru_self"].num_speculative_tokens(), 3u);
  EXPECT_EQ(engines["self_spec"].drafter(), "self");  // the policy's own
  EXPECT_EQ(engines["self_spec"].num_speculative_tokens(), 4u);
  EXPECT_EQ(engines["self_spec_off"].drafter(), "none");

  const std::string text = registry.Serialize();
  for (const auto& [name, info] : engines) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("moeserve_engine_info{policy=\"",
                                             name, "\"")))
        << name;
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat("drafter=\"", info.drafter(),
                                       "\",num_speculative_tokens=\"",
                                       info.num_speculative_tokens(), "\"")))
        << name;
  }
  EXPECT_THAT(text, Not(HasSubstr("num_speculative_tokens=\"-1\"")));
  EXPECT_THAT(text, Not(HasSubstr("drafter=\"\"")));

  // lru vs lru + self draft: the same tokens; only the drafting engine
  // counts drafts.
  EXPECT_EQ(Greedy(host, "lru"), Greedy(host, "lru_self"));
  EXPECT_EQ(Greedy(host, "self_spec"), Greedy(host, "self_spec_off"));
  EXPECT_GT(testing::SumOfSamples(registry,
                                  "moeserve_spec_decode_num_draft_tokens_total",
                                  {"policy=\"lru_self\""}),
            0);
  EXPECT_EQ(testing::SumOfSamples(registry,
                                  "moeserve_spec_decode_num_draft_tokens_total",
                                  {"policy=\"lru\""}),
            0);
  EXPECT_EQ(testing::SumOfSamples(registry,
                                  "moeserve_spec_decode_num_draft_tokens_total",
                                  {"policy=\"self_spec_off\""}),
            0);
}

// quant_draft runs the int4 drafter with an adaptive k; its draft's bytes
// come out of the fast-tier budget ("shared") or on top of it ("extra"),
// and ListModels and moeserve_engine_info say which and how many.
TEST(EngineInfoTest, QuantDraftShowsItsDraftBudgetAndBytes) {
  absl::StatusOr<ServerOptions> options = Options(R"({
    "engines": [
      {"name": "lru", "policy": "lru"},
      {"name": "quant_draft"},
      {"name": "qd_extra", "policy": "quant_draft", "draft_budget": "extra"}
    ],
    "ab": {"lru": 1, "quant_draft": 1}
  })");
  Served served;
  ASSERT_NO_FATAL_FAILURE(Serve(options, &served));
  metrics::Registry& registry = served.registry;
  EngineHost* host = served.host.get();
  std::map<std::string, v1::EngineInfo>& engines = served.engines;
  ASSERT_EQ(engines.size(), 3u);
  const v1::EngineInfo& lru = engines["lru"];
  const v1::EngineInfo& shared = engines["quant_draft"];
  const v1::EngineInfo& extra = engines["qd_extra"];
  EXPECT_EQ(lru.drafter(), "none");
  EXPECT_EQ(lru.draft_bytes(), 0u);
  EXPECT_EQ(lru.draft_budget(), "shared");
  EXPECT_EQ(shared.drafter(), "int4");
  EXPECT_EQ(shared.num_speculative_tokens(), 0u);  // the governor's k
  EXPECT_EQ(shared.draft_budget(), "shared");
  EXPECT_GT(shared.draft_bytes(), 0u);
  // Shared: the draft comes out of the same budget; extra: on top of it.
  EXPECT_EQ(shared.expert_cache_bytes() + shared.draft_bytes(),
            lru.expert_cache_bytes());
  EXPECT_EQ(extra.draft_budget(), "extra");
  EXPECT_EQ(extra.draft_bytes(), shared.draft_bytes());
  EXPECT_EQ(extra.expert_cache_bytes(), lru.expert_cache_bytes());

  const std::string text = registry.Serialize();
  for (const auto& [name, info] : engines) {
    EXPECT_THAT(text,
                HasSubstr(absl::StrCat(
                    "num_speculative_tokens=\"", info.num_speculative_tokens(),
                    "\",draft_budget=\"", info.draft_budget(),
                    "\",draft_bytes=\"", info.draft_bytes(), "\"}")))
        << name;
  }
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "moeserve_expert_cache_bytes{policy=\"quant_draft\","
                        "state=\"draft\"} ",
                        shared.draft_bytes())));
  EXPECT_THAT(text, Not(HasSubstr("moeserve_expert_cache_bytes{policy=\"lru\","
                                  "state=\"draft\"}")));

  // Speculation never changes greedy tokens.
  EXPECT_EQ(Greedy(host, "lru"), Greedy(host, "quant_draft"));
  EXPECT_EQ(Greedy(host, "lru"), Greedy(host, "qd_extra"));
  EXPECT_GT(
      testing::SumOfSamples(registry, "moeserve_spec_decode_num_drafts_total",
                            {"policy=\"quant_draft\""}),
      0);
}

// A budget that cannot hold the int4 draft and one expert refuses the
// engine at start, naming the budget and the way out; with draft_budget
// extra the same budget serves.
TEST(EngineInfoTest, AnInt4DraftThatDoesNotFitTheBudgetIsRefused) {
  absl::StatusOr<ServerOptions> options =
      Options(R"({"engines": [{"name": "quant_draft"}]})",
              /*expert_cache_ratio=*/0.1);
  ASSERT_TRUE(options.ok()) << options.status();
  metrics::Registry registry;
  absl::StatusOr<std::unique_ptr<EngineHost>> host = EngineHost::Create(
      *options, &registry, testing::HandOffTokenizer(*options));
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(host.status().message()),
              HasSubstr("engine 'quant_draft': expert_cache_ratio: the int4 "
                        "draft takes "));
  EXPECT_THAT(std::string(host.status().message()),
              HasSubstr("set draft_budget extra"));

  options = Options(
      R"({"engines": [{"name": "quant_draft", "draft_budget": "extra"}]})",
      /*expert_cache_ratio=*/0.1);
  ASSERT_TRUE(options.ok()) << options.status();
  metrics::Registry registry2;  // outlives the engine that reports to it
  absl::StatusOr<std::unique_ptr<EngineHost>> extra = EngineHost::Create(
      *options, &registry2, testing::HandOffTokenizer(*options));
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(Greedy(extra->get(), "quant_draft").size(), 16u);
}

}  // namespace
}  // namespace moeserve::server
