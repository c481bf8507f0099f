// The auth processor of MakeGrpcServerCredentials() on a real in-process
// gRPC server (plaintext port, so no certificates are needed here; TLS and
// mTLS are covered end to end by //tests:tls_e2e_test): a generic handler
// answers with the caller identity it sees and the connection.
#include "server/security/grpc_credentials.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"

namespace moeserve::server::security {
namespace {

constexpr char kToken[] = "tok-aaaaaaaaaaaaaaaa";
constexpr char kOtherToken[] = "tok-bbbbbbbbbbbbbbbb";

// Answers every method with "<CallIdentity or ->|<peer>".
class IdentityEcho : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(grpc::GenericCallbackServerContext* context) {
        const std::string text = absl::StrCat(
            CallIdentity(*context).value_or("-"), "|", context->peer());
        grpc::Slice slice(text);
        response_ = grpc::ByteBuffer(&slice, 1);
        StartRead(&request_);
      }
      void OnReadDone(bool) override {
        StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer request_;
      grpc::ByteBuffer response_;
    };
    return new Reactor(context);
  }
};

class GrpcCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokens =
        BearerTokens::Parse(absl::StrCat(kToken, "\n", kOtherToken), "test");
    ASSERT_TRUE(tokens.ok());
    SecurityOptions options;
    options.tokens = std::make_shared<const BearerTokens>(*tokens);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", MakeGrpcServerCredentials(options),
                             &port_);
    builder.RegisterCallbackGenericService(&echo_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    channel_ = NewChannel();
  }
  // A channel on a connection of its own (not shared through gRPC's global
  // subchannel pool).
  std::shared_ptr<grpc::Channel> NewChannel() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port_),
                                     grpc::InsecureChannelCredentials(), args);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  // Calls `method` with `copies` x `authorization` metadata (none when
  // empty); returns
  // the status and, through `reply`, the answer's text.
  grpc::Status Call(const std::string& method, const std::string& authorization,
                    std::string* reply, int copies = 1) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    for (int i = 0; i < copies && !authorization.empty(); ++i) {
      context.AddMetadata("authorization", authorization);
    }
    grpc::CompletionQueue cq;
    grpc::Slice empty_message("");  // an empty proto message, 0 bytes
    grpc::ByteBuffer request(&empty_message, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    auto call = stub.PrepareUnaryCall(&context, method, request, &cq);
    call->StartCall();
    call->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    std::vector<grpc::Slice> slices;
    if (status.ok() && response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) {
        reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }

  IdentityEcho echo_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0;
};

// The identity part of a reply.
std::string IdentityIn(const std::string& reply) {
  return reply.substr(0, reply.find('|'));
}

TEST_F(GrpcCredentialsTest, RightTokenPassesWithIdentity) {
  std::string reply;
  const grpc::Status status = Call("/moeserve.v1.Inference/ListModels",
                                   absl::StrCat("Bearer ", kToken), &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  auto tokens = BearerTokens::Parse(kToken, "test");
  EXPECT_EQ(IdentityIn(reply), *tokens->Identify(kToken));
  EXPECT_EQ(BearerTokens::IdentityOfToken(kToken), *tokens->Identify(kToken));
}

TEST_F(GrpcCredentialsTest, MissingOrWrongTokenIsUnauthenticated) {
  std::string reply;
  EXPECT_EQ(Call("/moeserve.v1.Inference/ListModels", "", &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call("/moeserve.v1.Inference/Generate",
                 "Bearer tok-aaaaaaaaaaaaaaab", &reply)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call("/moeserve.v1.Inference/Generate",
                 absl::StrCat("Basic ", kToken), &reply)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Two headers, even both right: the identity must come from the one
  // checked.
  EXPECT_EQ(Call("/moeserve.v1.Inference/Generate",
                 absl::StrCat("Bearer ", kToken), &reply, 2)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(reply, "");
}

// Issue 29: each call's token is checked on its own, so two tenants share
// one connection (grpcio shares one between channels to the same target);
// each call gets its own token's identity.
TEST_F(GrpcCredentialsTest, TokensPerCallOnOneConnection) {
  const std::string mine = BearerTokens::IdentityOfToken(kToken);
  const std::string theirs = BearerTokens::IdentityOfToken(kOtherToken);
  ASSERT_NE(mine, theirs);
  std::string peer;
  for (int i = 0; i < 4; ++i) {
    const char* token = i % 2 ? kOtherToken : kToken;
    std::string reply;
    const grpc::Status status = Call("/moeserve.v1.Inference/ListModels",
                                     absl::StrCat("Bearer ", token), &reply);
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
    EXPECT_EQ(IdentityIn(reply), i % 2 ? theirs : mine);
    const std::string this_peer = reply.substr(reply.find('|') + 1);
    if (i == 0) peer = this_peer;
    EXPECT_EQ(this_peer, peer) << "not one connection";
  }
  // A wrong token on that connection is still refused.
  std::string reply;
  EXPECT_EQ(Call("/moeserve.v1.Inference/ListModels",
                 "Bearer tok-cccccccccccccccc", &reply)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(GrpcCredentialsTest, HealthAndReflectionStayOpen) {
  std::string reply;
  // The real health service answers (SERVING: the default for "").
  const grpc::Status health = Call("/grpc.health.v1.Health/Check", "", &reply);
  EXPECT_TRUE(health.ok()) << health.error_code() << " "
                           << health.error_message();
  // Reflection (its plugin comes with libgrpc++_reflection, linked here)
  // answers too: the call got through without a token.
  reply.clear();
  EXPECT_TRUE(Call("/grpc.reflection.v1alpha.ServerReflection/"
                   "ServerReflectionInfo",
                   "", &reply)
                  .ok());
  EXPECT_NE(reply, "");
}

}  // namespace
}  // namespace moeserve::server::security
