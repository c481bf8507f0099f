// The hand-off between gRPC and the engine, in one process: real gRPC
// streams and unary calls on a loopback port,
// served by the callback reactors, the EngineHost and two engine instances'
// schedulers, with clients that finish, cancel mid-stream, run out their
// deadline and are aborted by id, all at once and several rounds over.
// Afterwards every engine is idle, and every request was counted under the
// finish reason it should have.
//
// The tokenizer is engine/testing's fake, as in serving_handoff_test (its
// TSan twin, where the gRPC transport is replaced by one TSan can see).
#include <atomic>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"
#include "proto/moeserve.grpc.pb.h"
#include "server/async_model_host.h"
#include "server/engine_host.h"
#include "server/grpc_server.h"
#include "server/inference_service.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "server/testing/handoff_fixture.h"

namespace moeserve {
namespace {

using server::testing::Client;
using server::testing::DeadlineFor;
using server::testing::HandOffRequest;
using server::testing::Outcome;

// The client's deadline: the kind's, else a minute (a test that hangs fails).
std::chrono::system_clock::time_point DeadlineFrom(Client kind) {
  const absl::Duration d = DeadlineFor(kind);
  return std::chrono::system_clock::now() +
         absl::ToChronoMilliseconds(
             d == absl::InfiniteDuration() ? absl::Minutes(1) : d);
}

class ServingHandOffTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<server::ServerOptions> options =
        server::testing::HandOffOptions();
    ASSERT_TRUE(options.ok()) << options.status();
    options_ = *std::move(options);
    host_ = std::make_unique<server::AsyncModelHost>(
        options_.EngineNames(),
        [this]() -> absl::StatusOr<std::unique_ptr<server::ModelHost>> {
          auto host = server::EngineHost::Create(
              options_, &registry_,
              server::testing::HandOffTokenizer(options_));
          if (!host.ok()) return host.status();
          return std::unique_ptr<server::ModelHost>(*std::move(host));
        });
    auto metrics = server::ServerMetrics::Create(
        &registry_, options_, [this] { return host_->CheckReady().ok(); });
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
    service_ = std::make_unique<server::InferenceService>(
        host_.get(), options_.limits, metrics_.get());
    auto grpc_server = server::GrpcServer::Start(options_, service_.get());
    ASSERT_TRUE(grpc_server.ok()) << grpc_server.status();
    grpc_ = *std::move(grpc_server);
    ASSERT_TRUE(host_->WaitUntilLoaded().ok());
    grpc_->SetServing(true);
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_->port()),
                            grpc::InsecureChannelCredentials());
    // Connected before the first 40 ms deadline starts: a call that expires
    // while the connection is still being set up never reaches the server,
    // and the server-side counts below would come up short.
    ASSERT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                          std::chrono::seconds(30)));
    stub_ = v1::Inference::NewStub(channel);
  }

  void TearDown() override {
    if (grpc_ != nullptr) grpc_->Shutdown(absl::Now() + absl::Seconds(2));
  }

  Outcome Stream(int i, Client kind) {
    const v1::GenerateRequest r = HandOffRequest(i, kind);
    grpc::ClientContext context;
    context.set_deadline(DeadlineFrom(kind));
    auto reader = stub_->Generate(&context, r);
    Outcome out;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      out.tokens += response.token_ids_size();
      if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        out.finish = response.finish_reason();
      }
      if (out.tokens >= 2 && kind == Client::kCancel) context.TryCancel();
      if (out.tokens >= 2 && kind == Client::kAborted && !aborted_[i]) {
        aborted_[i] = true;
        grpc::ClientContext abort_context;
        v1::AbortRequest abort;
        abort.set_request_id(r.request_id());
        v1::AbortResponse found;
        EXPECT_TRUE(stub_->Abort(&abort_context, abort, &found).ok());
      }
    }
    out.code = static_cast<absl::StatusCode>(reader->Finish().error_code());
    return out;
  }

  Outcome Unary(int i, Client kind) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineFrom(kind));
    v1::GenerateUnaryResponse response;
    Outcome out;
    out.code = static_cast<absl::StatusCode>(
        stub_->GenerateUnary(&context, HandOffRequest(i, kind), &response)
            .error_code());
    out.finish = response.finish_reason();
    out.tokens = response.token_ids_size();
    return out;
  }

  metrics::Registry registry_;
  server::ServerOptions options_;
  std::unique_ptr<server::AsyncModelHost> host_;
  std::unique_ptr<server::ServerMetrics> metrics_;
  std::unique_ptr<server::InferenceService> service_;
  std::unique_ptr<server::GrpcServer> grpc_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  std::map<int, bool> aborted_;  // written only by request i's own thread
};

TEST_F(ServingHandOffTest, ConcurrentStreamsCancellationsDeadlinesAndAborts) {
  constexpr int kRounds = 3;
  constexpr int kClients = 12;
  const auto& kinds = server::testing::kClientKinds;
  for (int i = 0; i < kRounds * kClients; ++i) aborted_[i] = false;
  std::map<Client, int> sent;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<Outcome> outcomes(kClients);
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
      const int i = round * kClients + c;
      const Client kind = kinds[c % std::size(kinds)];
      ++sent[kind];
      threads.emplace_back([this, i, kind, out = &outcomes[c]] {
        *out =
            server::testing::IsUnary(kind) ? Unary(i, kind) : Stream(i, kind);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int c = 0; c < kClients; ++c) {
      SCOPED_TRACE(absl::StrCat("client ", c));
      server::testing::ExpectOutcome(kinds[c % std::size(kinds)], outcomes[c]);
    }
  }
  // Every request ends in the scheduler, resources freed.
  server::testing::ExpectAllCounted(registry_, sent);
}

}  // namespace
}  // namespace moeserve
