// libFuzzer target: config.json parsing (ParseModelConfig), including every
// registered Architecture's ParseHparams and the expected-tensor list of
// accepted configs.
//
// Built and run by tests/fuzz/run_fuzzers.sh (config_fuzzer).

#include <cstddef>
#include <cstdint>

#include "engine/architecture.h"
#include "engine/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = moeserve::engine::ParseModelConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!config.ok()) return 0;
  // Accepted configs must yield a tensor list without overflow; keep it
  // bounded so huge-but-valid configs do not time out.
  if (config->num_hidden_layers <= 64) {
    config->architecture->NonExpertTensors(*config);
  }
  config->architecture->ExpertNames(0, 0);
  return 0;
}
