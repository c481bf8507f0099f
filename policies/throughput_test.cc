#include "policies/throughput.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/internal/fake_residency_control.h"

namespace moeserve::policies {
namespace {

using engine::DraftLengthQuery;
using engine::ExpertId;
using engine::StepInfo;
using testing::CreatePolicyOrFail;
using ::testing::ElementsAre;
using testing::FakeResidencyControl;
using ::testing::HasSubstr;
using testing::Id;
using ::testing::IsEmpty;
using testing::Prefix;
using testing::ToPairs;
using testing::Window;

using Batch = std::pair<std::vector<Id>, int>;  // (ids, priority)

ThroughputPolicy* AsThroughput(engine::OffloadPolicy* p) {
  return static_cast<ThroughputPolicy*>(p);
}

// A measured query: acceptance `p` at every position.
struct QueryBuilder {
  std::vector<double> acceptance = std::vector<double>(8, 0.8);
  DraftLengthQuery q;
  QueryBuilder() {
    q.max_k = 8;
    q.num_seqs = 1;
    q.mean_context_tokens = 100;
    q.max_context_tokens = 100;
    q.draft_seconds_per_position = 1e-3;
    q.verify_seconds_base = 4e-3;
    q.verify_seconds_per_draft = 1e-4;
    q.link_seconds_per_expert = 1e-2;
  }
  DraftLengthQuery Get() {
    q.acceptance = acceptance;
    return q;
  }
};

// A fresh policy attached to a fake with 4 layers x 8 experts, top-2 and
// `slots` slots; k for `q`.
int ChooseK(const DraftLengthQuery& q, int slots = 8,
            const engine::PolicyConfig& config = {}) {
  FakeResidencyControl fake(/*layers=*/4, /*experts=*/8, /*k=*/2, slots);
  auto owned = CreatePolicyOrFail<ThroughputPolicy>(config);
  fake.set_policy(owned.get());
  return owned->ChooseDraftLength(q);
}

TEST(ThroughputTest, DefaultsAndSpeculationSettings) {
  auto policy = CreatePolicyOrFail<ThroughputPolicy>();
  EXPECT_EQ(policy->name(), "throughput");
  const engine::SpeculationDefaults defaults =
      engine::PolicySpeculation("throughput", {}).value();
  EXPECT_EQ(defaults.drafter, "external");
  EXPECT_EQ(defaults.num_speculative_tokens, 0);  // adaptive
  const auto& o = AsThroughput(policy.get())->options();
  EXPECT_EQ(o.num_speculative_tokens, 4);
  EXPECT_EQ(o.max_speculative_tokens, 8);
  EXPECT_DOUBLE_EQ(o.stream_all_coverage, 0.9);
  EXPECT_EQ(o.prefetch_priority, 1);
  auto registered = engine::CreatePolicy(
      "throughput", engine::PolicyTestConfig("throughput"));
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(engine::PolicySpeculation("throughput",
                                      engine::PolicyTestConfig("throughput"))
                .value()
                .drafter,
            "int4");
  const engine::PolicyConfig set_config = {{"num_speculative_tokens", "1"},
                                           {"max_speculative_tokens", "3"},
                                           {"stream_all_coverage", "0.5"},
                                           {"prefetch_priority", "-2"},
                                           {"drafter", "self"}};
  auto set = CreatePolicyOrFail<ThroughputPolicy>(set_config);
  const auto& s = AsThroughput(set.get())->options();
  EXPECT_EQ(s.num_speculative_tokens, 1);
  EXPECT_EQ(s.max_speculative_tokens, 3);
  EXPECT_DOUBLE_EQ(s.stream_all_coverage, 0.5);
  EXPECT_EQ(s.prefetch_priority, -2);
  EXPECT_EQ(engine::PolicySpeculation("throughput", set_config).value().drafter,
            "self");
  // SpecMoEOff's CPU attention is the host_attention key's (off by default).
  EXPECT_FALSE(defaults.host_attention);
  EXPECT_TRUE(engine::PolicySpeculation("throughput", {{"host_attention", "1"}})
                  .value()
                  .host_attention);
  EXPECT_TRUE(CreatePolicyOrFail<ThroughputPolicy>({{"host_attention", "1"}}));
}

TEST(ThroughputTest, ConfigErrorsNameTheKey) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"num_speculative_tokens", "-1"},
           {"num_speculative_tokens", "9"},  // > max_speculative_tokens
           {"max_speculative_tokens", "17"},
           {"max_speculative_tokens", "x"},
           {"stream_all_coverage", "1.5"},
           {"stream_all_coverage", "nan"},
           {"prefetch_priority", "2000"},
           {"drafter", ""},
           {"host_attention", "2"},
           {"host_attention", "on"},
           {"no_such_key", "1"}}) {
    auto policy = engine::CreatePolicy("throughput", {{key, value}});
    ASSERT_FALSE(policy.ok()) << key << "=" << value;
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(policy.status().message(), HasSubstr(key));
  }
}

