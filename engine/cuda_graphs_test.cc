// CUDA graphs for the dense sub-steps (issue 30 item 3) on a GPU: for each
// fixture, one model on a CUDA backend with graphs on and one with them
// off (every expert resident in VRAM) run the same passes in lockstep
// (engine/testing/graph_lockstep.h: batched prefill, decode past KV-block
// boundaries, a batch of one, a verify chunk, replays), and every pass's
// logits must be identical bit for bit. The graph side is wrapped in a
// CountingBackend to check that graphs were recorded once per shape and
// replayed after. Skips without a CUDA device
// (kernels/testing/cuda_skip.h); MOESERVE_REQUIRE_CUDA=1 makes that a
// failure (tools/gpu_check).
#include <memory>
#include <string>
#include <vector>

#include "engine/builder/engine_builder.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/testing/golden.h"
#include "engine/testing/graph_lockstep.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/counting_backend.h"
#include "kernels/testing/cuda_skip.h"

namespace moeserve::engine {
namespace {

// A CUDA backend with graphs on or off (two backends on one device), or
// null with `status` set to why there is none.
kernels::Backend* Cuda(bool graphs, absl::Status* status) {
  static auto* on = new absl::StatusOr<std::unique_ptr<kernels::Backend>>(
      kernels::CreateBackend({.name = "cuda", .cuda_graphs = true}));
  static auto* off = new absl::StatusOr<std::unique_ptr<kernels::Backend>>(
      kernels::CreateBackend({.name = "cuda"}));
  auto* b = graphs ? on : off;
  *status = b->status();
  return b->ok() ? b->value().get() : nullptr;
}

class CudaGraphsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGraphsTest, GraphsOnAndOffGiveIdenticalLogits) {
  absl::Status status;
  kernels::Backend* off = Cuda(false, &status);
  MOESERVE_SKIP_WITHOUT_CUDA(status);
  kernels::Backend* on = Cuda(true, &status);
  ASSERT_NE(on, nullptr) << status;
  ASSERT_TRUE(on->graphs_enabled());
  ASSERT_FALSE(off->graphs_enabled());
  kernels::CountingBackend counted(on);
  ASSERT_TRUE(counted.graphs_enabled());

  const testing::Golden golden = testing::ReadGolden(GetParam());
  auto weights = ModelWeights::Load(testing::Runfile(golden.model_dir));
  ASSERT_TRUE(weights.ok()) << weights.status();
  const ModelConfig& c = (*weights)->config();
  auto make = [&](kernels::Backend* b) {
    testing::LockstepRunner r;
    EngineSpec spec;
    spec.expert_cache_ratio = 1.0;
    auto residency =
        NewResidency(weights->get(), spec, ExpertCacheBytes(**weights, spec), b,
                     /*registry=*/nullptr);
    EXPECT_TRUE(residency.ok()) << residency.status();
    r.experts = *std::move(residency);
    auto model = MoeModel::Create(weights->get(), b, r.experts.get());
    EXPECT_TRUE(model.ok()) << model.status();
    r.model = *std::move(model);
    r.cache = *KvCache::Create(c, 128, 16, b);
    return r;
  };
  testing::LockstepRunner eager = make(off);
  testing::LockstepRunner graph = make(&counted);
  ASSERT_NE(eager.model, nullptr);
  ASSERT_NE(graph.model, nullptr);
  std::vector<std::vector<int32_t>> prompts;
  for (const testing::GoldenCase& g : golden.cases) prompts.push_back(g.prompt);
  const int passes =
      testing::RunGraphLockstep(eager, graph, prompts, c.vocab_size);
  EXPECT_EQ(passes, 1 + 40 + 5 + 1 + 3);
  const kernels::BackendCounts n = counted.counts();
  const int64_t segments = c.num_hidden_layers + 1;
  std::printf(
      "%s: %d passes, %ld graph launches, %ld recordings holding %ld ops\n",
      GetParam().c_str(), passes, static_cast<long>(n.graph_launches),
      static_cast<long>(n.graph_captures), static_cast<long>(n.captured_ops));
  // Every pass but the prefill ran its segments as graphs (none fell back
  // to eager), most of them replays.
  EXPECT_EQ(n.graph_launches, (passes - 1) * segments);
  EXPECT_GT(n.graph_captures, 0);
  EXPECT_LT(n.graph_captures * 4, n.graph_launches);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGraphsTest,
                         ::testing::Values("mixtral_demo", "mixtral_tiny",
                                           "qwen2_moe", "qwen3_moe", "olmoe"));

}  // namespace
}  // namespace moeserve::engine
