// Request ids belong to their caller (server/caller_identity.h): the
// server's own ids are random 128-bit hex, a client-given id only has to be
// unique among its caller's requests, and Abort reaches only the caller's
// own. First on EngineHost (the scoping), then through real gRPC (who the
// caller is: the connection, when no authenticated identity is set).
#include <algorithm>
#include <memory>
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
#include "server/security/bearer_tokens.h"
#include "server/security/grpc_credentials.h"
#include "server/security/security_options.h"
#include "server/server_metrics.h"
#include "server/serving_bounds.h"
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

// A host that remembers each caller's request ids (from StartGenerate,
// which then refuses) and finds them in Abort only for that caller.
class ScopingHost final : public ModelHost {
 public:
  absl::Status CheckReady() const override { return absl::OkStatus(); }
  std::vector<std::string> EngineNames() const override { return {"lru"}; }
  v1::ListModelsResponse ListModels() const override { return {}; }
  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest&) override {
    return absl::UnimplementedError("no tokenizer");
  }
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartGenerate(
      const v1::GenerateRequest& request, absl::Time,
      std::string_view caller) override {
    base::MutexLock lock(&mu_);
    callers_.emplace_back(caller);
    ids_.push_back(ScopedRequestId(caller, request.request_id()));
    return absl::UnavailableError("remembered");
  }
  bool Abort(std::string_view caller, std::string_view id) override {
    base::MutexLock lock(&mu_);
    return std::find(ids_.begin(), ids_.end(), ScopedRequestId(caller, id)) !=
           ids_.end();
  }
  std::vector<std::string> callers() {
    base::MutexLock lock(&mu_);
    return callers_;
  }

 private:
  base::Mutex mu_;
  std::vector<std::string> callers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ids_ ABSL_GUARDED_BY(mu_);
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

// Issue 29: two tenants whose calls share one connection (one channel,
// per-call tokens; grpcio does the same for two channels to one target)
// are both accepted, and each is its own caller: Abort finds only its own.
TEST(CallerScopeTest, TwoTokensOnOneConnectionAreTwoCallers) {
  constexpr char kA[] = "tenant-a-aaaaaaaaaaaa";
  constexpr char kB[] = "tenant-b-bbbbbbbbbbbb";
  auto tokens = security::BearerTokens::Parse(absl::StrCat(kA, "\n", kB), "t");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  security::SecurityOptions security;
  security.tokens = std::make_shared<const security::BearerTokens>(*tokens);
  ScopingHost host;
  metrics::Registry registry;
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto metrics = ServerMetrics::Create(&registry, options, [] { return true; });
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  InferenceService service(&host, options.limits, metrics->get());
  auto server =
      GrpcServer::Start(options, &service, ServingBounds{},
                        security::MakeGrpcServerCredentials(security));
  ASSERT_TRUE(server.ok()) << server.status();
  // One channel: one connection (grpc_credentials_test checks the peer).
  auto stub = v1::Inference::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials()));
  auto generate = [&](const char* token, const std::string& id) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::GenerateRequest request;
    request.set_prompt("hi");
    request.set_request_id(id);
    v1::GenerateUnaryResponse response;
    return stub->GenerateUnary(&context, request, &response);
  };
  auto abort = [&](const char* token, const std::string& id) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    v1::AbortRequest request;
    request.set_request_id(id);
    v1::AbortResponse response;
    grpc::Status status = stub->Abort(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.found();
  };
  // Both tenants accepted on the one connection (was UNAUTHENTICATED "this
  // connection is authenticated with another token" for the second).
  grpc::Status a = generate(kA, "job");
  EXPECT_EQ(a.error_code(), grpc::StatusCode::UNAVAILABLE) << a.error_message();
  grpc::Status b = generate(kB, "other");
  EXPECT_EQ(b.error_code(), grpc::StatusCode::UNAVAILABLE) << b.error_message();
  EXPECT_FALSE(abort(kB, "job"));  // not B's
  EXPECT_TRUE(abort(kA, "job"));
  EXPECT_FALSE(abort(kA, "other"));
  EXPECT_TRUE(abort(kB, "other"));
  const std::vector<std::string> callers = host.callers();
  ASSERT_EQ(callers.size(), 2u);
  EXPECT_EQ(callers[0], "id:" + security::BearerTokens::IdentityOfToken(kA));
  EXPECT_EQ(callers[1], "id:" + security::BearerTokens::IdentityOfToken(kB));
  (*server)->Shutdown(absl::Now());
}

TEST(CallerScopeTest, ServerIdsAreRandom128BitHex) {
  // "req-" and 32 lowercase hex digits.
  auto has_shape = [](const std::string& id) {
    return id.size() == 4 + 32 && id.rfind("req-", 0) == 0 &&
           id.find_first_not_of("0123456789abcdef", 4) == std::string::npos;
  };
  const std::string a = NewServerRequestId();
  const std::string b = NewServerRequestId();
  EXPECT_TRUE(has_shape(a)) << a;
  EXPECT_TRUE(has_shape(b)) << b;
  EXPECT_NE(a, b);
  // No (caller, id) pair spells another's key.
  EXPECT_NE(ScopedRequestId("peer:a", "bc"), ScopedRequestId("peer:ab", "c"));
}

}  // namespace
}  // namespace moeserve::server