TEST(ThroughputTest, UnmeasuredUsesNumSpeculativeTokensClamped) {
  DraftLengthQuery q;
  q.max_k = 8;
  q.num_seqs = 4;
  EXPECT_EQ(ChooseK(q), 4);
  q.max_k = 2;
  EXPECT_EQ(ChooseK(q), 2);
  q.max_k = 8;
  EXPECT_EQ(ChooseK(q, 8, {{"num_speculative_tokens", "3"}}), 3);
  // Timings but no acceptance yet: still unmeasured.
  QueryBuilder b;
  b.acceptance.clear();
  EXPECT_EQ(ChooseK(b.Get()), 4);
}

// The link dominates: a batch of one touches new experts with every draft
// token, a batch of 32 already touches every expert, so its drafts cost
// only their compute.
TEST(ThroughputTest, KGrowsWithBatchWhenLinkBound) {
  QueryBuilder b;
  b.acceptance.assign(8, 0.6);
  std::vector<int> ks;
  for (int n : {1, 2, 8}) {
    b.q.num_seqs = n;
    ks.push_back(ChooseK(b.Get()));
  }
  EXPECT_EQ(ks[0], 0);  // every draft token pays ~1.5 expert loads a layer
  EXPECT_GT(ks[1], ks[0]);
  EXPECT_GE(ks[2], ks[1]);
  EXPECT_EQ(ks[2], 8);
  // Past saturation the drafts' compute (n * k * vd) starts to count.
  b.q.num_seqs = 32;
  EXPECT_GE(ChooseK(b.Get()), 6);
  // The model behind it: at 32 sequences the link time hardly moves with k.
  FakeResidencyControl fake(4, 8, 2, 8);
  auto owned = CreatePolicyOrFail<ThroughputPolicy>();
  auto* policy = AsThroughput(owned.get());
  fake.set_policy(policy);
  b.q.num_seqs = 32;
  const auto e0 = policy->Estimate(b.Get(), 0);
  const auto e6 = policy->Estimate(b.Get(), 6);
  EXPECT_NEAR(e6.link_per_layer, e0.link_per_layer, 1e-3 * e0.link_per_layer);
  // 8 experts * 10 ms per layer: 8 slots are one layer's, the stream's
  // headroom, so nothing stays resident (ResidentShare 0).
  EXPECT_NEAR(e0.link_per_layer, 8 * 1e-2, 1e-4);
  b.q.num_seqs = 1;
  const auto s0 = policy->Estimate(b.Get(), 0);
  const auto s1 = policy->Estimate(b.Get(), 1);
  // One token: 2 experts; two tokens: 8 (1 - 0.75^2) = 3.5.
  EXPECT_NEAR(s0.link_per_layer, 2 * 1e-2, 1e-9);
  EXPECT_NEAR(s1.link_per_layer, 3.5 * 1e-2, 1e-9);
}

// Without a link cost (every expert resident), a bigger batch makes each
// draft token's verification dearer (n * k * vd) and k does not grow.
TEST(ThroughputTest, ResidentShare) {
  EXPECT_DOUBLE_EQ(ResidentShare(4, 8, 32), 1.0);  // everything fits
  EXPECT_DOUBLE_EQ(ResidentShare(4, 8, 64), 1.0);
  EXPECT_DOUBLE_EQ(ResidentShare(4, 8, 16), 0.25);  // (16 - 8) / 32
  EXPECT_DOUBLE_EQ(ResidentShare(4, 8, 4), 0.0);
  EXPECT_DOUBLE_EQ(ResidentShare(0, 8, 4), 1.0);
}

