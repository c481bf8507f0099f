// Parity of the CPU forward pass with the PyTorch reference: for every
// golden fixture (tests/golden, written by tools/demo_model/make_fixtures.py)
// the last-position logits must be within kTolerance x max|logit| and the
// 32 greedy tokens identical; the measured error is printed per case. Also: a
// batch of all prompts gives the same logits as each prompt alone, and chunked
// prefill equals one-shot prefill.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/testing/golden.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine {
namespace {

using testing::Golden;
using testing::GoldenCase;
using testing::ReadGolden;
using testing::Runfile;
using Case = GoldenCase;

int32_t Argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

class ParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = ReadGolden(GetParam());
    auto weights = ModelWeights::Load(Runfile(golden_.model_dir));
    ASSERT_TRUE(weights.ok()) << weights.status();
    weights_ = *std::move(weights);
    backend_ = std::make_unique<kernels::cpu::CpuBackend>(
        kernels::cpu::CpuBackendOptions{.num_threads = 2});
    experts_ = std::make_unique<ResidentExperts>(weights_.get());
    auto model =
        MoeModel::Create(weights_.get(), backend_.get(), experts_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    auto cache = KvCache::Create(weights_->config(), 256, 16);
    ASSERT_TRUE(cache.ok());
    cache_ = *std::move(cache);
  }

  int64_t vocab() const { return weights_->config().vocab_size; }

  // Prefills `prompt` in chunks of `chunk` tokens; returns the last logits.
  std::vector<float> Prefill(const std::vector<int32_t>& prompt,
                             BlockTable* table, size_t chunk) {
    EXPECT_TRUE(cache_->Grow(table, prompt.size()).ok());
    std::vector<float> logits;
    for (size_t start = 0; start < prompt.size(); start += chunk) {
      const size_t len = std::min(chunk, prompt.size() - start);
      SequenceChunk c{std::span(prompt).subspan(start, len),
                      static_cast<int64_t>(start), table};
      absl::Status st = model_->Forward({&c, 1}, cache_.get(), &logits);
      EXPECT_TRUE(st.ok()) << st;
    }
    return logits;
  }

  Golden golden_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<kernels::cpu::CpuBackend> backend_;
  std::unique_ptr<ResidentExperts> experts_;
  std::unique_ptr<MoeModel> model_;
  std::unique_ptr<KvCache> cache_;
};

// About 100x the largest error measured with the default fp32-FMA kernels
// (AVX-512 and AVX2: at most 1.2e-6 of max|logit| over every fixture and
// case, 2026-11-27), so a kernel that loses precision fails while a change
// of summation order does not. The opt-in bf16 kernels are not held to it.
constexpr float kTolerance = 1e-4f;
// Quantized checkpoints (tools/demo_model/make_quantized.py, the six
// formats of the tiny qwen3_moe): moeserve serves the non-expert Linear
// layers (and the F16 tensors of GPTQ/AWQ checkpoints) in bf16, each value
// rounded once (engine/quant/expert_codec.h), and computes the experts from
// their stored form exactly (the kernels' differential tests); the reference
// does the same (experts exact fp32 dequantized, every other weight rounded
// to bf16; golden.json's "reference_weights"). Measured: at most 6.6e-7 of
// max|logit| (2026-11-27), as for the bf16 fixtures, so the same bound; all
// 192 greedy tokens of each fixture are compared. On goldens of the exact
// fp32 dequantized weights everywhere (make_quantized.py --exact-reference)
// the error was 2.1-4.0e-3, and 2.0e-2 in gptq_asym / awq bos_only (a router
// near-tie that bf16 rounding flips); 3x 4.0e-3 would already leave only
// 11-27 of the random model's 192 small-margin greedy tokens to compare.
constexpr float kQuantizedTolerance = kTolerance;

// The quantized fixtures (tests/golden:quantized), all six formats of the
// tiny qwen3_moe.
const std::vector<std::string>& QuantizedFixtures() {
  static const auto* names = new std::vector<std::string>{
      "qwen3_moe_fp8_block", "qwen3_moe_ct_fp8",   "qwen3_moe_ct_w4a16",
      "qwen3_moe_gptq_sym",  "qwen3_moe_gptq_asym", "qwen3_moe_awq"};
  return *names;
}

float ToleranceFor(const std::string& fixture) {
  const std::vector<std::string>& q = QuantizedFixtures();
  return std::find(q.begin(), q.end(), fixture) != q.end() ? kQuantizedTolerance
                                                           : kTolerance;
}

