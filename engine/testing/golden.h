// Reads the golden parity fixtures of tests/golden (written by
// tools/demo_model/make_fixtures.py; format at the top of that script) from a
// test's runfiles. Test-only.
#ifndef MOESERVE_ENGINE_TESTING_GOLDEN_H_
#define MOESERVE_ENGINE_TESTING_GOLDEN_H_

#include <cstdint>
#include <string>
#include <vector>

namespace moeserve::engine::testing {

struct GoldenCase {
  std::string name;
  std::vector<int32_t> prompt;
  std::vector<float> logits;    // PyTorch's, after the last prompt token
  std::vector<int32_t> greedy;  // PyTorch's greedy continuation
  // Top-1 minus top-2 logit at each greedy step (a near-tie may flip under
  // a legitimate rounding difference).
  std::vector<float> greedy_margins;
};

struct Golden {
  std::string model_dir;  // workspace-relative
  std::vector<GoldenCase> cases;
};

// "$TEST_SRCDIR/moeserve/<path>".
std::string Runfile(const std::string& path);

// tests/golden/<fixture>/golden.json; aborts the test binary (with the
// reason) when it is missing or malformed.
Golden ReadGolden(const std::string& fixture);

}  // namespace moeserve::engine::testing

#endif  // MOESERVE_ENGINE_TESTING_GOLDEN_H_