TEST(ThroughputTest, ComputeBoundKDoesNotGrowWithBatch) {
  QueryBuilder b;
  b.q.verify_seconds_per_draft = 1e-3;
  b.q.num_seqs = 1;
  const int k1 = ChooseK(b.Get(), /*slots=*/32);  // all 32 experts fit
  b.q.num_seqs = 32;
  const int k32 = ChooseK(b.Get(), /*slots=*/32);
  EXPECT_LE(k32, k1);
  EXPECT_LT(k32, 8);
}

TEST(ThroughputTest, KShrinksWhenAcceptanceIsLow) {
  QueryBuilder b;
  b.q.num_seqs = 32;
  b.acceptance.assign(8, 0.95);
  const int high = ChooseK(b.Get());
  b.acceptance.assign(8, 0.5);
  const int mid = ChooseK(b.Get());
  b.acceptance.assign(8, 0.0);
  const int low = ChooseK(b.Get());
  EXPECT_GT(high, mid);
  EXPECT_GT(mid, low);
  EXPECT_EQ(low, 0);
  // Position-wise: acceptance that drops after two positions caps k there.
  b.acceptance = {0.95, 0.95, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01};
  EXPECT_EQ(ChooseK(b.Get()), 2);
}

TEST(ThroughputTest, ProbesAfterARunOfZeros) {
  FakeResidencyControl fake(4, 8, 2, 8);
  auto owned = CreatePolicyOrFail<ThroughputPolicy>();
  fake.set_policy(owned.get());
  QueryBuilder b;
  b.acceptance.assign(8, 0.0);
  std::vector<int> ks;
  for (int i = 0; i < ThroughputPolicy::kProbeInterval; ++i) {
    ks.push_back(owned->ChooseDraftLength(b.Get()));
  }
  EXPECT_EQ(ks.back(), 1);
  ks.pop_back();
  for (int k : ks) EXPECT_EQ(k, 0);
  EXPECT_EQ(owned->ChooseDraftLength(b.Get()), 0);
}

// The verify cost per draft token grows with the prefix (attention): the
// fitted slope moves the measurement to a longer context, and k falls.
TEST(ThroughputTest, LongContextShiftsK) {
  FakeResidencyControl fake(4, 8, 2, /*slots=*/32);  // compute-bound
  auto owned = CreatePolicyOrFail<ThroughputPolicy>();
  auto* policy = AsThroughput(owned.get());
  fake.set_policy(policy);
  QueryBuilder b;
  b.q.num_seqs = 8;
  b.q.draft_seconds_per_position = 5e-4;
  b.acceptance.assign(8, 0.7);
  // Contexts 50..200, per-draft cost 20 us + 0.1 us per context token.
  for (int s = 50; s <= 200; s += 25) {
    b.q.mean_context_tokens = s;
    b.q.max_context_tokens = s;
    b.q.verify_seconds_per_draft = 2e-5 + 1e-7 * s;
    policy->ChooseDraftLength(b.Get());
  }
  EXPECT_NEAR(policy->per_draft_slope(), 1e-7, 1e-10);
  EXPECT_DOUBLE_EQ(policy->base_slope(), 0);
  EXPECT_DOUBLE_EQ(policy->draft_slope(), 0);
  const int short_k = policy->ChooseDraftLength(b.Get());  // context 200
  const double short_c = policy->Estimate(b.Get(), 4).compute_per_layer;
  EXPECT_NEAR(short_c, (4e-3 + 8 * 4 * 4e-5) / 4, 1e-12);
  b.q.mean_context_tokens = 2000;  // same EMAs, a long prefix
  b.q.max_context_tokens = 2000;
  const int long_k = policy->ChooseDraftLength(b.Get());
  EXPECT_EQ(short_k, 3);
  EXPECT_EQ(long_k, 1);
  // 40 us + 1800 x 0.1 us per draft token.
  EXPECT_NEAR(policy->Estimate(b.Get(), 4).compute_per_layer,
              (4e-3 + 8 * 4 * 2.2e-4) / 4, 1e-12);
  // Without spread in the contexts there is no slope: the same query at a
  // long context gives the short context's k.
  auto flat_owned = CreatePolicyOrFail<ThroughputPolicy>();
  auto* flat = AsThroughput(flat_owned.get());
  FakeResidencyControl fake2(4, 8, 2, 32);
  fake2.set_policy(flat);
  b.q.mean_context_tokens = 200;
  const int k200 = flat->ChooseDraftLength(b.Get());
  EXPECT_EQ(k200, short_k);
  b.q.mean_context_tokens = 2000;
  EXPECT_EQ(flat->ChooseDraftLength(b.Get()), k200);
  EXPECT_DOUBLE_EQ(flat->per_draft_slope(), 0);
}

