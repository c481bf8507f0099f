#include "server/testing/handoff_fixture.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/testing/fake_tokenizer.h"
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

}  // namespace moeserve::server::testing
