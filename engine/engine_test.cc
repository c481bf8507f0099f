// The engine end to end on the mixtral_tiny fixture: greedy output equals the
// PyTorch reference, concurrent requests equal the same requests run alone,
// seeds reproduce, stop/length/EOS finish reasons, cancellation, time limits,
// queue bounds and preemption under a tiny KV cache.
#include "engine/engine.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/synchronization/notification.h"
#include "base/mutex.h"
#include "engine/testing/model_writer.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine {
namespace {

std::string Runfile(const std::string& path) {
  return std::string(getenv("TEST_SRCDIR")) + "/moeserve/" + path;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int events = 0;
};

Outcome Drain(RequestStream* stream) {
  Outcome out;
  GenerationEvent e;
  while (stream->Pop(&e, absl::Seconds(60))) {
    ++out.events;
    out.tokens.insert(out.tokens.end(), e.tokens.begin(), e.tokens.end());
    out.text += e.text;
    if (e.finish != FinishReason::kNone) {
      out.finish = e.finish;
      out.error = e.error;
      break;
    }
  }
  return out;
}

// A scheduler that can be held inside a step: every expert is resident, and
// BeginStep waits while the gate is closed, as a forward pass on a very slow
// link would.
class Gate {
 public:
  void Close() {
    base::MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    base::MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  // Blocks while closed; notifies `entered_` the first time it is reached.
  void Pass() {
    if (!entered_.HasBeenNotified()) entered_.Notify();
    base::MutexLock lock(&mu_);
    cv_.Wait(&mu_,
             [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_; });
  }
  void WaitEntered() { entered_.WaitForNotification(); }

 private:
  base::Mutex mu_;
  base::CondVar cv_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  absl::Notification entered_;
};

class GatedExperts final : public ExpertProvider {
 public:
  GatedExperts(const ModelWeights* weights, Gate* gate)
      : weights_(weights), gate_(gate) {}
  void BeginStep(const StepInfo&) override { gate_->Pass(); }
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override {
    return weights_->expert(id).data;
  }
  void Release(ExpertId) override {}

 private:
  const ModelWeights* const weights_;
  Gate* const gate_;
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = Runfile("tests/golden/mixtral_tiny");
    weights_ = ModelWeights::Load(dir)->release();
    tokenizer_ = Tokenizer::LoadFromModelDir(dir)->release();
    backend_ = new kernels::cpu::CpuBackend({.num_threads = 2});
    std::ifstream in(dir + "/golden.json");
    std::stringstream text;
    text << in.rdbuf();
    golden_ = new nlohmann::json(nlohmann::json::parse(text.str()));
  }

