#include "engine/testing/golden.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::testing {

std::string Runfile(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") + "/moeserve/" + path;
}

Golden ReadGolden(const std::string& fixture) {
  const std::string path = Runfile("tests/golden/" + fixture + "/golden.json");
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    std::abort();
  }
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  Golden g;
  g.model_dir = j.at("model_dir").get<std::string>();
  for (const auto& c : j.at("cases")) {
    g.cases.push_back({c.at("name").get<std::string>(),
                       c.at("prompt_ids").get<std::vector<int32_t>>(),
                       c.at("last_logits").get<std::vector<float>>(),
                       c.at("greedy_ids").get<std::vector<int32_t>>(),
                       c.value("greedy_margins", std::vector<float>{})});
  }
  return g;
}

}  // namespace moeserve::engine::testing
