#include "tools/bench/random_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/safetensors.h"

namespace moeserve::bench {
namespace {

using engine::TensorSpec;
using nlohmann::json;

// Work unit of FillRandomTensors: 2 MiB of bf16 (a multiple of 4 values).
constexpr int64_t kBlockElements = int64_t{1} << 20;
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// SplitMix64's output for the counter value `z` (the state after the add).
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

// The bf16 value of every 16-bit draw for one fan-in: entry r is
// ToBf16((r - 32768) * sqrt(3 / fan_in) / 32768). Built once per thread and
// fan-in (128 KiB; a model has a handful of fan-ins).
const uint16_t* ValueTable(int64_t fan_in) {
  thread_local std::map<int64_t, std::vector<uint16_t>> tables;
  std::vector<uint16_t>& table = tables[fan_in];
  if (table.empty()) {
    const float scale = std::sqrt(3.0f / static_cast<float>(fan_in)) / 32768.0f;
    table.resize(65536);
    for (int r = 0; r < 65536; ++r) {
      table[r] = ToBf16(static_cast<float>(r - 32768) * scale);
    }
  }
  return table.data();
}

uint64_t RoundUp64(uint64_t n) { return (n + 63) / 64 * 64; }

uint64_t BlobBytes(const engine::ModelConfig& c) {
  return 3 * RoundUp64(static_cast<uint64_t>(c.expert_intermediate_size) *
                       c.hidden_size * 2);
}

uint64_t DataBytes(const std::vector<TensorSpec>& tensors) {
  uint64_t bytes = 0;
  for (const TensorSpec& t : tensors) bytes += 2 * NumElements(t);
  return bytes;
}

// Zeroes the padding after each matrix of every blob (none when the
// matrices are multiples of 64 bytes, as in every real shape).
void ZeroPadding(const engine::ExpertBlob& layout, size_t count,
                 std::byte* arena) {
  const std::pair<size_t, size_t> gaps[] = {
      {layout.gate_offset + layout.gate_bytes, layout.up_offset},
      {layout.up_offset + layout.up_bytes, layout.down_offset},
      {layout.down_offset + layout.down_bytes, layout.bytes}};
  for (const auto& [begin, end] : gaps) {
    if (begin == end) continue;
    for (size_t i = 0; i < count; ++i) {
      std::memset(arena + i * layout.bytes + begin, 0, end - begin);
    }
  }
}

// Every expert matrix of `c`, pointing into the arena laid out as `layout`.
std::vector<RandomFill> ExpertFills(const engine::ModelConfig& c,
                                    const engine::ExpertBlob& layout,
                                    std::byte* arena) {
  const int64_t ffn = c.expert_intermediate_size, hidden = c.hidden_size;
  std::vector<RandomFill> fills;
  fills.reserve(3 * static_cast<size_t>(c.num_hidden_layers) * c.num_experts);
  std::byte* blob = arena;
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (int e = 0; e < c.num_experts; ++e, blob += layout.bytes) {
      const engine::ExpertTensorNames n = c.architecture->ExpertNames(layer, e);
      auto at = [blob](size_t offset) {
        return reinterpret_cast<uint16_t*>(blob + offset);
      };
      fills.push_back({{n.gate, {ffn, hidden}}, at(layout.gate_offset)});
      fills.push_back({{n.up, {ffn, hidden}}, at(layout.up_offset)});
      fills.push_back({{n.down, {hidden, ffn}}, at(layout.down_offset)});
    }
  }
  return fills;
}

}  // namespace

int64_t NumElements(const TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

void FillRandomTensor(const TensorSpec& t, uint64_t seed, int64_t begin,
                      int64_t count, uint16_t* out) {
  const bool is_bias = absl::EndsWith(t.name, ".bias");
  const bool is_norm = absl::EndsWith(t.name, "norm.weight");
  if (is_bias || is_norm) {
    std::fill_n(out, count, ToBf16(is_norm ? 1.0f : 0.0f));
    return;
  }
  const uint16_t* table = ValueTable(t.shape.back());
  const uint64_t state = Fnv1a(t.name) ^ seed;
  // Draw k (from 0) covers elements [4k, 4k + 4); its counter is
  // state + (k + 1) * golden.
  uint64_t z = state + (static_cast<uint64_t>(begin / 4) + 1) * kGolden;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4, z += kGolden) {
    const uint64_t r = Mix(z);
    out[i] = table[r & 0xffff];
    out[i + 1] = table[(r >> 16) & 0xffff];
    out[i + 2] = table[(r >> 32) & 0xffff];
    out[i + 3] = table[r >> 48];
  }
  for (uint64_t r = Mix(z); i < count; ++i, r >>= 16) {
    out[i] = table[r & 0xffff];
  }
}