// A large batch touches every expert: layer 0 streams at the step's start,
// layer l + 1 while layer l computes, each as one batch.
TEST(ThroughputTest, LargeBatchStreamsWholeNextLayer) {
  FakeResidencyControl fake(/*layers=*/3, /*experts=*/4, /*k=*/2,
                            /*slots=*/12);
  auto owned =
      CreatePolicyOrFail<ThroughputPolicy>({{"prefetch_priority", "3"}});
  auto* policy = AsThroughput(owned.get());
  fake.set_policy(policy);
  policy->OnStepBegin(StepInfo{.num_tokens = 16});  // coverage 1 - 0.5^16
  EXPECT_TRUE(policy->streaming_all());
  EXPECT_THAT(fake.prefetch_batches,
              ElementsAre(Batch{{Id{0, 0}, Id{0, 1}, Id{0, 2}, Id{0, 3}}, 3}));
  fake.prefetch_batches.clear();
  const float hidden[4] = {};
  fake.RunLayer(0, {0, 2}, hidden, 1);
  EXPECT_THAT(fake.prefetch_batches,
              ElementsAre(Batch{{Id{1, 0}, Id{1, 1}, Id{1, 2}, Id{1, 3}}, 3}));
  EXPECT_THAT(fake.predict_calls, IsEmpty());  // no prediction needed
  fake.prefetch_batches.clear();
  fake.RunLayer(1, {1, 3}, hidden, 1);
  EXPECT_EQ(fake.prefetch_batches.size(), 1u);
  fake.prefetch_batches.clear();
  fake.RunLayer(2, {0}, hidden, 1);  // last layer: nothing after it
  EXPECT_THAT(fake.prefetch_batches, IsEmpty());
  EXPECT_EQ(fake.misses(), 0);  // every routed expert was streamed in time
  fake.EndStep();
}

// A small batch streams only what the next layer's router predicts and
// what the drafter's lookahead names for it.
TEST(ThroughputTest, SmallBatchStreamsPredictedAndLookahead) {
  FakeResidencyControl fake(/*layers=*/3, /*experts=*/8, /*k=*/2,
                            /*slots=*/12);
  auto owned = CreatePolicyOrFail<ThroughputPolicy>();
  auto* policy = AsThroughput(owned.get());
  fake.set_policy(policy);
  const Window window = {{{5}, {6}, {}}, {{5}, {7, 6}, {1}}};
  fake.Lookahead(Prefix(window, 1));  // incomplete: ignored
  fake.Lookahead(Prefix(window, 2));
  policy->OnStepBegin(StepInfo{.num_tokens = 3});
  EXPECT_FALSE(policy->streaming_all());
  EXPECT_THAT(fake.prefetch_batches, ElementsAre(Batch{{Id{0, 5}}, 1}));
  fake.prefetch_batches.clear();
  fake.set_prediction(1, {2, 6});
  const float hidden[4] = {};
  fake.RunLayer(0, {5}, hidden, 3);
  ASSERT_EQ(fake.predict_calls.size(), 1u);
  EXPECT_EQ(fake.predict_calls[0].layer, 1);
  EXPECT_EQ(fake.predict_calls[0].k, 2);
  EXPECT_EQ(fake.predict_calls[0].n, 3);
  EXPECT_THAT(fake.prefetch_batches,
              ElementsAre(Batch{{Id{1, 2}, Id{1, 6}, Id{1, 7}}, 1}));
  fake.EndStep();
  // The window is spent: the next step streams nothing for layer 0.
  fake.prefetch_batches.clear();
  policy->OnStepBegin(StepInfo{.num_tokens = 3});
  EXPECT_THAT(fake.prefetch_batches, IsEmpty());
}

