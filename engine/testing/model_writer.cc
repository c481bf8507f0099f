#include "engine/testing/model_writer.h"

#include <stdlib.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/dtype.h"
#include "engine/model_config.h"
#include "gtest/gtest.h"

namespace moeserve::engine::testing {
namespace {

using nlohmann::json;

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string Le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

void AddTensor(std::vector<TestTensor>* out, const std::string& name,
               std::vector<int64_t> shape) {
  size_t n = 2;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  out->push_back({name, "BF16", std::move(shape), PatternBytes(name, n)});
}

}  // namespace

std::string RawSafetensors(const std::string& header, const std::string& data) {
  return Le64(header.size()) + header + data;
}

std::string SerializeSafetensors(const std::vector<TestTensor>& tensors) {
  json header = json::object();
  std::string data;
  for (const TestTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype},
        {"shape", t.shape},
        {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  header["__metadata__"] = {{"format", "pt"}};
  return RawSafetensors(header.dump(), data);
}

std::string PatternBytes(const std::string& name, size_t num_bytes) {
  std::string out(num_bytes, '\0');
  uint64_t h = Fnv1a(name);
  for (size_t i = 0; i < num_bytes; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<char>(h >> 56);
    // As BF16 (little-endian: odd bytes hold sign and exponent), never all
    // exponent bits: no NaN or Inf, which ModelWeights refuses.
    if (i % 2 == 1 && (out[i] & 0x7F) == 0x7F) out[i] &= ~0x01;
  }
  return out;
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "/moeserve_XXXXXX";
  char* dir = mkdtemp(tmpl.data());
  return dir == nullptr ? "" : std::string(dir);
}

json TinyMixtralConfig() {
  return json{
      {"model_type", "mixtral"},
      {"architectures", {"MixtralForCausalLM"}},
      {"hidden_size", 64},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"vocab_size", 96},
      {"intermediate_size", 32},
      {"num_local_experts", 4},
      {"num_experts_per_tok", 2},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 1e6},
      {"max_position_embeddings", 256},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
  };
}

absl::StatusOr<std::vector<TestTensor>> TensorsForConfig(const json& config) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(config.dump());
  if (!c.ok()) return c.status();
  std::vector<TestTensor> out;
  for (const TensorSpec& spec : c->architecture->NonExpertTensors(*c)) {
    AddTensor(&out, spec.name, spec.shape);
  }
  const int64_t ffn = c->expert_intermediate_size, hidden = c->hidden_size;
  for (int layer = 0; layer < c->num_hidden_layers; ++layer) {
    for (int e = 0; e < c->num_experts; ++e) {
      ExpertTensorNames n = c->architecture->ExpertNames(layer, e);
      AddTensor(&out, n.gate, {ffn, hidden});
      AddTensor(&out, n.up, {ffn, hidden});
      AddTensor(&out, n.down, {hidden, ffn});
    }
  }
  return out;
}

absl::Status WriteTinyModel(
    const std::string& dir, const json& config,
    const std::function<void(std::vector<TestTensor>*)>& mutate) {
  absl::StatusOr<std::vector<TestTensor>> tensors = TensorsForConfig(config);
  if (!tensors.ok()) return tensors.status();
  if (mutate) mutate(&*tensors);
  absl::Status s = WriteFile(dir + "/config.json", config.dump(2));
  if (!s.ok()) return s;
  return WriteFile(dir + "/model.safetensors", SerializeSafetensors(*tensors));
}

}  // namespace moeserve::engine::testing
