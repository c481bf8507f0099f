// The external drafter (models/demo-draft drafting for models/demo and
// models/demo-fg): catch-up after partial acceptance gives the drafts a
// fresh drafter computes from scratch; Forget frees the draft cache; a
// draft model with another vocabulary is refused; the cross-model
// prediction fills the lookahead for every target layer; the device path
// (experts in the backend's memory), run on the CPU backend, drafts and
// predicts exactly as the host path; on a GPU (skipped without one) it
// drafts and fills the lookahead with the prediction on the device (greedy
// identity on CUDA: //tests:policy_invariance_test's *_external_cuda cases).
#include "engine/spec_decode/external_drafter.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/sampling/sampler.h"
#include "engine/spec_decode/backend_resident_experts.h"
#include "engine/testing/golden.h"
#include "engine/testing/model_writer.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/cuda_skip.h"

namespace moeserve::engine::spec_decode {
namespace {

kernels::Backend* CpuBackend() {
  static auto* backend = new kernels::cpu::CpuBackend({.num_threads = 2});
  return backend;
}

using ::moeserve::engine::testing::Runfile;

// The CUDA backend, or null with `status` saying why there is none.
kernels::Backend* CudaBackend(absl::Status* status) {
  static absl::StatusOr<std::unique_ptr<kernels::Backend>>* backend =
      new absl::StatusOr<std::unique_ptr<kernels::Backend>>(
          kernels::CreateBackend({.name = "cuda"}));
  *status = backend->status();
  return backend->ok() ? backend->value().get() : nullptr;
}

// A target model with every expert resident (in the backend's memory off
// the CPU), its KV cache, and a drafter context for it.
struct Target {
  explicit Target(const std::string& model,
                  kernels::Backend* backend = CpuBackend())
      : backend(backend) {
    weights = *ModelWeights::Load(Runfile(model));
    if (backend->device() == kernels::Device::kCpu) {
      experts = std::make_unique<ResidentExperts>(weights.get());
    } else {
      experts = *BackendResidentExperts::Create(*weights, backend);
    }
    this->model = *MoeModel::Create(weights.get(), backend, experts.get());
    kv = *KvCache::Create(weights->config(), 256, 16, backend);
    // The engine runs the target before any draft (its router scratch is
    // then reserved for PredictExperts): one prefill pass.
    std::vector<int32_t> prompt = Prompt(0);
    BlockTable blocks;
    EXPECT_TRUE(kv->Grow(&blocks, static_cast<int64_t>(prompt.size())).ok());
    std::vector<SequenceChunk> batch = {{prompt, 0, &blocks, 1}};
    std::vector<float> logits;
    EXPECT_TRUE(this->model->Forward(batch, kv.get(), &logits).ok());
    kv->Release(&blocks);
  }

  DrafterContext Context(const std::string& draft = "models/demo-draft") {
    DrafterContext c;
    c.weights = weights.get();
    c.target = model.get();
    c.kv = kv.get();
    c.backend = backend;
    c.draft_model_dir = draft.empty() ? "" : Runfile(draft);
    return c;
  }

  static std::vector<int32_t> Prompt(int variant) {
    std::vector<int32_t> p = {1};
    for (int i = 0; i < 12; ++i) p.push_back(100 + 37 * i + 11 * variant);
    return p;
  }

