// The scheduler's plan without a model: admission, chunked prefill under
// the token budget, KV growth and recompute preemption, the waiting queue's
// bounds and its early exits, and draft-length grants.
#include "engine/scheduler.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/output_processor.h"
#include "engine/request_state.h"
#include "engine/spec_decode/drafter.h"
#include "engine/speculation_governor.h"
#include "engine/testing/fake_tokenizer.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

constexpr int kVocab = 32;
constexpr int kBlockSize = 4;

ModelConfig SmallConfig() {
  ModelConfig c;
  c.num_hidden_layers = 1;
  c.num_key_value_heads = 1;
  c.head_dim = 2;
  c.vocab_size = kVocab;
  c.max_position_embeddings = 1024;
  return c;
}

// Forgets nothing it was not told; proposes nothing (the scheduler never
// calls Propose).
class RecordingDrafter final : public spec_decode::Drafter {
 public:
  std::string_view name() const override { return "recording"; }
  absl::Status Propose(std::span<const spec_decode::DraftInput>,
                       std::vector<spec_decode::DraftOutput>*,
                       ExpertLookahead*) override {
    return absl::UnimplementedError("not in scheduler tests");
  }
  void Forget(uint64_t id) override { forgotten.push_back(id); }
  std::vector<uint64_t> forgotten;
};

class SchedulerTest : public ::testing::Test {
 protected:
  // A scheduler over `kv_blocks` blocks of kBlockSize tokens; with
  // `fixed_k` > 0, a drafter and a governor granting that k.
  void Make(SchedulerOptions options, int64_t kv_blocks, int fixed_k = 0) {
    kv_ = *KvCache::Create(SmallConfig(), kv_blocks, kBlockSize);
    output_ = std::make_unique<OutputProcessor>(std::vector<int32_t>{2}, kVocab,
                                                1024);
    if (fixed_k > 0) {
      drafter_ = std::make_unique<RecordingDrafter>();
      governor_ = std::make_unique<SpeculationGovernor>(fixed_k, 8, 1024,
                                                        /*advisor=*/nullptr);
    }
    scheduler_ = std::make_unique<Scheduler>(options, kv_.get(), output_.get(),
                                             drafter_.get(), governor_.get());
  }

  std::shared_ptr<RequestStream> Add(
      int prompt_len, std::string id = "",
      absl::Time deadline = absl::InfiniteFuture()) {
    GenerationRequest r;
    r.prompt.assign(prompt_len, 5);
    r.max_new_tokens = 16;
    r.request_id = std::move(id);
    r.deadline = deadline;
    auto stream = scheduler_->Enqueue(
        NewRequestState(std::move(r), tokenizer_.get(), kVocab));
    EXPECT_TRUE(stream.ok()) << stream.status();
    return stream.ok() ? *stream : nullptr;
  }

  // What the model runner and output processor would do to a scheduled
  // request after its step: its chunk is in the KV cache, and a finished
  // prefill or a decode appends one token.
  static void RunStep(std::span<RequestState* const> plan) {
    for (RequestState* s : plan) {
      const bool done_prefill = !s->prefilling();
      s->computed += s->chunk;
      s->chunk = 0;
      if (done_prefill) {
        s->tokens.push_back(7);
        ++s->generated;
      }
    }
  }

  static FinishReason LastFinish(RequestStream* stream) {
    GenerationEvent event;
    while (stream->Pop(&event, absl::Seconds(10))) {
      if (event.finish != FinishReason::kNone) return event.finish;
    }
    return FinishReason::kNone;
  }

  std::unique_ptr<Tokenizer> tokenizer_ = testing::FakeTokenizer(kVocab);
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<OutputProcessor> output_;
  std::unique_ptr<RecordingDrafter> drafter_;
  std::unique_ptr<SpeculationGovernor> governor_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, AdmitsInArrivalOrderUpToMaxNumSeqs) {
  Make({.max_num_seqs = 2}, 64);
  Add(3);
  Add(5);
  Add(7);
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0]->chunk, 3);
  EXPECT_EQ(plan[1]->chunk, 5);
  EXPECT_LT(plan[0]->id, plan[1]->id);
  const SchedulerStats stats = scheduler_->stats();
  EXPECT_EQ(stats.running, 2);
  EXPECT_EQ(stats.waiting, 1);
}

