// End to end, the real moeserve binary under what a hostile client or a
// careless operator does (issue 16): streams held open without a word,
// more Generate calls than --max_open_streams, SIGTERM while the model load
// is stuck on a read, and a health Watch left open during the drain. Each
// must stay bounded: threads, open calls, the time to exit.
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "proto/moeserve.grpc.pb.h"
#include "tests/server_process.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;
using testing::HealthCheck;

constexpr char kBinary[] = "server/moeserve";

// A server without a model (nothing to load), on free ports.
class NoModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::ServerProcess::Start(
        kBinary, {"--model_dir=/nonexistent/model",
                  "--exit_on_load_failure=false", "--drain_seconds=5"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Inference::NewStub(server_->channel());
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

// Streams held open without a word cost no thread each. Generate, health
// and every Inference method need none (callback API); server reflection,
// gRPC's one synchronous service, holds a thread per open stream, so the
// server caps those threads (--grpc_max_threads, default 16) and refuses
// reflection streams beyond them RESOURCE_EXHAUSTED.
TEST_F(NoModelTest, HeldReflectionStreamsDoNotPinAThreadEach) {
  constexpr int kStreams = 120;  // 60 on each of two connections
  const int before = server_->ThreadCount();
  ASSERT_GT(before, 0);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < 2; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->grpc_port()),
        grpc::InsecureChannelCredentials(), args));
  }
  struct Held {
    grpc::ClientContext context;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
    grpc::ByteBuffer in;
    grpc::Status status;
  };
  grpc::CompletionQueue cq;
  std::vector<Held> held(kStreams);
  // Tag: stream index * 4 + step (0 started, 1 read, 2 finished).
  auto tag = [](int i, int step) {
    return reinterpret_cast<void*>(static_cast<intptr_t>(i * 4 + step));
  };
  for (int i = 0; i < kStreams; ++i) {
    grpc::GenericStub stub(channels[i % 2]);
    held[i].call = stub.PrepareCall(
        &held[i].context,
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
    held[i].call->StartCall(tag(i, 0));
  }
  int refused = 0, finished = 0;
  // Runs the streams' events until `done()` or `until`.
  auto pump = [&](const std::function<bool()>& done, absl::Time until) {
    while (!done()) {
      void* t;
      bool ok;
      if (cq.AsyncNext(&t, &ok, absl::ToChronoTime(until)) !=
          grpc::CompletionQueue::GOT_EVENT) {
        return;
      }
      const int i = static_cast<int>(reinterpret_cast<intptr_t>(t) / 4);
      const int step = static_cast<int>(reinterpret_cast<intptr_t>(t) % 4);
      if (step < 2 && ok) {
        held[i].call->Read(&held[i].in, tag(i, 1));
      } else if (step < 2) {
        held[i].call->Finish(&held[i].status, tag(i, 2));
      } else {
        ++finished;
        refused +=
            held[i].status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      }
    }
  };
  // The server has seen every stream once all but its few threads' worth
  // are refused.
  pump([&] { return refused >= kStreams - 40; },
       absl::Now() + absl::Seconds(20));
  const int during = server_->ThreadCount();
  EXPECT_GE(refused, kStreams - 40);
  EXPECT_LE(during, before + 40) << "threads: " << before << " -> " << during;
  // Health and the Inference methods still answer.
  int status = 0;
  EXPECT_TRUE(HealthCheck(server_->channel().get(), "", &status).ok());
  grpc::ClientContext context;
  v1::ListModelsResponse models;
  EXPECT_TRUE(stub_->ListModels(&context, {}, &models).ok());
  for (Held& h : held) h.context.TryCancel();
  pump([&] { return finished == kStreams; }, absl::Now() + absl::Seconds(20));
  EXPECT_EQ(finished, kStreams);
  cq.Shutdown();
  void* t;
  bool ok;
  while (cq.Next(&t, &ok)) {
  }
}