void FillRandomTensors(const std::vector<RandomFill>& fills, uint64_t seed,
                       int threads) {
  // first_block[f]: index of fill f's first block; blocks are numbered
  // across all fills in order.
  std::vector<int64_t> first_block(fills.size() + 1, 0);
  for (size_t f = 0; f < fills.size(); ++f) {
    first_block[f + 1] =
        first_block[f] +
        (NumElements(fills[f].tensor) + kBlockElements - 1) / kBlockElements;
  }
  const int64_t blocks = first_block.back();
  std::atomic<int64_t> next{0};
  auto work = [&]() {
    for (int64_t b = next++; b < blocks; b = next++) {
      const size_t f = static_cast<size_t>(
          std::upper_bound(first_block.begin(), first_block.end(), b) -
          first_block.begin() - 1);
      const int64_t begin = (b - first_block[f]) * kBlockElements;
      const int64_t count =
          std::min(kBlockElements, NumElements(fills[f].tensor) - begin);
      FillRandomTensor(fills[f].tensor, seed, begin, count,
                       fills[f].out + begin);
    }
  };
  if (threads <= 0) {
    threads = std::max(1u, std::thread::hardware_concurrency());
  }
  threads = static_cast<int>(
      std::min<int64_t>(threads, std::max<int64_t>(blocks, 1)));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

std::vector<TensorSpec> NonExpertTensorSpecs(const engine::ModelConfig& c) {
  return c.architecture->NonExpertTensors(c);
}

std::string SafetensorsHeader(const std::vector<TensorSpec>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = 2 * static_cast<uint64_t>(NumElements(t));
    header[t.name] = {{"dtype", "BF16"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  text.resize((text.size() + 8 + 63) / 64 * 64 - 8, ' ');
  return text;
}

absl::StatusOr<uint64_t> GeneratedWeightBytes(const json& config) {
  MOESERVE_ASSIGN_OR_RETURN(engine::ModelConfig c,
                            engine::ParseModelConfig(config.dump()));
  const std::vector<TensorSpec> specs = NonExpertTensorSpecs(c);
  return static_cast<uint64_t>(c.num_hidden_layers) * c.num_experts *
             BlobBytes(c) +
         8 + SafetensorsHeader(specs).size() + DataBytes(specs);
}

absl::StatusOr<std::unique_ptr<engine::ModelWeights>> GenerateRandomWeights(
    const json& config, const GenerateOptions& options) {
  const std::string config_text = config.dump();
  MOESERVE_ASSIGN_OR_RETURN(engine::ModelConfig c,
                            engine::ParseModelConfig(config_text));
  // The non-expert weights: one safetensors image, filled in place.
  const std::vector<TensorSpec> specs = NonExpertTensorSpecs(c);
  const std::string header = SafetensorsHeader(specs);
  // Not zeroed first: the header and the tensors, back to back, cover
  // every byte, and the filling threads are each page's first touch.
  const uint64_t size = 8 + header.size() + DataBytes(specs);
  std::unique_ptr<char[]> image(new char[size]);
  for (int i = 0; i < 8; ++i) {
    image[i] =
        static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  }
  std::memcpy(image.get() + 8, header.data(), header.size());
  std::vector<RandomFill> fills;
  uint64_t offset = 8 + header.size();  // a multiple of 64
  for (const TensorSpec& t : specs) {
    fills.push_back({t, reinterpret_cast<uint16_t*>(image.get() + offset)});
    offset += 2 * NumElements(t);
  }
  FillRandomTensors(fills, options.seed, options.threads);
  MOESERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<engine::SafetensorsFile> file,
      engine::SafetensorsFile::FromOwnedBuffer(
          std::move(image), size,
          absl::StrCat("<generated ", c.model_type, ">")));
  auto fill_experts = [&options](const engine::ModelConfig& mc,
                                 const engine::ExpertBlob& layout,
                                 std::byte* arena) {
    ZeroPadding(layout,
                static_cast<size_t>(mc.num_hidden_layers) * mc.num_experts,
                arena);
    FillRandomTensors(ExpertFills(mc, layout, arena), options.seed,
                      options.threads);
    return absl::OkStatus();
  };
  return engine::ModelWeights::FromMemory(
      config_text, std::move(file), fill_experts,
      {.pack_experts = true, .check_finite = options.check_finite});
}

}  // namespace moeserve::bench