// A layer that does not fit beside the layer being computed is not
// streamed (its prefetch would displace experts in use).
TEST(ThroughputTest, NoStreamWhenTheLayerDoesNotFit) {
  FakeResidencyControl fake(/*layers=*/2, /*experts=*/4, /*k=*/2,
                            /*slots=*/5);
  auto owned = CreatePolicyOrFail<ThroughputPolicy>();
  auto* policy = AsThroughput(owned.get());
  fake.set_policy(policy);
  policy->OnStepBegin(StepInfo{.num_tokens = 64});
  EXPECT_EQ(fake.prefetch_batches.size(), 1u);  // layer 0: 4 <= 5
  fake.prefetch_batches.clear();
  const float hidden[4] = {};
  fake.RunLayer(0, {0, 1}, hidden, 1);  // 4 > 5 - 2
  EXPECT_THAT(fake.prefetch_batches, IsEmpty());
}

// Eviction follows the layer sweep: after layer c routes, layer c (needed
// next step) goes first, then c - 1, ...; layer c + 1 last.
TEST(ThroughputTest, EvictsFarthestInTheLayerSweep) {
  FakeResidencyControl fake(/*layers=*/4, /*experts=*/4, /*k=*/1,
                            /*slots=*/16);
  auto owned = CreatePolicyOrFail<ThroughputPolicy>();
  auto* policy = AsThroughput(owned.get());
  fake.set_policy(policy);
  const std::vector<ExpertId> candidates = {
      {0, 1}, {1, 1}, {2, 1}, {3, 1}, {2, 0}};
  // Before any route: the highest layer is used last.
  policy->OnStepBegin(StepInfo{.num_tokens = 1});
  std::vector<ExpertId> victims;
  policy->ChooseVictims(candidates, 5, &victims);
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{3, 1}, Id{2, 0}, Id{2, 1}, Id{1, 1}, Id{0, 1}));
  // After layer 1 routed: 1 (next step), 0, 3, 2. Within layer 2 the less
  // recently used first.
  fake.RunLayer(1, {3});
  policy->OnAccess({2, 1});
  policy->OnAccess({2, 0});
  victims.clear();
  policy->ChooseVictims(candidates, 5, &victims);
  EXPECT_THAT(ToPairs(victims),
              ElementsAre(Id{1, 1}, Id{0, 1}, Id{3, 1}, Id{2, 1}, Id{2, 0}));
  victims.clear();
  policy->ChooseVictims(candidates, 2, &victims);
  EXPECT_EQ(victims.size(), 2u);
}

// Streaming with a tier of two layers: the sweep order keeps the next
// layers; plain LRU would evict them (the loop pathology).
TEST(ThroughputTest, SweepEvictionBeatsTheLoopPathology) {
  FakeResidencyControl fake(/*layers=*/3, /*experts=*/2, /*k=*/2,
                            /*slots=*/4);
  auto owned = CreatePolicyOrFail<ThroughputPolicy>();
  auto* policy = AsThroughput(owned.get());
  fake.set_policy(policy);
  const float hidden[4] = {};
  for (int step = 0; step < 4; ++step) {
    policy->OnStepBegin(StepInfo{.step = step, .num_tokens = 8});
    for (int l = 0; l < 3; ++l) fake.RunLayer(l, {0, 1}, hidden, 8);
    fake.EndStep();
  }
  // Every layer was streamed before its route: no demand miss at all.
  EXPECT_EQ(fake.misses(), 0);
  // Step 0 loads all three layers; from then on each step reloads layers 0
  // and 2 and keeps layer 1 (LRU would evict layer 1 at the step's start,
  // the oldest, and reload all three: 24).
  EXPECT_EQ(fake.stats().prefetch_loads, 6u + 3 * 4u);
}

}  // namespace
}  // namespace moeserve::policies