TEST_F(SchedulerTest, ChunksPrefillUnderTheTokenBudgetDecodeFirst) {
  Make({.max_batched_tokens = 10}, 64);
  Add(8);
  Add(8);
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0]->chunk, 8);
  EXPECT_EQ(plan[1]->chunk, 2);  // what the budget left
  EXPECT_TRUE(plan[1]->prefilling());
  RunStep(plan);
  // Next step: the first decodes one token, the second's prefill goes on.
  plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0]->chunk, 1);
  EXPECT_TRUE(plan[0]->decoding());
  EXPECT_EQ(plan[1]->chunk, 6);
}

TEST_F(SchedulerTest, PreemptsTheNewestRequestWhenKvBlocksRunOut) {
  Make({}, /*kv_blocks=*/4);  // 16 tokens
  Add(8);
  Add(8);
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 2u);  // 2 blocks each
  EXPECT_EQ(kv_->free_blocks(), 0);
  RunStep(plan);
  // Each now needs a third block for its 9th token: the newest goes back
  // to the front of the queue, blocks freed, to be recomputed.
  plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0]->id, 1u);
  scheduler_->EndStep();  // the gauges follow at the end of the step
  const SchedulerStats stats = scheduler_->stats();
  EXPECT_EQ(stats.preemptions, 1u);
  EXPECT_EQ(stats.running, 1);
  EXPECT_EQ(stats.waiting, 1);
}

TEST_F(SchedulerTest, RefusesARequestThatCannotFitAlone) {
  Make({}, /*kv_blocks=*/2);  // 8 tokens
  std::shared_ptr<RequestStream> stream = Add(12);
  EXPECT_TRUE(scheduler_->Schedule().empty());
  GenerationEvent event;
  ASSERT_TRUE(stream->Pop(&event, absl::Seconds(10)));
  EXPECT_EQ(event.finish, FinishReason::kError);
  EXPECT_NE(event.error.find("does not fit in the KV cache"), std::string::npos)
      << event.error;
  EXPECT_EQ(kv_->free_blocks(), 2);
}

TEST_F(SchedulerTest, BoundsTheQueueAndRefusesADuplicateId) {
  Make({.max_waiting = 2}, 64);
  Add(1, "a");
  GenerationRequest dup;
  dup.prompt = {5};
  dup.request_id = "a";
  auto again = scheduler_->Enqueue(
      NewRequestState(std::move(dup), tokenizer_.get(), kVocab));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  Add(1, "b");
  GenerationRequest third;
  third.prompt = {5};
  auto full = scheduler_->Enqueue(
      NewRequestState(std::move(third), tokenizer_.get(), kVocab));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("--max_waiting=2"), std::string::npos);
}

// Issue 29: one client with many requests took every engine slot while
// another's request waited past its deadline. With a per-caller share, a
// caller at it waits and others' requests are admitted past it.
TEST_F(SchedulerTest, ACallerOverItsRunningShareWaitsWhileOthersRun) {
  Make({.max_num_seqs = 4, .max_running_per_caller = 2}, 64);
  auto enqueue = [&](const std::string& caller) {
    GenerationRequest r;
    r.prompt = {5, 5};
    r.max_new_tokens = 16;
    r.caller = caller;
    auto stream = scheduler_->Enqueue(
        NewRequestState(std::move(r), tokenizer_.get(), kVocab));
    EXPECT_TRUE(stream.ok()) << stream.status();
  };
  for (int i = 0; i < 5; ++i) enqueue("greedy");
  enqueue("polite");
  enqueue("");  // no caller (warm-up): not limited
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 4u);
  int greedy = 0, polite = 0, anonymous = 0;
  for (RequestState* s : plan) {
    greedy += s->request.caller == "greedy";
    polite += s->request.caller == "polite";
    anonymous += s->request.caller.empty();
  }
  EXPECT_EQ(greedy, 2);
  EXPECT_EQ(polite, 1);
  EXPECT_EQ(anonymous, 1);
  EXPECT_EQ(scheduler_->stats().waiting, 3);  // greedy's other three
}

TEST_F(SchedulerTest, ACallerOverItsWaitingShareIsRefusedNamingTheFlag) {
  Make({.max_waiting_per_caller = 2}, 64);
  auto enqueue = [&](const std::string& caller) {
    GenerationRequest r;
    r.prompt = {5};
    r.caller = caller;
    return scheduler_
        ->Enqueue(NewRequestState(std::move(r), tokenizer_.get(), kVocab))
        .status();
  };
  EXPECT_TRUE(enqueue("a").ok());
  EXPECT_TRUE(enqueue("a").ok());
  const absl::Status third = enqueue("a");
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("--max_waiting_per_caller=2"),
            std::string::npos)
      << third;
  EXPECT_TRUE(enqueue("b").ok());  // another caller still gets in
  EXPECT_TRUE(enqueue("").ok());
  // Off by default.
  Make({}, 64);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(enqueue("a").ok());
}

