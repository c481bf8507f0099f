// Host attention (engine/host_attention.h): a model whose KV cache lives in
// host memory and whose attention a second CPU backend computes gives the
// logits of device attention bit for bit (the CPU backend stands in for the
// device: same kernels on both sides) through prefill, decode across KV
// block boundaries, a verification chunk wanting k+1 logits rows and a
// batch of one; also with graph mode on (host attention steps run eagerly).
// Steps split into two micro-batches (moe_model.h: the host attends one
// while the device runs the other's experts) give the same logits bit for
// bit as unsplit host attention and as device attention: every op is per
// row or per sequence, and the CPU kernels' rows do not depend on the row
// count (kernels/cpu/matmul.h). On CUDA cuBLAS may pick another algorithm
// for another row count: there the check is greedy identity (tests/
// policy_invariance_test's HostAttention suite).
// On CUDA: the refusals (a GPU as the host backend, a KV cache in device
// memory); token parity on CUDA is tests/policy_invariance_test's
// HostAttention suite.
#include "engine/host_attention.h"

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
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
                                   kernels::Backend* host,
                                   const HostAttentionOptions& options = {}) {
  testing::LockstepRunner r;
  r.experts = std::make_unique<ResidentExperts>(weights);
  r.model = *MoeModel::Create(weights, device, r.experts.get());
  if (host != nullptr) {
    absl::Status st = r.model->EnableHostAttention(host, options);
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

// Every step of 2+ sequences split (decode steps of 3 sequences too).
TEST_P(HostAttentionParityTest, SplitStepsBitForBitWithDeviceAttention) {
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<ModelWeights> weights = LoadGolden(GetParam(), &prompts);
  kernels::cpu::CpuBackend device({.num_threads = 2});
  kernels::cpu::CpuBackend host({.num_threads = 1});
  testing::LockstepRunner on_device = MakeRunner(weights.get(), &device, {});
  testing::LockstepRunner split =
      MakeRunner(weights.get(), &device, &host, {.split_min_attended = 1});
  EXPECT_EQ(testing::RunGraphLockstep(on_device, split, prompts,
                                      weights->config().vocab_size),
            50);
}

// One step mixing a decode token, a 3-token verify chunk wanting 3 logits
// rows and a 5-token prefill chunk (after a split prefill), then decode
// steps: device attention, unsplit and split host attention agree bit for
// bit at every step.
TEST_P(HostAttentionParityTest, SplitMixedStepMatchesUnsplitAndDevice) {
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<ModelWeights> weights = LoadGolden(GetParam(), &prompts);
  ASSERT_GE(prompts.size(), 2u);
  if (prompts.size() > 3) prompts.resize(3);
  while (prompts.size() < 3) prompts.push_back(prompts[0]);
  kernels::cpu::CpuBackend device({.num_threads = 2});
  kernels::cpu::CpuBackend host({.num_threads = 1});
  std::vector<testing::LockstepRunner> runners;
  runners.push_back(MakeRunner(weights.get(), &device, {}));
  runners.push_back(
      MakeRunner(weights.get(), &device, &host, {.split_min_attended = 0}));
  runners.push_back(
      MakeRunner(weights.get(), &device, &host, {.split_min_attended = 1}));
  std::vector<int64_t> pos(3, 0);
  // Each pass on every runner; the logits must agree bit for bit.
  auto pass = [&](const std::vector<std::vector<int32_t>>& chunks,
                  const std::vector<int>& num_logits, const std::string& what) {
    std::vector<std::vector<float>> logits;
    for (testing::LockstepRunner& r : runners) {
      logits.push_back(
          testing::LockstepPass(r, {0, 1, 2}, chunks, pos, num_logits));
    }
    ASSERT_FALSE(logits[0].empty()) << what;
    for (size_t i = 1; i < logits.size(); ++i) {
      ASSERT_EQ(logits[i].size(), logits[0].size()) << what;
      EXPECT_EQ(std::memcmp(logits[i].data(), logits[0].data(),
                            logits[0].size() * sizeof(float)),
                0)
          << what << ": runner " << i << " differs from device attention";
    }
    for (int s = 0; s < 3; ++s) pos[s] += chunks[s].size();
  };
  pass(prompts, {1, 1, 1}, "prefill");
  const std::vector<int32_t>& p = prompts[0];
  const std::vector<int32_t> decode = {p[0]};
  const std::vector<int32_t> verify = {p[0], p[1 % p.size()], p[2 % p.size()]};
  std::vector<int32_t> prefill;
  for (int i = 0; i < 5; ++i) prefill.push_back(p[i % p.size()]);
  pass({decode, verify, prefill}, {1, 3, 1}, "decode + verify + prefill");
  for (int step = 0; step < 20; ++step) {
    pass({decode, decode, decode}, {1, 1, 1},
         "decode step " + std::to_string(step));
  }
}

// Records each BeginLayer's layer and token count (routed pairs / k).
class LayerLog final : public ExpertProvider {
 public:
  explicit LayerLog(const ModelWeights* weights) : inner_(weights) {}
  kernels::Device device() const override { return inner_.device(); }
  void BeginLayer(int layer, std::span<const int> experts,
                  std::span<const int> token_counts, const float* hidden,
                  int64_t n) override {
    (void)experts, (void)token_counts, (void)hidden;
    calls.push_back({layer, n});
  }
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override {
    return inner_.Acquire(id);
  }
  void Release(ExpertId id) override { inner_.Release(id); }
  std::vector<std::pair<int, int64_t>> calls;

 private:
  ResidentExperts inner_;
};

// A split step routes each layer twice in a row, the first micro-batch's
// tokens (the sequences up to the boundary nearest half the tokens) then
// the second's; an unsplit one once. The expert provider (and through it
// the offload policy) sees exactly that (offload_policy.h).
TEST(HostAttentionSplitTest, EachLayerRoutedOncePerMicroBatch) {
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<ModelWeights> weights = LoadGolden("mixtral_tiny", &prompts);
  kernels::cpu::CpuBackend device({.num_threads = 1});
  kernels::cpu::CpuBackend host({.num_threads = 1});
  LayerLog log(weights.get());
  std::unique_ptr<MoeModel> model =
      *MoeModel::Create(weights.get(), &device, &log);
  // The first step's queries read 6 + 3 + 21 + 1 = 31 keys, the second's
  // 4 + 3 = 7.
  ASSERT_TRUE(
      model->EnableHostAttention(&host, {.split_min_attended = 20}).ok());
  std::unique_ptr<KvCache> cache =
      *KvCache::Create(weights->config(), 64, 16, &host);
  const std::vector<int32_t> p = prompts[0];
  std::vector<BlockTable> tables(4);
  // Chunks of 3, 2, 6 and 1 tokens: the boundary nearest 6 tokens is after
  // the second sequence (5 tokens | 7).
  const std::vector<int> sizes = {3, 2, 6, 1};
  std::vector<std::vector<int32_t>> chunks;
  std::vector<SequenceChunk> batch;
  for (int i = 0; i < 4; ++i) {
    chunks.emplace_back(sizes[i], p[0]);
    ASSERT_TRUE(cache->Grow(&tables[i], sizes[i]).ok());
  }
  for (int i = 0; i < 4; ++i) batch.push_back({chunks[i], 0, &tables[i], 1});
  std::vector<float> logits;
  ASSERT_TRUE(model->Forward(batch, cache.get(), &logits).ok());
  const int layers = weights->config().num_hidden_layers;
  ASSERT_EQ(log.calls.size(), 2u * layers);
  for (int l = 0; l < layers; ++l) {
    EXPECT_EQ(log.calls[2 * l], std::make_pair(l, int64_t{5}));
    EXPECT_EQ(log.calls[2 * l + 1], std::make_pair(l, int64_t{7}));
  }
  // Below split_min_attended: one pass per layer.
  log.calls.clear();
  batch.resize(2);
  for (int i = 0; i < 2; ++i) batch[i].start_position = sizes[i];
  for (int i = 0; i < 2; ++i) {
    chunks[i] = {p[0]};
    ASSERT_TRUE(cache->Grow(&tables[i], sizes[i] + 1).ok());
    batch[i].tokens = chunks[i];
  }
  ASSERT_TRUE(model->Forward(batch, cache.get(), &logits).ok());
  ASSERT_EQ(log.calls.size(), static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    EXPECT_EQ(log.calls[l], std::make_pair(l, int64_t{2}));
  }
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

TEST(HostAttentionTest, WaitWithoutStartRefused) {
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  std::unique_ptr<HostAttention> host = *HostAttention::Create(&cpu, &cpu);
  EXPECT_EQ(host->Wait().code(), absl::StatusCode::kFailedPrecondition);
  // A started job's error comes back from its Wait, in Start order.
  ASSERT_TRUE(host->Reserve(2, 4, 2, 8).ok());
  host->Start({.row0 = 0, .n = 1000, .heads = 4, .kv_heads = 2, .head_dim = 8});
  host->Start({.row0 = 1, .n = 1, .heads = 4, .kv_heads = 2, .head_dim = 8});
  EXPECT_EQ(host->Wait().code(), absl::StatusCode::kInternal);
  // The second: its buffers are reserved, its cache and metadata are not.
  EXPECT_FALSE(host->Wait().ok());
}

TEST(HostAttentionTest, RefusesNegativeSplitThreshold) {
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<ModelWeights> weights = LoadGolden("mixtral_tiny", &prompts);
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  ResidentExperts experts(weights.get());
  std::unique_ptr<MoeModel> model =
      *MoeModel::Create(weights.get(), &cpu, &experts);
  EXPECT_EQ(model->EnableHostAttention(&cpu, {.split_min_attended = -1}).code(),
            absl::StatusCode::kInvalidArgument);
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
