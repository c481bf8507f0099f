// What a decode step costs the host, counted with kernels::CountingBackend
// around the CPU backend (issue 30 item 1, "count before changing"): the
// launches, syncs, copies and allocations per decode step and per MoE
// layer are printed, and the counting wrapper changes nothing in the
// tokens. With every expert resident, the forward pass holds the layer's
// launches constant in the number of routed experts (one grouped expert op,
// issue 30 item 2), allocates nothing in a warm decode step, and waits on
// the device once per MoE layer (the router's ids) plus once per step (the
// logits) (item 3).
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/testing/golden.h"
#include "engine/tokenizer.h"
#include "gtest/gtest.h"
#include "kernels/counting_backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine {
namespace {

std::vector<int32_t> Generate(Engine* engine, std::vector<int32_t> prompt,
                              int tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = tokens;
  r.ignore_eos = true;
  std::shared_ptr<RequestStream> stream = *engine->Submit(std::move(r));
  std::vector<int32_t> out;
  GenerationEvent e;
  while (stream->Pop(&e, absl::Seconds(60))) {
    out.insert(out.end(), e.tokens.begin(), e.tokens.end());
    if (e.finish != FinishReason::kNone) break;
  }
  return out;
}

TEST(HostOverheadTest, CountsADecodeStepAndChangesNoToken) {
  const testing::Golden golden = testing::ReadGolden("mixtral_tiny");
  const std::string dir = testing::Runfile(golden.model_dir);
  std::unique_ptr<ModelWeights> weights = *ModelWeights::Load(dir);
  std::unique_ptr<Tokenizer> tokenizer = *Tokenizer::LoadFromModelDir(dir);
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  kernels::CountingBackend counting(&cpu);
  auto plain = Engine::Create(weights.get(), tokenizer.get(), &cpu, {});
  auto counted = Engine::Create(weights.get(), tokenizer.get(), &counting, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(counted.ok()) << counted.status();
  const std::vector<int32_t> prompt = golden.cases.at(0).prompt;
  constexpr int kDecode = 8;

  // A first run grows every workspace; then the same prompt for kDecode
  // and 2 kDecode tokens: their difference is kDecode decode steps.
  Generate(counted->get(), prompt, 1 + 2 * kDecode);
  const kernels::BackendCounts c0 = counting.counts();
  Generate(counted->get(), prompt, 1 + kDecode);
  const kernels::BackendCounts c1 = counting.counts();
  const std::vector<int32_t> got =
      Generate(counted->get(), prompt, 1 + 2 * kDecode);
  const kernels::BackendCounts c2 = counting.counts();
  EXPECT_EQ(got, Generate(plain->get(), prompt, 1 + 2 * kDecode));

  const kernels::BackendCounts short_run = c1.Minus(c0);
  const kernels::BackendCounts decode = c2.Minus(c1).Minus(short_run);
  const ModelConfig& c = weights->config();
  const double per_layer = 1.0 / (kDecode * c.num_hidden_layers);
  std::printf(
      "%s (%ld layers, %ld experts, top-%ld), batch 1, CPU backend: per decode "
      "step per layer %.1f launches, %.2f syncs, %.2f copies to device, "
      "%.2f to host, %.2f allocations (%.0f bytes)\n",
      golden.model_dir.c_str(), static_cast<long>(c.num_hidden_layers),
      static_cast<long>(c.num_experts),
      static_cast<long>(c.num_experts_per_tok), decode.launches * per_layer,
      decode.syncs * per_layer, decode.copies_to_device * per_layer,
      decode.copies_to_host * per_layer, decode.allocations * per_layer,
      decode.allocated_bytes * per_layer);
  EXPECT_GT(short_run.launches, 0);
  // Every layer launches its router and at least one expert per decode step.
  EXPECT_GE(decode.launches, int64_t{kDecode} * c.num_hidden_layers * 2);
}

// The counts of one decode step of `batch` sequences (after a warm-up step
// of the same shape, whose counts go to `warmup` if given), straight on
// MoeModel with every expert resident.
kernels::BackendCounts DecodeStepCounts(
    const ModelWeights& weights, kernels::CountingBackend& counting,
    MoeModel& model, int batch, kernels::BackendCounts* warmup = nullptr,
    std::vector<float>* last_logits = nullptr) {
  auto cache = KvCache::Create(weights.config(), 64, 16);
  EXPECT_TRUE(cache.ok());
  std::vector<BlockTable> tables(batch);
  std::vector<std::vector<int32_t>> prompts(batch);
  std::vector<int32_t> next(batch);
  for (int i = 0; i < batch; ++i) {
    // Different prompts route to different experts.
    prompts[i] = {1 + 7 * i, 2 + 11 * i, 3 + 13 * i};
    next[i] = 5 + 17 * i;
    EXPECT_TRUE((*cache)->Grow(&tables[i], 8).ok());
  }
  std::vector<float> logits;
  std::vector<SequenceChunk> prefill;
  for (int i = 0; i < batch; ++i) {
    prefill.push_back({prompts[i], 0, &tables[i]});
  }
  EXPECT_TRUE(model.Forward(prefill, cache->get(), &logits).ok());
  kernels::BackendCounts before;
  for (int step = 0; step < 2; ++step) {  // the first one warms up
    std::vector<SequenceChunk> decode;
    for (int i = 0; i < batch; ++i) {
      decode.push_back({std::span(&next[i], 1), 3 + step, &tables[i]});
    }
    before = counting.counts();
    EXPECT_TRUE(model.Forward(decode, cache->get(), &logits).ok());
    if (step == 0 && warmup != nullptr) {
      *warmup = counting.counts().Minus(before);
    }
  }
  if (last_logits != nullptr) *last_logits = logits;
  return counting.counts().Minus(before);
}

TEST(HostOverheadTest, LaunchesPerLayerDoNotGrowWithRoutedExperts) {
  const testing::Golden golden = testing::ReadGolden("mixtral_tiny");
  std::unique_ptr<ModelWeights> weights =
      *ModelWeights::Load(testing::Runfile(golden.model_dir));
  const ModelConfig& c = weights->config();
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  kernels::CountingBackend counting(&cpu);
  ResidentExperts resident(weights.get());
  // Counts the experts each layer computes, to show they did grow.
  struct Counted final : ExpertProvider {
    explicit Counted(ExpertProvider* inner) : inner(inner) {}
    absl::StatusOr<const std::byte*> Acquire(ExpertId id) override {
      ++acquired;
      return inner->Acquire(id);
    }
    void Release(ExpertId id) override { inner->Release(id); }
    ExpertProvider* inner;
    int64_t acquired = 0;
  } experts(&resident);
  std::unique_ptr<MoeModel> model =
      *MoeModel::Create(weights.get(), &counting, &experts);
  const int layers = static_cast<int>(c.num_hidden_layers);
  int64_t acquired0 = experts.acquired;
  const kernels::BackendCounts one =
      DecodeStepCounts(*weights, counting, *model, 1);
  const int64_t experts_one = experts.acquired - acquired0;
  acquired0 = experts.acquired;
  const kernels::BackendCounts four =
      DecodeStepCounts(*weights, counting, *model, 4);
  const int64_t experts_four = experts.acquired - acquired0;
  std::printf(
      "%s, every expert resident, CPU backend, per decode step: batch 1: %ld "
      "launches, %ld syncs, %ld allocations; batch 4: %ld launches, %ld syncs, "
      "%ld allocations (%d layers; experts computed in prefill, warm-up "
      "and measured step: %ld at batch 1, %ld at batch 4)\n",
      golden.model_dir.c_str(), static_cast<long>(one.launches),
      static_cast<long>(one.syncs), static_cast<long>(one.allocations),
      static_cast<long>(four.launches), static_cast<long>(four.syncs),
      static_cast<long>(four.allocations), layers,
      static_cast<long>(experts_one), static_cast<long>(experts_four));
  EXPECT_GT(experts_four, experts_one) << "batch 4 should route to more";
  EXPECT_EQ(one.launches, four.launches);
  EXPECT_EQ(one.allocations, 0);
  EXPECT_EQ(four.allocations, 0);
  // One wait per MoE layer (routing) and one for the step's logits.
  EXPECT_LE(one.syncs, layers + 1);
  EXPECT_LE(four.syncs, layers + 1);
  // One upload of the step's metadata, one routing table per layer.
  EXPECT_LE(four.copies_to_device, layers + 1);
}

// Graph mode (issue 30 item 3) counted without a GPU: the counting wrapper
// simulates a backend that records the dense segments (the CPU still runs
// every op, so the logits are the eager ones). A warm decode step launches
// one graph per dense segment (layers + 1) instead of their ops, records
// nothing new, and syncs, copies and allocates exactly as the eager step.
TEST(HostOverheadTest, GraphModeLaunchesOneGraphPerDenseSegment) {
  const testing::Golden golden = testing::ReadGolden("mixtral_tiny");
  std::unique_ptr<ModelWeights> weights =
      *ModelWeights::Load(testing::Runfile(golden.model_dir));
  const int layers = static_cast<int>(weights->config().num_hidden_layers);
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  kernels::CountingBackend eager(&cpu);
  kernels::CountingBackend graphs(&cpu, {.simulate_graphs = true});
  ASSERT_TRUE(graphs.SetGraphs(true));
  ResidentExperts resident(weights.get());
  std::unique_ptr<MoeModel> eager_model =
      *MoeModel::Create(weights.get(), &eager, &resident);
  std::unique_ptr<MoeModel> graph_model =
      *MoeModel::Create(weights.get(), &graphs, &resident);
  for (int batch : {1, 4}) {
    SCOPED_TRACE(batch);
    std::vector<float> want, got;
    const kernels::BackendCounts e =
        DecodeStepCounts(*weights, eager, *eager_model, batch, nullptr, &want);
    kernels::BackendCounts warm;
    const kernels::BackendCounts g =
        DecodeStepCounts(*weights, graphs, *graph_model, batch, &warm, &got);
    std::printf(
        "%s, graph mode (simulated), batch %d, per decode step: %ld launches "
        "(%ld graphs holding %ld ops, recorded in the warm-up step) vs %ld "
        "eager; %ld syncs vs %ld\n",
        golden.model_dir.c_str(), batch, static_cast<long>(g.launches),
        static_cast<long>(g.graph_launches),
        static_cast<long>(warm.captured_ops), static_cast<long>(e.launches),
        static_cast<long>(g.syncs), static_cast<long>(e.syncs));
    EXPECT_EQ(got, want);
    EXPECT_EQ(e.graph_launches, 0);
    EXPECT_EQ(warm.graph_captures, layers + 1);
    EXPECT_EQ(g.graph_captures, 0);
    EXPECT_EQ(g.graph_launches, layers + 1);
    // The segments' ops became one launch each; the routed experts' ops
    // are launched as before.
    EXPECT_EQ(g.launches, e.launches - warm.captured_ops + (layers + 1));
    EXPECT_LT(g.launches, e.launches);
    EXPECT_EQ(g.syncs, e.syncs);
    EXPECT_EQ(g.copies_to_device, e.copies_to_device);
    EXPECT_EQ(g.copies_to_host, e.copies_to_host);
    EXPECT_EQ(g.allocations, 0);
  }
}

}  // namespace
}  // namespace moeserve::engine