TEST_F(SchedulerTest, EnqueueAllQueuesEveryRequestOrNone) {
  Make({.max_waiting = 3}, 64);
  Add(1, "a");
  auto batch = [&](std::vector<std::string> ids) {
    std::vector<std::unique_ptr<RequestState>> states;
    for (std::string& id : ids) {
      GenerationRequest r;
      r.prompt = {5, 5};
      r.request_id = std::move(id);
      states.push_back(NewRequestState(std::move(r), tokenizer_.get(), kVocab));
    }
    return scheduler_->EnqueueAll(std::move(states));
  };
  // A duplicate inside the batch, one already in flight, one too many for
  // the queue: each refuses the whole batch and queues nothing.
  EXPECT_EQ(batch({"b", "b"}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(batch({"b", "a"}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(batch({"b", "c", "d"}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(scheduler_->stats().waiting, 1);
  auto streams = batch({"b", "c"});
  ASSERT_TRUE(streams.ok()) << streams.status();
  ASSERT_EQ(streams->size(), 2u);
  // The refused batches took no id: "b" and "c" are free until now.
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 3u);  // admitted together, in order
  EXPECT_EQ(plan[1]->request.request_id, "b");
  EXPECT_EQ(plan[2]->request.request_id, "c");
  EXPECT_EQ(plan[1]->stream, (*streams)[0]);
}

TEST_F(SchedulerTest, AQueuedRequestLeavesAtOnceWhenAborted) {
  Make({}, 64);
  scheduler_->Start();
  std::shared_ptr<RequestStream> stream = Add(3, "x");
  EXPECT_TRUE(scheduler_->Abort("x"));
  EXPECT_EQ(scheduler_->stats().waiting, 0);  // before Abort returned
  EXPECT_EQ(LastFinish(stream.get()), FinishReason::kCancelled);
  EXPECT_FALSE(scheduler_->Abort("x"));  // the id is free again
}

TEST_F(SchedulerTest, AQueuedRequestOutOfTimeEndsBeforeItRuns) {
  Make({}, 64);
  std::shared_ptr<RequestStream> stream =
      Add(3, "", absl::Now() - absl::Seconds(1));
  EXPECT_TRUE(scheduler_->Schedule().empty());
  EXPECT_EQ(LastFinish(stream.get()), FinishReason::kTimeLimit);
  EXPECT_EQ(kv_->free_blocks(), 64);
}

TEST_F(SchedulerTest, FinishFreesTheBlocksAndTheId) {
  Make({}, 64);
  Add(6, "r");
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_LT(kv_->free_blocks(), 64);
  scheduler_->Finish(plan[0], FinishReason::kLength, {});
  scheduler_->EndStep();
  EXPECT_EQ(kv_->free_blocks(), 64);
  EXPECT_EQ(scheduler_->stats().running, 0);
  Add(6, "r");  // reusable at once
}

TEST_F(SchedulerTest, GrantsDraftTokensToDecodingRequestsFromTheLeftover) {
  Make({.max_batched_tokens = 12}, 64, /*fixed_k=*/4);
  Add(5);
  Add(5);
  RunStep(scheduler_->Schedule());  // both prefilled, one token each
  Add(5);
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 3u);
  // Budget 12: decodes 1 + 1, the new prefill 5, leaving 5 for drafts.
  EXPECT_EQ(plan[0]->spec_k, 4);
  EXPECT_EQ(plan[1]->spec_k, 1);
  EXPECT_EQ(plan[2]->spec_k, 0);  // prefilling
  // The drafts' KV blocks are grown with the grant.
  EXPECT_GE(static_cast<int64_t>(plan[0]->blocks.size()) * kBlockSize,
            plan[0]->computed + 1 + 4);
}

TEST_F(SchedulerTest, FinishTellsTheDrafterToForget) {
  Make({}, 64, /*fixed_k=*/2);
  Add(3);
  std::span<RequestState* const> plan = scheduler_->Schedule();
  ASSERT_EQ(plan.size(), 1u);
  const uint64_t id = plan[0]->id;
  scheduler_->Finish(plan[0], FinishReason::kEos, {});
  EXPECT_EQ(drafter_->forgotten, std::vector<uint64_t>{id});
}

}  // namespace
}  // namespace moeserve::engine
