#include "engine/speculation_governor.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

// Records the last query and answers a fixed k.
class RecordingAdvisor final : public SpeculationAdvisor {
 public:
  void OnLookahead(const ExpertLookahead& lookahead) override {
    (void)lookahead;
  }
  int ChooseDraftLength(const DraftLengthQuery& query) override {
    ++asked;
    last = query;
    last.acceptance = {};  // the governor's span; not kept past the call
    return k;
  }
  double link_seconds_per_transfer() const override { return 0.004; }

  int k = 3;
  int asked = 0;
  DraftLengthQuery last;
};

// One request decoding its second token: 5 tokens, 4 in the KV cache.
RequestState Decoding() {
  RequestState state;
  state.request.max_new_tokens = 16;
  state.tokens = {1, 2, 3, 4, 5};
  state.computed = 4;
  state.chunk = 1;
  state.generated = 1;
  return state;
}

TEST(SpeculationGovernorTest, TellsThePolicyEveryMeasuredTiming) {
  RecordingAdvisor advisor;
  SpeculationGovernor governor(/*fixed_k=*/0, /*max_k=*/8,
                               /*max_position=*/1024, &advisor);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> one = {1};
  const SequenceChunk prefill{prompt, 0, nullptr, 1};
  const SequenceChunk decode{one, 3, nullptr, 1};
  const SequenceChunk verify{prompt, 3, nullptr, 3};  // 2 drafts
  governor.RecordForwardTime(std::vector{prefill}, 0.050);
  governor.RecordForwardTime(std::vector{decode}, 0.010);
  governor.RecordForwardTime(std::vector{verify}, 0.014);
  // A prefill beside a decode row: the prefill EMA (0.05 + 0.1 x 0.02),
  // not the decode one.
  governor.RecordForwardTime(std::vector{prefill, decode}, 0.070);
  governor.RecordDraftTime(0.006, 3);
  RequestState state = Decoding();
  RequestState* scheduled[] = {&state};
  governor.BeginStep(scheduled);
  ASSERT_EQ(advisor.asked, 1);
  const DraftLengthQuery& q = advisor.last;
  EXPECT_EQ(q.max_k, 8);
  EXPECT_EQ(q.num_seqs, 1);
  EXPECT_DOUBLE_EQ(q.mean_context_tokens, 5);
  EXPECT_DOUBLE_EQ(q.prefill_seconds, 0.052);
  EXPECT_DOUBLE_EQ(q.verify_seconds_base, 0.010);
  EXPECT_DOUBLE_EQ(q.verify_seconds_per_draft, 0.002);
  EXPECT_DOUBLE_EQ(q.draft_seconds_per_position, 0.002);
  EXPECT_DOUBLE_EQ(q.link_seconds_per_expert, 0.004);
  EXPECT_EQ(governor.WantedDraftLength(&state), 3);
}

// Decode and verify figures are compute time: the seconds a pass waited on
// the link are taken out (the policy adds link time itself); the prefill
// figure keeps them (TTFT is wall time).
TEST(SpeculationGovernorTest, StallsLeaveTheComputeFigures) {
  RecordingAdvisor advisor;
  SpeculationGovernor governor(0, 8, 1024, &advisor);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> one = {1};
  const SequenceChunk prefill{prompt, 0, nullptr, 1};
  const SequenceChunk decode{one, 3, nullptr, 1};
  const SequenceChunk verify{prompt, 3, nullptr, 3};  // 2 drafts
  governor.RecordForwardTime(std::vector{prefill}, 0.050, 0.020);
  governor.RecordForwardTime(std::vector{decode}, 0.016, 0.006);
  governor.RecordForwardTime(std::vector{verify}, 0.030, 0.016);
  governor.RecordDraftTime(0.006, 3);
  RequestState state = Decoding();
  RequestState* scheduled[] = {&state};
  governor.BeginStep(scheduled);
  const DraftLengthQuery& q = advisor.last;
  EXPECT_DOUBLE_EQ(q.prefill_seconds, 0.050);
  EXPECT_DOUBLE_EQ(q.verify_seconds_base, 0.010);
  EXPECT_DOUBLE_EQ(q.verify_seconds_per_draft, 0.002);
}

TEST(SpeculationGovernorTest, PolicyDecliningLeavesKToTheRequestsAcceptance) {
  RecordingAdvisor advisor;
  advisor.k = -1;
  SpeculationGovernor governor(0, 8, 1024, &advisor);
  RequestState state = Decoding();
  state.acceptance = 0.8;  // 0.8^4 = .41 >= .35 > 0.8^5
  RequestState* scheduled[] = {&state};
  governor.BeginStep(scheduled);
  EXPECT_EQ(advisor.asked, 1);
  EXPECT_EQ(governor.WantedDraftLength(&state), 4);
  // A prefilling request is not asked about.
  state.chunk = 0;
  governor.BeginStep(scheduled);
  EXPECT_EQ(advisor.asked, 1);
}

}  // namespace
}  // namespace moeserve::engine