  std::unique_ptr<Engine> MakeEngine(EngineOptions options = {}) {
    auto engine = Engine::Create(weights_, tokenizer_, backend_, options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return *std::move(engine);
  }

  // One running sequence, one waiting; the scheduler stops in BeginStep
  // while `gate` is closed.
  std::unique_ptr<Engine> MakeGatedEngine(Gate* gate) {
    EngineOptions options;
    options.max_num_seqs = 1;
    options.max_waiting = 1;
    auto engine =
        Engine::Create(weights_, tokenizer_, backend_, options,
                       std::make_unique<GatedExperts>(weights_, gate));
    EXPECT_TRUE(engine.ok()) << engine.status();
    return *std::move(engine);
  }

  static GenerationRequest Greedy(const nlohmann::json& c, uint32_t n = 32) {
    GenerationRequest r;
    r.prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    r.max_new_tokens = n;
    r.ignore_eos = true;  // the reference does not stop at EOS
    return r;
  }

  static inline ModelWeights* weights_;
  static inline Tokenizer* tokenizer_;
  static inline kernels::cpu::CpuBackend* backend_;
  static inline nlohmann::json* golden_;
};

TEST_F(EngineTest, GreedyMatchesReferenceAloneAndConcurrently) {
  auto engine = MakeEngine();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& c : golden_->at("cases")) {
    streams.push_back(*engine->Submit(Greedy(c)));
  }
  size_t i = 0;
  for (const auto& c : golden_->at("cases")) {
    Outcome out = Drain(streams[i++].get());
    EXPECT_EQ(out.finish, FinishReason::kLength);
    EXPECT_EQ(out.tokens, c.at("greedy_ids").get<std::vector<int32_t>>())
        << c.at("name");
    // Streamed text continues the prompt: prompt + text == full decode.
    const std::string full = c.at("full_text").get<std::string>();
    const std::string prompt = c.at("prompt").get<std::string>();
    ASSERT_EQ(full.substr(0, prompt.size()), prompt);
    EXPECT_EQ(out.text, full.substr(prompt.size())) << c.at("name");
    EXPECT_EQ(out.events, 32);  // one event per token
  }
}

TEST_F(EngineTest, TinyBudgetsAndPreemptionDoNotChangeGreedyOutput) {
  EngineOptions options;
  options.kv_block_size = 4;
  options.kv_cache_bytes = 1;      // -> 1 block; grown below to a few
  options.max_batched_tokens = 5;  // forces chunked prefill
  options.max_num_seqs = 3;
  // Enough blocks for ~1.5 sequences: running three forces preemption.
  const ModelConfig& c = weights_->config();
  options.kv_cache_bytes = 2 * 4 * c.num_key_value_heads * c.head_dim *
                           c.num_hidden_layers * sizeof(float) * 14;
  auto engine = MakeEngine(options);
  // In one step, so all three run and compete for blocks.
  std::vector<GenerationRequest> requests;
  for (const auto& g : golden_->at("cases")) requests.push_back(Greedy(g, 16));
  std::vector<std::shared_ptr<RequestStream>> streams =
      *engine->SubmitAll(std::move(requests));
  size_t i = 0;
  for (const auto& g : golden_->at("cases")) {
    Outcome out = Drain(streams[i++].get());
    std::vector<int32_t> want = g.at("greedy_ids").get<std::vector<int32_t>>();
    want.resize(16);
    EXPECT_EQ(out.tokens, want) << g.at("name") << " " << out.error;
  }
  EXPECT_GT(engine->stats().preemptions, 0u);
  EXPECT_EQ(engine->stats().kv_free_blocks, engine->stats().kv_total_blocks);
}

TEST_F(EngineTest, SeedReproducesSampling) {
  auto engine = MakeEngine();
  auto run = [&](uint64_t seed) {
    GenerationRequest r = Greedy(golden_->at("cases")[1], 24);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    return Drain(engine->Submit(r)->get()).tokens;
  };
  EXPECT_EQ(run(11), run(11));
  EXPECT_NE(run(11), run(12));
}

TEST_F(EngineTest, SeededSamplingDoesNotDependOnTheBatch) {
  auto engine = MakeEngine();
  GenerationRequest r = Greedy(golden_->at("cases")[2], 24);
  r.sampling.temperature = 0.8f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 77;
  const std::vector<int32_t> alone = Drain(engine->Submit(r)->get()).tokens;
  // The same request again, now batched with other sampled requests.
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest o = Greedy(golden_->at("cases")[i % 3], 30);
    o.sampling.temperature = 1.0f;
    o.sampling.seed = 1000 + i;
    others.push_back(*engine->Submit(o));
  }
  auto batched = *engine->Submit(r);
  EXPECT_EQ(Drain(batched.get()).tokens, alone);
  for (auto& o : others) Drain(o.get());
}

TEST_F(EngineTest, StopStringIsNotEmittedAndEndsTheStream) {
  auto engine = MakeEngine();
  const auto& c = golden_->at("cases")[1];
  const std::string full =
      c.at("full_text")
          .get<std::string>()
          .substr(c.at("prompt").get<std::string>().size());
  ASSERT_GT(full.size(), 12u);
  const std::string stop = full.substr(6, 4);
  GenerationRequest r = Greedy(c);
  r.stop = {stop};
  Outcome out = Drain(engine->Submit(r)->get());
  EXPECT_EQ(out.finish, FinishReason::kStopSequence);
  EXPECT_EQ(out.text, full.substr(0, full.find(stop)));
}

TEST_F(EngineTest, CancelAndTimeLimitFreeResources) {
  auto engine = MakeEngine();
  GenerationRequest r = Greedy(golden_->at("cases")[1], 10000);
  r.request_id = "to-abort";
  auto stream = *engine->Submit(r);
  GenerationEvent e;
  ASSERT_TRUE(stream->Pop(&e, absl::Seconds(30)));
  EXPECT_TRUE(engine->Abort("to-abort"));
  EXPECT_EQ(Drain(stream.get()).finish, FinishReason::kCancelled);
  EXPECT_FALSE(engine->Abort("to-abort"));

  GenerationRequest t = Greedy(golden_->at("cases")[1], 10000);
  t.deadline = absl::Now() + absl::Milliseconds(50);
  EXPECT_EQ(Drain(engine->Submit(t)->get()).finish, FinishReason::kTimeLimit);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(engine->stats().running, 0);
  EXPECT_EQ(engine->stats().kv_free_blocks, engine->stats().kv_total_blocks);
}

TEST_F(EngineTest, QueueBoundAndDuplicateIds) {
  EngineOptions options;
  options.max_waiting = 0;
  auto engine = MakeEngine(options);
  auto refused = engine->Submit(Greedy(golden_->at("cases")[0]));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);

  auto open = MakeEngine();
  GenerationRequest r = Greedy(golden_->at("cases")[0], 10000);
  r.request_id = "same";
  auto first = open->Submit(r);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(open->Submit(r).status().code(), absl::StatusCode::kAlreadyExists);
  (*first)->Cancel();
}

