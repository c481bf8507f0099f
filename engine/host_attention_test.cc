// Host attention (engine/host_attention.h): a model whose KV cache lives in
// host memory and whose attention a second CPU backend computes gives the
// logits of device attention bit for bit (the CPU backend stands in for the
// device: same kernels on both sides) through prefill, decode across KV
// block boundaries, a verification chunk wanting k+1 logits rows and a
// batch of one; also with graph mode on (host attention steps run eagerly).
// On CUDA: the refusals (a GPU as the host backend, a KV cache in device
// memory); token parity on CUDA is tests/policy_invariance_test's
// HostAttention suite.
#include "engine/host_attention.h"

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
#include "kernels/backend_factory.h"
#include "kernels/counting_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/cuda_skip.h"

namespace moeserve::engine {
namespace {

std::unique_ptr<ModelWeights> LoadGolden(const std::string& name,
                                         std::vector<std::vector<int32_t>>* p) {
  const testing::Golden golden = testing::ReadGolden(name);
  for (const testing::GoldenCase& g : golden.cases) p->push_back(g.prompt);
  return *ModelWeights::Load(testing::Runfile(golden.model_dir));
}

// A model on `device`; with `host` non-null, attention on it over a KV
// cache in its memory.
testing::LockstepRunner MakeRunner(const ModelWeights* weights,
                                   kernels::Backend* device,
                                   kernels::Backend* host) {
  testing::LockstepRunner r;
  r.experts = std::make_unique<ResidentExperts>(weights);
  r.model = *MoeModel::Create(weights, device, r.experts.get());
  if (host != nullptr) {
    absl::Status st = r.model->EnableHostAttention(host);
    EXPECT_TRUE(st.ok()) << st;
  }
  r.cache = *KvCache::Create(weights->config(), 128, 16,
                             host != nullptr ? host : device);
  return r;
}

class HostAttentionParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HostAttentionParityTest, LogitsBitForBitWithDeviceAttention) {
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<ModelWeights> weights = LoadGolden(GetParam(), &prompts);
  kernels::cpu::CpuBackend device({.num_threads = 2});
  // Its own pool, of another size: attention rows do not depend on it.
  kernels::cpu::CpuBackend host({.num_threads = 1});
  testing::LockstepRunner on_device = MakeRunner(weights.get(), &device, {});
  testing::LockstepRunner on_host = MakeRunner(weights.get(), &device, &host);
  EXPECT_TRUE(on_host.model->host_attention());
  EXPECT_FALSE(on_device.model->host_attention());
  const int passes = testing::RunGraphLockstep(on_device, on_host, prompts,
                                               weights->config().vocab_size);
  // prefill + 40 + 5 decode steps + verify + 3.
  EXPECT_EQ(passes, 50);
}

TEST_P(HostAttentionParityTest, GraphModeRunsHostAttentionStepsEagerly) {
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<ModelWeights> weights = LoadGolden(GetParam(), &prompts);
  kernels::cpu::CpuBackend cpu({.num_threads = 2});
  kernels::cpu::CpuBackend host({.num_threads = 1});
  kernels::CountingBackend graphs(&cpu, {.simulate_graphs = true});
  ASSERT_TRUE(graphs.SetGraphs(true));
  testing::LockstepRunner eager = MakeRunner(weights.get(), &cpu, {});
  testing::LockstepRunner graph = MakeRunner(weights.get(), &graphs, &host);
  EXPECT_EQ(testing::RunGraphLockstep(eager, graph, prompts,
                                      weights->config().vocab_size),
            50);
  // Nothing was recorded: every step had its host round trip.
  EXPECT_EQ(graphs.counts().graph_captures, 0);
  EXPECT_EQ(graphs.counts().graph_launches, 0);
}

// mixtral (plain GQA), olmoe (q/k norm over the whole projection),
// qwen2_moe (q/k/v bias, shared expert).
INSTANTIATE_TEST_SUITE_P(Models, HostAttentionParityTest,
                         ::testing::Values("mixtral_tiny", "olmoe",
                                           "qwen2_moe"));

TEST(HostAttentionTest, RefusesMissingOrNonCpuBackends) {
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  EXPECT_EQ(HostAttention::Create(nullptr, &cpu).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostAttention::Create(&cpu, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HostAttention::Create(&cpu, &cpu).ok());
}

TEST(HostAttentionTest, RunRefusesUnreservedBuffers) {
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  std::unique_ptr<HostAttention> host = *HostAttention::Create(&cpu, &cpu);
  ASSERT_TRUE(host->Reserve(2, 4, 2, 8).ok());
  kernels::PagedKvCache cache;
  const absl::Status st = host->Run(1000, 4, 2, 8, {}, cache, {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
}

TEST(HostAttentionCudaTest, RefusesGpuHostAndDeviceCache) {
  absl::StatusOr<std::unique_ptr<kernels::Backend>> cuda =
      kernels::CreateBackend({.name = "cuda"});
  MOESERVE_SKIP_WITHOUT_CUDA(cuda.status());
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<ModelWeights> weights = LoadGolden("mixtral_tiny", &prompts);
  kernels::cpu::CpuBackend host({.num_threads = 1});
  ResidentExperts experts(weights.get());
  // A GPU cannot be the host side.
  EXPECT_EQ(HostAttention::Create(cuda->get(), cuda->get()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Host attention over a KV cache in VRAM is refused, not read from the
  // host.
  absl::StatusOr<std::unique_ptr<MoeModel>> model =
      MoeModel::Create(weights.get(), cuda->get(), &experts);
  if (!model.ok()) GTEST_SKIP() << model.status();  // cuda experts provider
  ASSERT_TRUE((*model)->EnableHostAttention(&host).ok());
  std::unique_ptr<KvCache> cache =
      *KvCache::Create(weights->config(), 8, 16, cuda->get());
  BlockTable table;
  ASSERT_TRUE(cache->Grow(&table, prompts[0].size()).ok());
  std::vector<SequenceChunk> batch = {{prompts[0], 0, &table, 1}};
  std::vector<float> logits;
  EXPECT_EQ((*model)->Forward(batch, cache.get(), &logits).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace moeserve::engine
