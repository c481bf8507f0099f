#ifndef MOESERVE_ENGINE_TESTING_MODEL_WRITER_H_
#define MOESERVE_ENGINE_TESTING_MODEL_WRITER_H_

// Test-only helpers that write safetensors files and tiny Hugging Face model
// directories (config.json + model.safetensors) with deterministic contents,
// so engine tests never depend on checked-in model files.
// Thread-compatible; every function is independent.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::testing {

struct TestTensor {
  std::string name;
  std::string dtype = "BF16";
  std::vector<int64_t> shape;
  std::string data;  // Raw bytes, little-endian.
};

// `8-byte length | header | data` with a header that has exactly `header`.
std::string RawSafetensors(const std::string& header, const std::string& data);

// A valid safetensors file holding `tensors` back to back, in order.
std::string SerializeSafetensors(const std::vector<TestTensor>& tensors);

// Deterministic bytes for a tensor: element i of `name` gets a value derived
// from a hash of (name, i), so any two tensors differ. Read as BF16, every
// value is finite.
std::string PatternBytes(const std::string& name, size_t num_bytes);

absl::Status WriteFile(const std::string& path, const std::string& bytes);

// Fresh empty directory under the test temp dir.
std::string MakeTempDir();

// config.json of a tiny mixtral: hidden 64, 2 layers, 4 heads, 2 kv heads,
// vocab 96, 4 experts (top-2), ffn 32.
nlohmann::json TinyMixtralConfig();

// Every tensor (BF16, pattern data) that `config` implies, named by its
// registered Architecture.
absl::StatusOr<std::vector<TestTensor>> TensorsForConfig(
    const nlohmann::json& config);

// Writes config.json and model.safetensors for `config` into `dir`;
// `mutate` (optional) edits the tensor list before it is written.
absl::Status WriteTinyModel(
    const std::string& dir, const nlohmann::json& config,
    const std::function<void(std::vector<TestTensor>*)>& mutate = nullptr);

}  // namespace moeserve::engine::testing

#endif  // MOESERVE_ENGINE_TESTING_MODEL_WRITER_H_
