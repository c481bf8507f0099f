// libFuzzer target: the safetensors header parser (SafetensorsFile::
// FromBuffer) on arbitrary bytes. Any crash, sanitizer report or escaped
// exception is a finding; refusals are expected.
//
// Built and run by tests/fuzz/run_fuzzers.sh (safetensors_fuzzer).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = moeserve::engine::SafetensorsFile::FromBuffer(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!file.ok()) return 0;
  // Touch every accepted tensor's bytes: they must lie inside the buffer.
  uint8_t sink = 0;
  for (const std::string& name : (*file)->TensorNames()) {
    const moeserve::engine::TensorInfo* t = (*file)->Find(name);
    const uint8_t* p = static_cast<const uint8_t*>(t->data);
    for (uint64_t i = 0; i < t->byte_size; ++i) sink ^= p[i];
  }
  volatile uint8_t keep = sink;
  (void)keep;
  return 0;
}
