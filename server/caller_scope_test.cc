// Request ids belong to their caller (server/caller_identity.h): the
// server's own ids are random 128-bit hex, a client-given id only has to be
// unique among its caller's requests, and Abort reaches only the caller's
// own. First on EngineHost (the scoping), then through real gRPC (who the
// caller is: the connection, when no authenticated identity is set).
#include <memory>
#include <regex>
#include <string>
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
#include "server/caller_identity.h"
#include "server/engine_host.h"
#include "server/grpc_server.h"
#include "server/inference_service.h"
#include "server/server_metrics.h"
#include "server/testing/handoff_fixture.h"

namespace moeserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A long request (400 tokens) on the lru engine.
v1::GenerateRequest Long(const std::string& id) {
  v1::GenerateRequest r = testing::HandOffRequest(0, testing::Client::kAborted);
  r.set_request_id(id);
  r.set_policy("lru");
  return r;
}

// Drains `call` (polling Next: no transport here) and returns its last
// message's finish reason.
v1::FinishReason LastReason(GenerateCall* call) {
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  v1::GenerateResponse response;
  absl::Status final_status;
  while (absl::Now() < give_up) {
    if (!call->Next(&response, &final_status)) {
      absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      return response.finish_reason();
    }
  }
  ADD_FAILURE() << "no finish within 60 s";
  return v1::FINISH_REASON_UNSPECIFIED;
}

TEST(CallerScopeTest, EngineHostScopesIdsAndAbortToTheCaller) {
  absl::StatusOr<ServerOptions> options = testing::HandOffOptions();
  ASSERT_TRUE(options.ok()) << options.status();
  metrics::Registry registry;
  auto host = EngineHost::Create(*options, &registry,
                                 testing::HandOffTokenizer(*options));
  ASSERT_TRUE(host.ok()) << host.status();
  const absl::Time forever = absl::InfiniteFuture();
  // Two callers use the same id at once: no ALREADY_EXISTS between them.
  auto mine = (*host)->StartGenerate(Long("same"), forever, "peer:a");
  ASSERT_TRUE(mine.ok()) << mine.status();
  auto theirs = (*host)->StartGenerate(Long("same"), forever, "peer:b");
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  // The same caller twice is refused, naming the id, not the scope.
  auto again = (*host)->StartGenerate(Long("same"), forever, "peer:a");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.status().message(), HasSubstr("'same'"));
  EXPECT_THAT(again.status().message(), Not(HasSubstr("peer:")));
  // Another caller's Abort finds nothing; the owner's ends only its own.
  EXPECT_FALSE((*host)->Abort("peer:c", "same"));
  EXPECT_TRUE((*host)->Abort("peer:a", "same"));
  EXPECT_EQ(LastReason(mine->get()), v1::CANCELLED);
  EXPECT_EQ(LastReason(theirs->get()), v1::LENGTH);
}

// A host that only records who called (the engines are not the point).
class RecordingHost final : public ModelHost {
 public:
  absl::Status CheckReady() const override { return absl::OkStatus(); }
  std::vector<std::string> EngineNames() const override { return {"lru"}; }
  v1::ListModelsResponse ListModels() const override { return {}; }
  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest&) override {
    return absl::UnimplementedError("no tokenizer");
  }
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartGenerate(
      const v1::GenerateRequest&, absl::Time,
      std::string_view caller) override {
    base::MutexLock lock(&mu_);
    callers_.emplace_back(caller);
    return absl::UnavailableError("recorded");
  }
  bool Abort(std::string_view caller, std::string_view) override {
    base::MutexLock lock(&mu_);
    callers_.emplace_back(caller);
    return false;
  }
  std::vector<std::string> callers() {
    base::MutexLock lock(&mu_);
    return callers_;
  }

 private:
  base::Mutex mu_;
  std::vector<std::string> callers_ ABSL_GUARDED_BY(mu_);
};

TEST(CallerScopeTest, TheCallerIsTheConnectionWithoutAuth) {
  RecordingHost host;
  metrics::Registry registry;
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto metrics = ServerMetrics::Create(&registry, options, [] { return true; });
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  InferenceService service(&host, options.limits, metrics->get());
  auto server = GrpcServer::Start(options, &service);
  ASSERT_TRUE(server.ok()) << server.status();
  // Separate subchannel pools: two TCP connections, as two clients have.
  auto connect = [&] {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return v1::Inference::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                  grpc::InsecureChannelCredentials(), args));
  };
  auto a = connect();
  auto b = connect();
  auto abort = [](v1::Inference::Stub* stub) {
    grpc::ClientContext context;
    v1::AbortRequest request;
    request.set_request_id("x");
    v1::AbortResponse response;
    return stub->Abort(&context, request, &response).ok();
  };
  auto unary = [](v1::Inference::Stub* stub) {
    grpc::ClientContext context;
    v1::GenerateRequest request;
    request.set_prompt("hi");
    v1::GenerateUnaryResponse response;
    return stub->GenerateUnary(&context, request, &response).error_code();
  };
  ASSERT_TRUE(abort(a.get()));
  EXPECT_EQ(unary(a.get()), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(abort(b.get()));
  const std::vector<std::string> callers = host.callers();
  ASSERT_EQ(callers.size(), 3u);
  EXPECT_EQ(callers[0], callers[1]);  // one connection, one caller
  EXPECT_NE(callers[0], callers[2]);  // another connection, another
  EXPECT_THAT(callers[0], ::testing::StartsWith("peer:ipv4:127.0.0.1:"));
  (*server)->Shutdown(absl::Now());
}

TEST(CallerScopeTest, ServerIdsAreRandom128BitHex) {
  const std::regex shape("req-[0-9a-f]{32}");
  const std::string a = NewServerRequestId();
  const std::string b = NewServerRequestId();
  EXPECT_TRUE(std::regex_match(a, shape)) << a;
  EXPECT_TRUE(std::regex_match(b, shape)) << b;
  EXPECT_NE(a, b);
  // No (caller, id) pair spells another's key.
  EXPECT_NE(ScopedRequestId("peer:a", "bc"), ScopedRequestId("peer:ab", "c"));
}

}  // namespace
}  // namespace moeserve::server