// A queued request that is aborted, cancelled or runs out of time leaves
// the queue at once, with its last event, while the scheduler is held in a
// step (a slow link): its slot serves the next request.
TEST_F(EngineTest, QueuedRequestsLeaveTheQueueAtOnce) {
  Gate gate;
  gate.Close();
  auto engine = MakeGatedEngine(&gate);
  auto running = *engine->Submit(Greedy(golden_->at("cases")[0], 10000));
  gate.WaitEntered();  // the scheduler holds `running`, inside a step
  GenerationRequest queued = Greedy(golden_->at("cases")[1]);
  queued.request_id = "queued";
  auto aborted = engine->Submit(queued);
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_EQ(engine->Submit(Greedy(golden_->at("cases")[2])).status().code(),
            absl::StatusCode::kResourceExhausted);  // the one slot is taken

  // Abort: the slot is free before Abort returns.
  EXPECT_TRUE(engine->Abort("queued"));
  auto cancelled = engine->Submit(Greedy(golden_->at("cases")[2]));
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  Outcome out = Drain(aborted->get());
  EXPECT_EQ(out.finish, FinishReason::kCancelled);
  EXPECT_TRUE(out.tokens.empty());
  EXPECT_FALSE(engine->Abort("queued"));  // its id is free again

  // The client went away (gRPC's OnCancel): the same, through DropIfQueued.
  (*cancelled)->Cancel();
  engine->DropIfQueued(cancelled->get());
  GenerationRequest timed = Greedy(golden_->at("cases")[2]);
  timed.deadline = absl::Now() + absl::Milliseconds(200);
  auto time_limited = engine->Submit(timed);
  ASSERT_TRUE(time_limited.ok()) << time_limited.status();
  EXPECT_EQ(Drain(cancelled->get()).finish, FinishReason::kCancelled);

  // A time limit or the client's deadline passes while queued.
  const absl::Time start = absl::Now();
  EXPECT_EQ(Drain(time_limited->get()).finish, FinishReason::kTimeLimit);
  GenerationRequest late = Greedy(golden_->at("cases")[2]);
  late.rpc_deadline = absl::Now() + absl::Milliseconds(200);
  auto deadline = engine->Submit(late);
  ASSERT_TRUE(deadline.ok()) << deadline.status();
  EXPECT_EQ(Drain(deadline->get()).finish, FinishReason::kDeadline);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(engine->stats().waiting, 0);
  EXPECT_EQ(engine->stats().running, 1);  // still inside its first step

  gate.Open();
  running->Cancel();
  EXPECT_EQ(Drain(running.get()).finish, FinishReason::kCancelled);
}

TEST_F(EngineTest, MinNewTokensSuppressesEos) {
  auto engine = MakeEngine();
  GenerationRequest r = Greedy(golden_->at("cases")[0], 40);
  r.ignore_eos = false;
  r.min_new_tokens = 40;
  Outcome out = Drain(engine->Submit(r)->get());
  EXPECT_EQ(out.tokens.size(), 40u);
  for (int32_t t : out.tokens) EXPECT_NE(t, tokenizer_->eos_id());
}

// generation_config.json's EOS ids end a request like the tokenizer's own
// (a chat model's end-of-turn token is often listed only there);
// ignore_eos and min_new_tokens mask them too.
TEST_F(EngineTest, StopsOnGenerationConfigEosIds) {
  const nlohmann::json& c = golden_->at("cases")[0];
  const auto greedy = c.at("greedy_ids").get<std::vector<int32_t>>();
  ASSERT_GE(greedy.size(), 4u);
  const int32_t extra_eos = greedy[2];
  ASSERT_NE(extra_eos, tokenizer_->eos_id());
  const std::string src = Runfile("tests/golden/mixtral_tiny");
  const std::string dir = testing::MakeTempDir();
  for (const char* name :
       {"config.json", "model.safetensors", "tokenizer.model"}) {
    ASSERT_EQ(symlink((src + "/" + name).c_str(), (dir + "/" + name).c_str()),
              0)
        << name;
  }
  std::ofstream(dir + "/generation_config.json")
      << nlohmann::json{{"eos_token_id", {2, extra_eos}}}.dump();
  auto weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto engine = Engine::Create(weights->get(), tokenizer_, backend_, {});
  ASSERT_TRUE(engine.ok()) << engine.status();

  GenerationRequest r = Greedy(c, 16);
  r.ignore_eos = false;
  Outcome out = Drain((*engine)->Submit(r)->get());
  EXPECT_EQ(out.finish, FinishReason::kEos);
  EXPECT_EQ(out.tokens,
            std::vector<int32_t>(greedy.begin(), greedy.begin() + 3));

  r.ignore_eos = true;
  out = Drain((*engine)->Submit(r)->get());
  EXPECT_EQ(out.finish, FinishReason::kLength);
  ASSERT_EQ(out.tokens.size(), 16u);
  EXPECT_NE(out.tokens[2], extra_eos);  // masked, not sampled

  r.ignore_eos = false;
  r.min_new_tokens = 4;
  out = Drain((*engine)->Submit(r)->get());
  ASSERT_GE(out.tokens.size(), 4u);
  EXPECT_NE(out.tokens[2], extra_eos);
}

}  // namespace
}  // namespace moeserve::engine
