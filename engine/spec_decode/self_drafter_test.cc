// The self drafter (models/demo-fg drafting for itself) computes only with
// draft experts: those the offload policy names (OffloadPolicy::
// IsDraftExpert; self_spec's pins in the paper's mode) that are also ready
// in the fast tier. Every other router choice is remapped to one of them, and
// a layer with none is skipped.
#include "engine/spec_decode/self_drafter.h"

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "engine/offload/offload_policy.h"
#include "engine/sampling/sampler.h"
#include "engine/testing/golden.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine::spec_decode {
namespace {

using Ids = std::set<std::pair<int, int>>;

kernels::Backend* CpuBackend() {
  static auto* backend = new kernels::cpu::CpuBackend({.num_threads = 2});
  return backend;
}

using ::moeserve::engine::testing::Runfile;

// Every expert resident in memory; records what the draft acquires.
class RecordingExperts final : public ExpertProvider {
 public:
  explicit RecordingExperts(const ModelWeights* weights) : weights_(weights) {}
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override {
    acquired.insert({id.layer, id.expert});
    return weights_->expert(id).data;
  }
  void Release(ExpertId) override {}

  Ids acquired;

 private:
  const ModelWeights* const weights_;
};

// A fast tier holding `ready` (all experts when empty); nothing moves.
class FixedResidency final : public ResidencyControl {
 public:
  FixedResidency(const ModelConfig& c, Ids ready)
      : config_(c), ready_(std::move(ready)) {}
  int num_layers() const override { return config_.num_hidden_layers; }
  int num_experts() const override { return config_.num_experts; }
  int experts_per_token() const override { return config_.num_experts_per_tok; }
  int capacity_slots() const override { return num_layers() * num_experts(); }
  bool IsResident(ExpertId id) const override {
    return ready_.empty() || ready_.count({id.layer, id.expert}) > 0;
  }
  bool Prefetch(ExpertId) override { return false; }
  bool Pin(ExpertId) override { return false; }
  void Unpin(ExpertId) override {}
  void Evict(ExpertId) override {}
  std::vector<int> PredictExperts(int, const float*, int64_t, int) override {
    return {};
  }

 private:
  const ModelConfig& config_;
  const Ids ready_;
};

// Names `draft` as its draft experts (every expert when empty).
class DraftSetPolicy final : public OffloadPolicy {
 public:
  explicit DraftSetPolicy(Ids draft) : draft_(std::move(draft)) {}
  std::string_view name() const override { return "draft_set"; }
  bool IsDraftExpert(ExpertId id) const override {
    return draft_.empty() || draft_.count({id.layer, id.expert}) > 0;
  }
  void ChooseVictims(std::span<const ExpertId>, int,
                     std::vector<ExpertId>*) override {}

 private:
  const Ids draft_;
};

struct Harness {
  Harness() {
    weights = *ModelWeights::Load(Runfile("models/demo-fg"));
    resident = std::make_unique<ResidentExperts>(weights.get());
    model = *MoeModel::Create(weights.get(), CpuBackend(), resident.get());
    kv = *KvCache::Create(weights->config(), 64, 16, CpuBackend());
  }

