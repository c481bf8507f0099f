// Graph mode of MoeModel (issue 30 item 3) without a GPU: which steps are
// recorded and under which key (internal/dense_graphs.h), and, with the
// counting wrapper simulating a recording backend over the CPU, that graph
// mode's restructured forward pass (the router's matmul and top-k in the
// dense segment, the last layer's tail in the final one, padded block
// tables) gives the eager pass's logits bit for bit while replaying graphs.
// The real CUDA recording is //engine:cuda_graphs_test (GPU).
#include "engine/internal/dense_graphs.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/testing/golden.h"
#include "engine/testing/graph_lockstep.h"
#include "gtest/gtest.h"
#include "kernels/counting_backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine {
namespace {

TEST(DenseGraphShape, DecodeAndVerifyStepsOnly) {
  // Decode: one token per sequence, each wanting logits.
  auto one = DenseGraphShape(1, 1, 1, 3);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(*one, (std::array<int64_t, 4>{1, 1, 4, 0}));
  EXPECT_EQ(DenseGraphShape(8, 8, 8, 16),
            (std::array<int64_t, 4>{8, 8, 16, 0}));
  // Verify chunks: k + 1 tokens, all wanting logits.
  EXPECT_EQ(DenseGraphShape(6, 2, 6, 5), (std::array<int64_t, 4>{6, 2, 8, 0}));
  // The exact n is in the key: no padding of the batch.
  EXPECT_NE(DenseGraphShape(3, 3, 3, 1), DenseGraphShape(4, 4, 4, 1));
  // Strides in one bucket share a key.
  EXPECT_EQ(DenseGraphShape(2, 2, 2, 5), DenseGraphShape(2, 2, 2, 8));
  EXPECT_NE(DenseGraphShape(2, 2, 2, 8), DenseGraphShape(2, 2, 2, 9));
  // Prefill (rows < n), too many tokens, nothing: eager.
  EXPECT_FALSE(DenseGraphShape(7, 1, 1, 1).has_value());
  EXPECT_FALSE(DenseGraphShape(kMaxGraphTokens + 1, kMaxGraphTokens + 1,
                               kMaxGraphTokens + 1, 1)
                   .has_value());
  EXPECT_TRUE(
      DenseGraphShape(kMaxGraphTokens, kMaxGraphTokens, kMaxGraphTokens, 1)
          .has_value());
  EXPECT_FALSE(DenseGraphShape(0, 0, 0, 1).has_value());
}

TEST(DenseGraphShape, BlockTableStride) {
  EXPECT_EQ(BlockTableStride(false, 5), 5);
  EXPECT_EQ(BlockTableStride(true, 5), 8);
  EXPECT_EQ(BlockTableStride(true, 1), 1);
  EXPECT_EQ(BlockTableStride(true, 64), 64);
}

class SimulatedGraphsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SimulatedGraphsTest, ChangeNoLogitAndReplay) {
  const testing::Golden golden = testing::ReadGolden(GetParam());
  std::unique_ptr<ModelWeights> weights =
      *ModelWeights::Load(testing::Runfile(golden.model_dir));
  const ModelConfig& c = weights->config();
  kernels::cpu::CpuBackend cpu({.num_threads = 2});
  kernels::CountingBackend graphs(&cpu, {.simulate_graphs = true});
  ASSERT_TRUE(graphs.SetGraphs(true));
  auto make = [&](kernels::Backend* b) {
    testing::LockstepRunner r;
    r.experts = std::make_unique<ResidentExperts>(weights.get());
    r.model = *MoeModel::Create(weights.get(), b, r.experts.get());
    r.cache = *KvCache::Create(c, 128, 16);
    return r;
  };
  testing::LockstepRunner eager = make(&cpu);
  testing::LockstepRunner graph = make(&graphs);
  std::vector<std::vector<int32_t>> prompts;
  for (const testing::GoldenCase& g : golden.cases) prompts.push_back(g.prompt);
  const int passes =
      testing::RunGraphLockstep(eager, graph, prompts, c.vocab_size);
  EXPECT_EQ(passes, 1 + 40 + 5 + 1 + 3);
  const kernels::BackendCounts n = graphs.counts();
  const int64_t segments = c.num_hidden_layers + 1;
  // Every pass but the prefill ran its segments as graphs; most replayed.
  EXPECT_EQ(n.graph_launches, (passes - 1) * segments);
  EXPECT_GT(n.graph_captures, 0);
  EXPECT_LT(n.graph_captures * 4, n.graph_launches);
  EXPECT_EQ(n.graph_captures % segments, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SimulatedGraphsTest,
                         ::testing::Values("mixtral_tiny", "qwen2_moe",
                                           "qwen3_moe", "olmoe"));

}  // namespace
}  // namespace moeserve::engine
