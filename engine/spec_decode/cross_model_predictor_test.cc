// CrossModelPredictor: what it adds to the lookahead is, per target layer,
// the union over the drafting rows of MoeModel::PredictExperts on those rows
// (the target's router, top num_experts_per_tok), whether every row drafts
// or only some (gathered); target layers map onto draft layers as
// [i*L/D, (i+1)*L/D); a pass that went wrong adds nothing.
#include "engine/spec_decode/cross_model_predictor.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/testing/golden.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine::spec_decode {
namespace {

using ::moeserve::engine::testing::Runfile;

kernels::Backend* CpuBackend() {
  static auto* backend = new kernels::cpu::CpuBackend({.num_threads = 2});
  return backend;
}

constexpr int kDraftLayers = 4;  // demo-fg has 6: 1, 2, 1, 2 per draft layer
constexpr int64_t kRows = 5;

class CrossModelPredictorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = *ModelWeights::Load(Runfile("models/demo-fg"));
    experts_ = std::make_unique<ResidentExperts>(weights_.get());
    target_ = *MoeModel::Create(weights_.get(), CpuBackend(), experts_.get());
    // A target pass first, as in the engine: PredictExperts (the reference
    // below) uses the target's router scratch, reserved by Forward.
    kv_ = *KvCache::Create(weights_->config(), 16, 16, CpuBackend());
    std::vector<int32_t> prompt(kRows, 7);
    BlockTable blocks;
    ASSERT_TRUE(kv_->Grow(&blocks, kRows).ok());
    std::vector<SequenceChunk> batch = {{prompt, 0, &blocks, 1}};
    std::vector<float> logits;
    ASSERT_TRUE(target_->Forward(batch, kv_.get(), &logits).ok());
    kv_->Release(&blocks);
    stream_ = *CpuBackend()->CreateStream();
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t d = weights_->config().hidden_size;
    hidden_.resize(kDraftLayers);
    for (std::vector<float>& h : hidden_) {
      h.resize(kRows * d);
      for (float& v : h) v = normal(rng);
    }
  }

  // Runs one pass over draft layers [0, layers) predicting from `rows`.
  ExpertLookahead Pass(CrossModelPredictor& p, std::vector<int64_t> rows,
                       int layers = kDraftLayers) {
    p.BeginPass(rows);
    for (int i = 0; i < layers; ++i) {
      p.OnDraftLayer(i, hidden_[i].data(), kRows);
    }
    ExpertLookahead lookahead;
    p.AddTo(&lookahead, 1);
    return lookahead;
  }

  // PredictExperts of each row alone, merged; per target layer.
  std::vector<std::vector<int>> Reference(const std::vector<int64_t>& rows) {
    const ModelConfig& c = weights_->config();
    std::vector<std::vector<int>> out(c.num_hidden_layers);
    for (int t = 0; t < c.num_hidden_layers; ++t) {
      // The draft layer whose span [i*L/D, (i+1)*L/D) holds t.
      int i = 0;
      while ((i + 1) * c.num_hidden_layers / kDraftLayers <= t) ++i;
      for (int64_t r : rows) {
        for (int e : target_->PredictExperts(
                 t, hidden_[i].data() + r * c.hidden_size, 1,
                 static_cast<int>(c.num_experts_per_tok))) {
          out[t].push_back(e);
        }
      }
      std::sort(out[t].begin(), out[t].end());
      out[t].erase(std::unique(out[t].begin(), out[t].end()), out[t].end());
    }
    return out;
  }

  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<ResidentExperts> experts_;
  std::unique_ptr<MoeModel> target_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<kernels::Stream> stream_;
  std::vector<std::vector<float>> hidden_;  // per draft layer, F32[kRows, d]
};

TEST_F(CrossModelPredictorTest, EqualsTheTargetsPredictExpertsPerRow) {
  CrossModelPredictor p(target_.get(), kDraftLayers, CpuBackend(),
                        stream_.get());
  for (const std::vector<int64_t>& rows :
       {std::vector<int64_t>{0, 1, 2, 3, 4}, std::vector<int64_t>{1, 4},
        std::vector<int64_t>{3}}) {
    const ExpertLookahead got = Pass(p, rows);
    ASSERT_EQ(got.experts.size(), 2u);  // position 1 (0 left empty)
    EXPECT_TRUE(got.experts[0].empty());
    EXPECT_EQ(got.experts[1], Reference(rows)) << rows.size() << " rows";
    for (const std::vector<int>& ids : got.experts[1]) {
      EXPECT_GE(ids.size(),
                static_cast<size_t>(weights_->config().num_experts_per_tok));
    }
  }
}

TEST_F(CrossModelPredictorTest, AnUnfinishedOrEmptyPassAddsNothing) {
  CrossModelPredictor p(target_.get(), kDraftLayers, CpuBackend(),
                        stream_.get());
  // The last draft layer never came: its copy was never enqueued.
  EXPECT_TRUE(Pass(p, {0, 2}, kDraftLayers - 1).experts.empty());
  EXPECT_TRUE(Pass(p, {}).experts.empty());
  // A row beyond the pass's batch.
  EXPECT_TRUE(Pass(p, {0, kRows}).experts.empty());
  // And the next good pass predicts again.
  EXPECT_EQ(Pass(p, {2}).experts.size(), 2u);
}

}  // namespace
}  // namespace moeserve::engine::spec_decode
