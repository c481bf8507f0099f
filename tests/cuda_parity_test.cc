// Whole-model parity of the CUDA backend with the CPU backend: for every
// golden fixture (tests/golden) and every case, prefill then 32 greedy decode
// steps teacher-forced with the CPU's tokens. Each step's logits must agree
// within 1e-3 x max|logit| and the CUDA argmax must be the CPU's token
// (greedy output identical); the prompt's logits must also match PyTorch's
// within 1e-2 x max|logit| (as the CPU parity test). Runs with every expert
// resident in VRAM and with a quarter of them (experts streamed over PCIe
// while decoding), and with all prompts batched in one forward pass (prefill
// rows >= 16 take the cuBLASLt path). Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/builder/engine_builder.h"
#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/testing/golden.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/cuda_skip.h"

namespace moeserve {
namespace {

using engine::BlockTable;
using engine::KvCache;
using engine::MoeModel;
using engine::SequenceChunk;

constexpr int kDecodeSteps = 32;
constexpr int kBlockSize = 16;

using engine::testing::Golden;
using engine::testing::GoldenCase;
using engine::testing::ReadGolden;
using engine::testing::Runfile;

// The CUDA backend, or null with `status` set to why there is none.
kernels::Backend* Cuda(absl::Status* status) {
  static auto* backend = new absl::StatusOr<std::unique_ptr<kernels::Backend>>(
      kernels::CreateBackend({.name = "cuda"}));
  *status = backend->status();
  return backend->ok() ? backend->value().get() : nullptr;
}

int32_t Argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

float MaxAbs(const float* a, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i]));
  return m;
}

float MaxAbsDiff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// One model + KV cache on one backend.
struct Runner {
  std::unique_ptr<engine::ExpertProvider> experts;
  std::unique_ptr<MoeModel> model;
  std::unique_ptr<KvCache> cache;
  std::vector<BlockTable> tables;

  // Runs one chunk per sequence; returns the logits [seqs, vocab].
  std::vector<float> Step(const std::vector<std::vector<int32_t>>& chunks,
                          const std::vector<int64_t>& starts) {
    std::vector<SequenceChunk> batch;
    tables.resize(chunks.size());
    for (size_t s = 0; s < chunks.size(); ++s) {
      EXPECT_TRUE(cache->Grow(&tables[s], starts[s] + chunks[s].size()).ok());
      batch.push_back({chunks[s], starts[s], &tables[s]});
    }
    std::vector<float> logits;
    absl::Status st = model->Forward(batch, cache.get(), &logits);
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  }
};

class CudaParityTest
    : public ::testing::TestWithParam<std::tuple<std::string, double>> {
 protected:
  void SetUp() override {
    absl::Status status;
    cuda_ = Cuda(&status);
    MOESERVE_SKIP_WITHOUT_CUDA(status);
    golden_ = ReadGolden(std::get<0>(GetParam()));
    auto weights = engine::ModelWeights::Load(Runfile(golden_.model_dir));
    ASSERT_TRUE(weights.ok()) << weights.status();
    weights_ = *std::move(weights);
    cpu_backend_ = std::make_unique<kernels::cpu::CpuBackend>(
        kernels::cpu::CpuBackendOptions{.num_threads = 4});
  }

  Runner MakeCpu() {
    Runner r;
    r.experts = std::make_unique<engine::ResidentExperts>(weights_.get());
    r.model =
        *MoeModel::Create(weights_.get(), cpu_backend_.get(), r.experts.get());
    r.cache = *KvCache::Create(weights_->config(), 512, kBlockSize);
    return r;
  }

  Runner MakeCuda() {
    Runner r;
    engine::EngineSpec spec;
    spec.expert_cache_ratio = std::get<1>(GetParam());
    auto residency = engine::NewResidency(
        weights_.get(), spec, engine::ExpertCacheBytes(*weights_, spec), cuda_,
        /*registry=*/nullptr);
    EXPECT_TRUE(residency.ok()) << residency.status();
    r.experts = *std::move(residency);
    auto model = MoeModel::Create(weights_.get(), cuda_, r.experts.get());
    EXPECT_TRUE(model.ok()) << model.status();
    r.model = *std::move(model);
    r.cache = *KvCache::Create(weights_->config(), 512, kBlockSize, cuda_);
    return r;
  }

  kernels::Backend* cuda_ = nullptr;
  Golden golden_;
  std::unique_ptr<engine::ModelWeights> weights_;
  std::unique_ptr<kernels::Backend> cpu_backend_;
};

TEST_P(CudaParityTest, GreedyDecodeMatchesCpu) {
  const int64_t vocab = weights_->config().vocab_size;
  for (const GoldenCase& c : golden_.cases) {
    SCOPED_TRACE(c.name);
    Runner cpu = MakeCpu();
    Runner gpu = MakeCuda();
    std::vector<float> want = cpu.Step({c.prompt}, {0});
    std::vector<float> got = gpu.Step({c.prompt}, {0});
    ASSERT_EQ(got.size(), want.size());
    const float scale = MaxAbs(want.data(), vocab);
    EXPECT_LE(MaxAbsDiff(got.data(), c.logits.data(), vocab),
              1e-2f * MaxAbs(c.logits.data(), vocab))
        << "prompt logits vs PyTorch";
    int64_t pos = c.prompt.size();
    for (int step = 0; step < kDecodeSteps; ++step) {
      const float diff = MaxAbsDiff(got.data(), want.data(), vocab);
      ASSERT_LE(diff, 1e-3f * scale) << "step " << step;
      const int32_t token = Argmax(want.data(), vocab);
      ASSERT_EQ(Argmax(got.data(), vocab), token) << "step " << step;
      want = cpu.Step({{token}}, {pos});
      got = gpu.Step({{token}}, {pos});
      ++pos;
    }
  }
}

TEST_P(CudaParityTest, BatchedPrefillMatchesCpu) {
  const int64_t vocab = weights_->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> starts;
  for (const GoldenCase& c : golden_.cases) {
    prompts.push_back(c.prompt);
    starts.push_back(0);
  }
  Runner cpu = MakeCpu();
  Runner gpu = MakeCuda();
  const std::vector<float> want = cpu.Step(prompts, starts);
  const std::vector<float> got = gpu.Step(prompts, starts);
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    const float* w = want.data() + s * vocab;
    const float* g = got.data() + s * vocab;
    EXPECT_LE(MaxAbsDiff(g, w, vocab), 1e-3f * MaxAbs(w, vocab)) << s;
    EXPECT_EQ(Argmax(g, vocab), Argmax(w, vocab)) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CudaParityTest,
    ::testing::Combine(::testing::Values("mixtral_demo", "mixtral_tiny",
                                         "qwen2_moe", "qwen3_moe", "olmoe",
                                         "qwen3_demo_fg", "qwen3_demo_draft"),
                       ::testing::Values(1.0, 0.25)),
    [](const auto& info) {
      return std::get<0>(info.param) +
             (std::get<1>(info.param) == 1.0 ? "_all_resident" : "_quarter");
    });

}  // namespace
}  // namespace moeserve