  // Drafts kK tokens greedily after a prompt whose keys and values (all but
  // its last token) are in the cache; returns the experts it acquired.
  Ids Draft(const Ids& ready, const Ids& draft_set,
            std::vector<int32_t>* tokens_out = nullptr) {
    constexpr int kK = 3;
    RecordingExperts recording(weights.get());
    FixedResidency residency(weights->config(), ready);
    DraftSetPolicy policy(draft_set);
    DrafterContext c;
    c.weights = weights.get();
    c.target = model.get();
    c.kv = kv.get();
    c.draft_experts = &recording;
    c.residency = &residency;
    c.policy = &policy;
    c.backend = CpuBackend();
    absl::StatusOr<std::unique_ptr<Drafter>> drafter = SelfDrafter::Create(c);
    EXPECT_TRUE(drafter.ok()) << drafter.status();
    if (!drafter.ok()) return {};

    std::vector<int32_t> prompt = {1};
    for (int i = 0; i < 14; ++i) prompt.push_back(200 + 53 * i);
    BlockTable blocks;
    EXPECT_TRUE(
        kv->Grow(&blocks, static_cast<int64_t>(prompt.size()) - 1 + kK).ok());
    std::vector<SequenceChunk> prefill = {
        {std::span(prompt.data(), prompt.size() - 1), 0, &blocks, 1}};
    std::vector<float> logits;
    EXPECT_TRUE(model->Forward(prefill, kv.get(), &logits).ok());

    Sampler sampler(SamplingConfig{}, prompt,
                    static_cast<int32_t>(weights->config().vocab_size));
    DraftInput in;
    in.tokens = prompt;
    in.blocks = &blocks;
    in.k = kK;
    in.sampler = &sampler;
    in.sequence_id = 1;
    std::vector<DraftOutput> outputs;
    ExpertLookahead lookahead;
    EXPECT_TRUE((*drafter)->Propose({&in, 1}, &outputs, &lookahead).ok());
    EXPECT_EQ(outputs.size(), 1u);
    if (tokens_out != nullptr && !outputs.empty()) {
      *tokens_out = outputs[0].tokens;
    }
    kv->Release(&blocks);
    return recording.acquired;
  }

  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<ResidentExperts> resident;
  std::unique_ptr<MoeModel> model;
  std::unique_ptr<KvCache> kv;
};

// Two draft experts in each of layers 0-2, one in layer 3, none in 4 and 5.
Ids SomeDraftExperts() {
  return {{0, 3}, {0, 17}, {1, 0}, {1, 9}, {2, 30}, {2, 31}, {3, 5}};
}

TEST(SelfDrafterTest, DraftsOnlyWithThePolicysDraftExperts) {
  Harness harness;
  const Ids draft = SomeDraftExperts();
  const Ids acquired = harness.Draft(/*ready=*/{}, draft);
  ASSERT_FALSE(acquired.empty());
  for (const auto& id : acquired) {
    EXPECT_TRUE(draft.count(id)) << id.first << "," << id.second;
  }
  // Layer 3's single draft expert takes every token routed there; layers 4
  // and 5 have none and are skipped.
  EXPECT_TRUE(acquired.count({3, 5}));
  for (const auto& id : acquired) EXPECT_LT(id.first, 4);
}

TEST(SelfDrafterTest, DraftExpertsMustAlsoBeReady) {
  Harness harness;
  Ids ready = SomeDraftExperts();
  ready.erase({0, 17});
  ready.erase({3, 5});
  ready.insert({4, 1});  // ready, but not a draft expert
  const Ids acquired = harness.Draft(ready, SomeDraftExperts());
  ASSERT_FALSE(acquired.empty());
  for (const auto& id : acquired) {
    EXPECT_TRUE(ready.count(id) && SomeDraftExperts().count(id))
        << id.first << "," << id.second;
  }
  EXPECT_TRUE(acquired.count({0, 3}));  // all of layer 0's tokens
}

// Under a policy that names every expert (the default; self_spec with
// draft_from=ready), every ready expert may be drafted with, so the draft
// reaches experts outside a pinned set.
TEST(SelfDrafterTest, EveryReadyExpertWhenThePolicyNamesAll) {
  Harness harness;
  std::vector<int32_t> restricted_tokens, full_tokens;
  const Ids restricted =
      harness.Draft({}, SomeDraftExperts(), &restricted_tokens);
  const Ids full = harness.Draft({}, {}, &full_tokens);
  EXPECT_GT(full.size(), restricted.size());
  bool outside = false;
  for (const auto& id : full) outside |= !SomeDraftExperts().count(id);
  EXPECT_TRUE(outside);
  EXPECT_EQ(full_tokens.size(), 3u);
  EXPECT_EQ(restricted_tokens.size(), 3u);
}

}  // namespace
}  // namespace moeserve::engine::spec_decode