  kernels::Backend* const backend;
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<ExpertProvider> experts;
  std::unique_ptr<MoeModel> model;
  std::unique_ptr<KvCache> kv;
};

std::unique_ptr<ExternalDrafter> MakeDrafter(
    const DrafterContext& context,
    const ExternalDrafter::Options& options = {}) {
  absl::StatusOr<std::unique_ptr<ExternalDrafter>> d =
      ExternalDrafter::Create(context, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

// Drafts k tokens for each of `seqs` (ids 1, 2, ...) greedily.
std::vector<std::vector<int32_t>> Draft(
    ExternalDrafter* drafter, const std::vector<std::vector<int32_t>>& seqs,
    int k, ExpertLookahead* lookahead = nullptr,
    std::vector<uint64_t> ids = {}) {
  const int32_t vocab =
      static_cast<int32_t>(drafter->draft_weights().config().vocab_size);
  std::vector<std::unique_ptr<Sampler>> samplers;
  std::vector<DraftInput> inputs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    samplers.push_back(
        std::make_unique<Sampler>(SamplingConfig{}, seqs[i], vocab));
    DraftInput in;
    in.tokens = seqs[i];
    in.k = k;
    in.sampler = samplers.back().get();
    in.sequence_id = ids.empty() ? i + 1 : ids[i];
    inputs.push_back(in);
  }
  std::vector<DraftOutput> outputs;
  ExpertLookahead local;
  const absl::Status s = drafter->Propose(
      inputs, &outputs, lookahead == nullptr ? &local : lookahead);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<std::vector<int32_t>> tokens;
  for (const DraftOutput& o : outputs) tokens.push_back(o.tokens);
  return tokens;
}

TEST(ExternalDrafterTest, CatchUpAfterPartialAcceptanceMatchesAFreshDraft) {
  Target target("models/demo");
  std::unique_ptr<ExternalDrafter> drafter = MakeDrafter(target.Context());
  ASSERT_NE(drafter, nullptr);
  constexpr int kK = 4;
  const int32_t vocab =
      static_cast<int32_t>(target.weights->config().vocab_size);
  std::vector<std::vector<int32_t>> seqs = {Target::Prompt(1),
                                            Target::Prompt(2)};
  for (int round = 0; round < 4; ++round) {
    const std::vector<std::vector<int32_t>> drafts =
        Draft(drafter.get(), seqs, kK);
    // From scratch: a fresh drafter on the same tokens, one sequence each.
    for (size_t i = 0; i < seqs.size(); ++i) {
      std::unique_ptr<ExternalDrafter> fresh = MakeDrafter(target.Context());
      ASSERT_NE(fresh, nullptr);
      EXPECT_EQ(drafts[i], Draft(fresh.get(), {seqs[i]}, kK)[0])
          << "round " << round << " sequence " << i;
      ASSERT_EQ(drafts[i].size(), static_cast<size_t>(kK));
    }
    // The verifier keeps `round % kK` drafts of sequence 0 and replaces the
    // next; sequence 1 has every draft accepted and a bonus token.
    const size_t kept = round % kK;
    seqs[0].insert(seqs[0].end(), drafts[0].begin(), drafts[0].begin() + kept);
    seqs[0].push_back((drafts[0][kept] + 1) % vocab);
    seqs[1].insert(seqs[1].end(), drafts[1].begin(), drafts[1].end());
    seqs[1].push_back((drafts[1].back() + 7) % vocab);
    // What stays valid: the kept prefix (the draft fed k - 1 drafts).
    EXPECT_EQ(drafter->computed_tokens(1),
              static_cast<int64_t>(seqs[0].size() - 1 - kept + kK - 1));
  }
}

TEST(ExternalDrafterTest, ForgetFreesTheDraftBlocks) {
  Target target("models/demo");
  std::unique_ptr<ExternalDrafter> drafter = MakeDrafter(target.Context());
  ASSERT_NE(drafter, nullptr);
  const KvCache& cache = drafter->draft_cache();
  EXPECT_EQ(cache.free_blocks(), cache.num_blocks());
  Draft(drafter.get(), {Target::Prompt(0), Target::Prompt(3)}, 3, nullptr,
        {7, 9});
  EXPECT_LT(cache.free_blocks(), cache.num_blocks());
  EXPECT_EQ(drafter->num_sequences(), 2u);
  drafter->Forget(7);
  EXPECT_EQ(drafter->num_sequences(), 1u);
  EXPECT_EQ(drafter->computed_tokens(7), 0);
  EXPECT_GT(drafter->computed_tokens(9), 0);
  drafter->Forget(9);
  drafter->Forget(12345);  // unknown: nothing happens
  EXPECT_EQ(cache.free_blocks(), cache.num_blocks());
  EXPECT_EQ(drafter->num_sequences(), 0u);
}

TEST(ExternalDrafterTest, RefusesAMissingDirOrAnotherVocabulary) {
  Target target("models/demo");
  absl::StatusOr<std::unique_ptr<ExternalDrafter>> none =
      ExternalDrafter::Create(target.Context(""));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("draft_model_dir"), std::string::npos);
  absl::StatusOr<std::unique_ptr<ExternalDrafter>> missing =
      ExternalDrafter::Create(target.Context("models/no-such-draft"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("draft_model_dir"),
            std::string::npos);
  // The tiny mixtral of model_writer: vocab 96, the target's is 4096.
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteTinyModel(dir, testing::TinyMixtralConfig()).ok());
  DrafterContext context = target.Context();
  context.draft_model_dir = dir;
  absl::StatusOr<std::unique_ptr<ExternalDrafter>> other =
      ExternalDrafter::Create(context);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("96"), std::string::npos);
  EXPECT_NE(other.status().message().find("4096"), std::string::npos);
}

class LookaheadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LookaheadTest, TargetRoutersFillTheLookaheadForEveryTargetLayer) {
  Target target(GetParam());
  std::unique_ptr<ExternalDrafter> drafter = MakeDrafter(target.Context());
  ASSERT_NE(drafter, nullptr);
  std::vector<size_t> notified;
  drafter->SetLookaheadListener([&](const ExpertLookahead& l) {
    EXPECT_EQ(l.planned_positions, 3);
    notified.push_back(l.experts.size());
  });
  const ModelConfig& c = target.weights->config();
  ExpertLookahead lookahead;
  // Two sequences: the first pass has catch-up rows besides the drafting
  // ones; later passes one row each.
  Draft(drafter.get(), {Target::Prompt(0), Target::Prompt(4)}, 3, &lookahead);
  EXPECT_EQ(notified, (std::vector<size_t>{1, 2}));
  ASSERT_EQ(lookahead.experts.size(), 3u);
  EXPECT_EQ(lookahead.planned_positions, 3);
  for (size_t p = 0; p < lookahead.experts.size(); ++p) {
    ASSERT_EQ(lookahead.experts[p].size(),
              static_cast<size_t>(c.num_hidden_layers));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const std::vector<int>& ids = lookahead.experts[p][l];
      EXPECT_GE(ids.size(), static_cast<size_t>(c.num_experts_per_tok))
          << "position " << p << " layer " << l;
      EXPECT_LE(ids.size(), static_cast<size_t>(2 * c.num_experts_per_tok));
      for (int e : ids) {
        EXPECT_GE(e, 0);
        EXPECT_LT(e, c.num_experts);
      }
    }
  }
  // The first position's prediction is the drafting rows' only: the same
  // as drafting each sequence alone from a fresh drafter, merged.
  std::vector<std::vector<int>> merged(c.num_hidden_layers);
  for (int v : {0, 4}) {
    std::unique_ptr<ExternalDrafter> fresh = MakeDrafter(target.Context());
    ExpertLookahead one;
    Draft(fresh.get(), {Target::Prompt(v)}, 1, &one);
    ASSERT_EQ(one.experts.size(), 1u);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      for (int e : one.experts[0][l]) merged[l].push_back(e);
    }
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::sort(merged[l].begin(), merged[l].end());
    merged[l].erase(std::unique(merged[l].begin(), merged[l].end()),
                    merged[l].end());
    EXPECT_EQ(lookahead.experts[0][l], merged[l]) << "layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, LookaheadTest,
                         ::testing::Values("models/demo", "models/demo-fg"),
                         [](const auto& info) {
                           return info.param == "models/demo" ? "demo"
                                                              : "demo_fg";
                         });

