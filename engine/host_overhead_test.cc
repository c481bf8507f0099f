// What a decode step costs the host, counted with kernels::CountingBackend
// around the CPU backend (issue 30 item 1, "count before changing"): the
// launches, syncs, copies and allocations per decode step and per MoE
// layer are printed, and the counting wrapper changes nothing in the
// tokens. The grouped expert op (issue 30 item 2) will be measured
// against these figures.
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/model_weights.h"
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

}  // namespace
}  // namespace moeserve::engine
