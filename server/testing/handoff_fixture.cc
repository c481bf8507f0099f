#include "server/testing/handoff_fixture.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/testing/fake_tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moeserve::server::testing {

absl::StatusOr<ServerOptions> HandOffOptions() {
  ServerOptions options;
  options.model_dir = std::string(std::getenv("TEST_SRCDIR")) +
                      "/moeserve/tests/golden/mixtral_tiny";
  options.port = 0;
  options.threads = 2;
  EngineFlags flags;
  flags.ab = "lru=0.5,overlap=0.5";
  flags.defaults.expert_cache_ratio = 0.5;
  flags.defaults.max_num_seqs = 4;
  flags.defaults.kv_cache_bytes = 8 << 20;
  if (absl::Status st = ResolveEngines(flags, &options); !st.ok()) return st;
  return options;
}

std::unique_ptr<engine::Tokenizer> HandOffTokenizer(
    const ServerOptions& options) {
  std::ifstream in(options.model_dir + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  return engine::testing::FakeTokenizer(
      nlohmann::json::parse(text.str()).at("vocab_size").get<int>());
}

double SumOfSamples(const metrics::Registry& registry, const std::string& name,
                    const std::vector<std::string>& labels) {
  std::stringstream text(registry.Serialize());
  std::string line;
  double sum = 0;
  while (std::getline(text, line)) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool match = true;
    for (const std::string& l : labels) {
      match = match && line.find(l) != std::string::npos;
    }
    if (match) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

bool IsUnary(Client kind) {
  return kind == Client::kUnary || kind == Client::kUnaryDeadline;
}

absl::Duration DeadlineFor(Client kind) {
  return kind == Client::kDeadline || kind == Client::kUnaryDeadline
             ? absl::Milliseconds(40)
             : absl::InfiniteDuration();
}

v1::GenerateRequest HandOffRequest(int i, Client kind) {
  const bool to_the_end = kind == Client::kComplete || kind == Client::kUnary;
  v1::GenerateRequest r;
  r.set_request_id(absl::StrCat("r", i));
  r.add_prompt_token_ids(1);
  r.add_prompt_token_ids(4 + i % 50);
  r.add_prompt_token_ids(9);
  r.mutable_sampling()->set_max_new_tokens(to_the_end ? 12 : 400);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

void ExpectOutcome(Client kind, const Outcome& o) {
  switch (kind) {
    case Client::kComplete:
      EXPECT_EQ(o.code, absl::StatusCode::kOk);
      EXPECT_EQ(o.finish, v1::LENGTH);
      EXPECT_EQ(o.tokens, 12);
      break;
    case Client::kUnary:
      EXPECT_EQ(o.code, absl::StatusCode::kOk);
      EXPECT_EQ(o.tokens, 12);
      break;
    case Client::kCancel:
      EXPECT_EQ(o.code, absl::StatusCode::kCancelled);
      break;
    case Client::kDeadline:
    case Client::kUnaryDeadline:
      EXPECT_EQ(o.code, absl::StatusCode::kDeadlineExceeded);
      break;
    case Client::kAborted:
      EXPECT_EQ(o.code, absl::StatusCode::kOk);
      EXPECT_EQ(o.finish, v1::CANCELLED);
      EXPECT_LT(o.tokens, 400);
      break;
  }
}

void ExpectAllCounted(const metrics::Registry& registry,
                      const std::map<Client, int>& sent) {
  auto metric = [&](const std::string& name,
                    const std::vector<std::string>& labels = {}) {
    return SumOfSamples(registry, name, labels);
  };
  auto count = [&](Client kind) {
    auto it = sent.find(kind);
    return it == sent.end() ? 0 : it->second;
  };
  int total = 0;
  for (const auto& [kind, n] : sent) total += n;
  // The gauges follow the last event by one scheduler step.
  auto settled = [&] {
    return metric("moeserve_request_success_total") == total &&
           metric("moeserve_num_requests_running") == 0 &&
           metric("moeserve_num_requests_waiting") == 0;
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!settled() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(metric("moeserve_request_success_total"), total);
  EXPECT_EQ(metric("moeserve_num_requests_running"), 0);
  EXPECT_EQ(metric("moeserve_num_requests_waiting"), 0);
  EXPECT_EQ(metric("moeserve_request_success_total",
                   {"finished_reason=\"deadline\""}),
            count(Client::kDeadline) + count(Client::kUnaryDeadline));
  EXPECT_EQ(metric("moeserve_request_success_total",
                   {"finished_reason=\"cancelled\""}),
            count(Client::kCancel) + count(Client::kAborted));
  EXPECT_EQ(
      metric("moeserve_request_success_total", {"finished_reason=\"length\""}),
      count(Client::kComplete) + count(Client::kUnary));
}

}  // namespace moeserve::server::testing