// The device path (what a GPU runs: the draft's experts copied into the
// backend's memory, served by BackendResidentExperts) with the CPU backend
// standing in for the device: the same drafts and the same lookahead as the
// host path, position by position, over rounds of partial acceptance with a
// catch-up pass (gathered prediction rows) in each.
class DevicePathTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DevicePathTest, DraftsAndLookaheadMatchTheHostPath) {
  Target target(GetParam());
  std::unique_ptr<ExternalDrafter> host = MakeDrafter(target.Context());
  std::unique_ptr<ExternalDrafter> device =
      MakeDrafter(target.Context(), {.experts_in_backend_memory = true});
  ASSERT_NE(host, nullptr);
  ASSERT_NE(device, nullptr);
  EXPECT_FALSE(host->experts_in_backend_memory());
  EXPECT_TRUE(device->experts_in_backend_memory());
  constexpr int kK = 3;
  const int32_t vocab =
      static_cast<int32_t>(target.weights->config().vocab_size);
  std::vector<std::vector<int32_t>> seqs = {Target::Prompt(6),
                                            Target::Prompt(7)};
  for (int round = 0; round < 3; ++round) {
    ExpertLookahead host_lookahead, device_lookahead;
    const auto drafts = Draft(host.get(), seqs, kK, &host_lookahead);
    EXPECT_EQ(drafts, Draft(device.get(), seqs, kK, &device_lookahead))
        << "round " << round;
    EXPECT_EQ(host_lookahead.experts, device_lookahead.experts)
        << "round " << round;
    EXPECT_EQ(host_lookahead.experts.size(), static_cast<size_t>(kK));
    // Sequence 0 keeps one draft (a catch-up of two tokens next round),
    // sequence 1 all of them and a bonus token.
    seqs[0].push_back(drafts[0][0]);
    seqs[0].push_back((drafts[0][1] + 1) % vocab);
    seqs[1].insert(seqs[1].end(), drafts[1].begin(), drafts[1].end());
    seqs[1].push_back((drafts[1].back() + 3) % vocab);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, DevicePathTest,
                         ::testing::Values("models/demo", "models/demo-fg"),
                         [](const auto& info) {
                           return info.param == "models/demo" ? "demo"
                                                              : "demo_fg";
                         });

// On a GPU (skips without one): the draft model's experts, dense weights and
// KV cache in VRAM, its prediction on the device from the target's routers
// in VRAM. Every sequence gets its k drafts, valid tokens, and the
// lookahead names, for every position and target layer, between top-k and
// (sequences x top-k) experts of that layer; the listener hears each
// position but the last. A second round (partial acceptance: a catch-up
// pass with gathered rows) drafts again.
TEST(ExternalDrafterTest, DraftsAndPredictsOnCuda) {
  absl::Status status;
  kernels::Backend* cuda = CudaBackend(&status);
  MOESERVE_SKIP_WITHOUT_CUDA(status);
  Target target("models/demo-fg", cuda);
  std::unique_ptr<ExternalDrafter> drafter = MakeDrafter(target.Context());
  ASSERT_NE(drafter, nullptr);
  EXPECT_TRUE(drafter->experts_in_backend_memory());
  int notified = 0;
  drafter->SetLookaheadListener([&](const ExpertLookahead&) { ++notified; });
  const ModelConfig& c = target.weights->config();
  constexpr int kK = 3;
  std::vector<std::vector<int32_t>> seqs = {Target::Prompt(1),
                                            Target::Prompt(2)};
  for (int round = 0; round < 2; ++round) {
    ExpertLookahead lookahead;
    const auto drafts = Draft(drafter.get(), seqs, kK, &lookahead);
    ASSERT_EQ(drafts.size(), 2u);
    for (const std::vector<int32_t>& d : drafts) {
      ASSERT_EQ(d.size(), static_cast<size_t>(kK)) << "round " << round;
      for (int32_t t : d) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, c.vocab_size);
      }
    }
    ASSERT_EQ(lookahead.experts.size(), static_cast<size_t>(kK));
    for (int p = 0; p < kK; ++p) {
      ASSERT_EQ(lookahead.experts[p].size(),
                static_cast<size_t>(c.num_hidden_layers));
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        const std::vector<int>& ids = lookahead.experts[p][l];
        EXPECT_GE(ids.size(), static_cast<size_t>(c.num_experts_per_tok))
            << "round " << round << " position " << p << " layer " << l;
        EXPECT_LE(ids.size(), static_cast<size_t>(2 * c.num_experts_per_tok));
        for (int e : ids) {
          EXPECT_GE(e, 0);
          EXPECT_LT(e, c.num_experts);
        }
      }
    }
    seqs[0].push_back(drafts[0][0]);
    seqs[0].push_back((drafts[0][1] + 1) % static_cast<int32_t>(c.vocab_size));
    seqs[1].insert(seqs[1].end(), drafts[1].begin(), drafts[1].end());
  }
  EXPECT_EQ(notified, 2 * (kK - 1));
}

TEST(ExternalDrafterTest, SampledDraftsReturnTheirDistributions) {
  Target target("models/demo");
  std::unique_ptr<ExternalDrafter> drafter = MakeDrafter(target.Context());
  ASSERT_NE(drafter, nullptr);
  const std::vector<int32_t> prompt = Target::Prompt(5);
  SamplingConfig config;
  config.temperature = 0.8f;
  config.top_k = 8;
  Sampler sampler(config, prompt, 4096);
  DraftInput in;
  in.tokens = prompt;
  in.k = 3;
  in.sampler = &sampler;
  in.draft_seed = 99;
  in.sequence_id = 1;
  std::vector<DraftOutput> outputs;
  ExpertLookahead lookahead;
  ASSERT_TRUE(drafter->Propose({&in, 1}, &outputs, &lookahead).ok());
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].tokens.size(), 3u);
  ASSERT_EQ(outputs[0].q.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LE(outputs[0].q[i].ids.size(), 8u);
    EXPECT_GT(outputs[0].q[i].Prob(outputs[0].tokens[i]), 0);
  }
}

}  // namespace
}  // namespace moeserve::engine::spec_decode