// --max_open_streams: a call over the cap is refused at once, and its slot
// comes back when a call ends.
class BoundedE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::ServerProcess::Start(
        kBinary, {"--model_dir=models/demo", "--threads=2",
                  "--max_open_streams=2", "--drain_seconds=5"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Inference::NewStub(server_->channel());
    ASSERT_TRUE(
        testing::WaitUntilServing(server_->channel().get(), absl::Seconds(60)));
  }

  static v1::GenerateRequest Request(const std::string& prompt, uint32_t n) {
    v1::GenerateRequest r;
    r.set_prompt(prompt);
    r.mutable_sampling()->set_max_new_tokens(n);
    return r;
  }

  grpc::Status Generate(const v1::GenerateRequest& request,
                        std::vector<v1::GenerateResponse>* out) {
    return testing::ReadGenerateStream(stub_.get(), request, out);
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(BoundedE2eTest, OpenStreamsOverTheCapAreResourceExhausted) {
  v1::GenerateRequest r = Request("The LORD", 512);
  r.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext first_context, second_context;
  auto first = stub_->Generate(&first_context, r);
  auto second = stub_->Generate(&second_context, r);
  v1::GenerateResponse response;
  ASSERT_TRUE(first->Read(&response));  // both calls are open now
  ASSERT_TRUE(second->Read(&response));
  std::vector<v1::GenerateResponse> out;
  grpc::Status refused = Generate(Request("x", 1), &out);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--max_open_streams=2"));
  first_context.TryCancel();
  while (first->Read(&response)) {
  }
  EXPECT_EQ(first->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The slot is back once the server has seen the end of the call.
  grpc::Status st;
  for (int i = 0; i < 50; ++i) {
    out.clear();
    st = Generate(Request("x", 1), &out);
    if (st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(st.ok()) << st.error_message();
  second_context.TryCancel();
  while (second->Read(&response)) {
  }
  second->Finish();
}

// Shutdown: bounded by --drain_seconds whatever holds the process.
TEST(ShutdownE2eTest, SigtermDuringALongLoadExitsPromptly) {
  // The load ends with a warm-up generation whose experts cross a 2 Mbit/s
  // link into a fast tier of a quarter of them: dozens of 576 KiB misses at
  // 2.4 s each, a load of minutes (a FIFO as config.json blocked it for good
  // before such files were refused at once: //engine:non_regular_file_test).
  auto server = testing::ServerProcess::Start(
      kBinary,
      {"--model_dir=models/demo", "--threads=2", "--expert_cache_ratio=0.25",
       "--link_gbps=0.002", "--drain_seconds=30"});
  ASSERT_TRUE(server.ok()) << server.status();
  int status = 0;
  ASSERT_TRUE(HealthCheck((*server)->channel().get(), "", &status).ok());
  EXPECT_EQ(status, 2);  // still loading
  absl::Duration took;
  EXPECT_EQ((*server)->StopWithin(SIGTERM, absl::Seconds(30), &took), 0);
  // Far below the load's minutes and the 30 s drain, with slack for a
  // loaded machine.
  EXPECT_LT(took, absl::Seconds(10));
}

// A forward pass on a very slow link outlasts the drain: the call is
// cancelled at the deadline and the process exits without waiting for the
// step to end.
TEST(ShutdownE2eTest, ASlowLinkStepDoesNotOutlastTheDrain) {
  // A quarter of the experts in the fast tier; one 576 KiB expert takes
  // 2.4 s on a 2 Mbit/s link.
  auto server = testing::ServerProcess::Start(
      kBinary,
      {"--model_dir=models/demo", "--threads=2", "--expert_cache_ratio=0.25",
       "--link_gbps=0.002", "--drain_seconds=2"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(
      testing::WaitUntilServing((*server)->channel().get(), absl::Seconds(60)));
  // A long prompt routes to most experts of every layer: its prefill step
  // needs several transfers, far longer than the drain.
  v1::GenerateRequest r;
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "And God said, Let there be light. ";
  r.set_prompt(prompt);
  r.mutable_sampling()->set_max_new_tokens(4);
  auto stub = v1::Inference::NewStub((*server)->channel());
  grpc::ClientContext context;
  auto reader = stub->Generate(&context, r);
  // Running: the engine is inside its step.
  bool running = false;
  for (int i = 0; i < 100 && !running; ++i) {
    absl::StatusOr<std::string> m =
        testing::HttpGet((*server)->metrics_port(), "/metrics");
    running =
        m.ok() && m->find("moeserve_num_requests_running{policy=\"lru\"} 1") !=
                      std::string::npos;
    if (!running) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(running);
  absl::Duration took;
  EXPECT_EQ((*server)->StopWithin(SIGTERM, absl::Seconds(30), &took), 0);
  // The 2 s drain plus 5 s of slack for a loaded machine: the step itself
  // (dozens of 2.4 s transfers) would take far longer.
  EXPECT_LT(took, absl::Seconds(7));
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  EXPECT_FALSE(reader->Finish().ok());
}

TEST(ShutdownE2eTest, AnOpenHealthWatchDoesNotHoldAnIdleServer) {
  auto server = testing::ServerProcess::Start(
      kBinary, {"--model_dir=/nonexistent/model",
                "--exit_on_load_failure=false", "--drain_seconds=30"});
  ASSERT_TRUE(server.ok()) << server.status();
  int status = 0;
  auto watch = testing::HealthWatch::Open((*server)->channel().get(), &status);
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_EQ(status, 2);
  absl::Duration took;
  EXPECT_EQ((*server)->StopWithin(SIGTERM, absl::Seconds(15), &took), 0);
  EXPECT_LT(took, absl::Seconds(5));
}

}  // namespace
}  // namespace moeserve