std::vector<std::string> AllFixtures() {
  std::vector<std::string> names = {"mixtral_demo", "mixtral_tiny",
                                    "qwen2_moe",    "qwen3_moe",
                                    "olmoe",        "qwen3_demo_fg",
                                    "qwen3_demo_draft"};
  names.insert(names.end(), QuantizedFixtures().begin(),
               QuantizedFixtures().end());
  return names;
}

void ExpectLogitsClose(const std::vector<float>& got, const float* want,
                       int64_t n, const std::string& what,
                       float tolerance = kTolerance) {
  float max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_abs = std::max(max_abs, std::fabs(want[i]));
    max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
  }
  // The measured error, printed so the tolerance can be checked against it
  // (README.md quotes it) and recorded in the test XML.
  const float relative = max_abs > 0 ? max_diff / max_abs : max_diff;
  std::printf("parity %s: max|diff| / max|logit| = %.3g\n", what.c_str(),
              relative);
  ::testing::Test::RecordProperty("max_relative_logit_error_" + what,
                                  std::to_string(relative));
  EXPECT_LE(max_diff, tolerance * max_abs)
      << what << ": max|diff| " << max_diff << " vs max|logit| " << max_abs;
}

TEST_P(ParityTest, LastLogitsAndGreedyTokensMatchReference) {
  size_t compared_total = 0, greedy_total = 0;
  for (const Case& c : golden_.cases) {
    BlockTable table;
    std::vector<float> logits = Prefill(c.prompt, &table, c.prompt.size());
    ASSERT_EQ(static_cast<int64_t>(logits.size()), vocab());
    ExpectLogitsClose(logits, c.logits.data(), vocab(), c.name,
                      ToleranceFor(GetParam()));

    std::vector<int32_t> generated;
    int64_t pos = static_cast<int64_t>(c.prompt.size());
    for (size_t i = 0; i < c.greedy.size(); ++i) {
      const int32_t token = Argmax(logits.data(), vocab());
      generated.push_back(token);
      ASSERT_TRUE(cache_->Grow(&table, pos + 1).ok());
      SequenceChunk step{std::span(&generated.back(), 1), pos, &table};
      ASSERT_TRUE(model_->Forward({&step, 1}, cache_.get(), &logits).ok());
      ++pos;
    }
    // Identical up to the first near-tie of the reference (a margin below
    // twice the logit tolerance), where a rounding difference within the
    // tolerance may legitimately pick the other token; every fixture has
    // Most steps are compared (checked after the loop).
    size_t compared = c.greedy.size();
    float max_abs = 0;
    for (int64_t i = 0; i < vocab(); ++i) {
      max_abs = std::max(max_abs, std::fabs(c.logits[i]));
    }
    const float tie = 2 * ToleranceFor(GetParam()) * max_abs;
    for (size_t i = 0; i < c.greedy_margins.size() && i < compared; ++i) {
      if (c.greedy_margins[i] < tie) compared = i;
    }
    compared_total += compared;
    greedy_total += c.greedy.size();
    EXPECT_EQ(
        std::vector<int32_t>(generated.begin(), generated.begin() + compared),
        std::vector<int32_t>(c.greedy.begin(), c.greedy.begin() + compared))
        << c.name << ": first " << compared << " greedy tokens";
    cache_->Release(&table);
  }
  std::printf("greedy tokens compared: %zu of %zu\n", compared_total,
              greedy_total);
  EXPECT_GE(2 * compared_total, greedy_total)
      << "near-ties cut off more than half of the greedy tokens";
}

TEST_P(ParityTest, BatchedAndChunkedPrefillMatchOneByOne) {
  std::vector<BlockTable> tables(golden_.cases.size());
  std::vector<SequenceChunk> batch;
  for (size_t i = 0; i < golden_.cases.size(); ++i) {
    const Case& c = golden_.cases[i];
    ASSERT_TRUE(cache_->Grow(&tables[i], c.prompt.size()).ok());
    batch.push_back({c.prompt, 0, &tables[i]});
  }
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(batch, cache_.get(), &logits).ok());
  for (size_t i = 0; i < golden_.cases.size(); ++i) {
    ExpectLogitsClose(std::vector<float>(logits.begin() + i * vocab(),
                                         logits.begin() + (i + 1) * vocab()),
                      golden_.cases[i].logits.data(), vocab(),
                      "batched " + golden_.cases[i].name,
                      ToleranceFor(GetParam()));
    cache_->Release(&tables[i]);
  }
  for (const Case& c : golden_.cases) {
    BlockTable table;
    ExpectLogitsClose(Prefill(c.prompt, &table, 3), c.logits.data(), vocab(),
                      "chunked " + c.name, ToleranceFor(GetParam()));
    cache_->Release(&table);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParityTest,
                         ::testing::ValuesIn(AllFixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moeserve::engine
