// End to end: the real moeserve binary on free loopback ports, called
// through real gRPC channels. Health, ListModels, Generate, bad input, the
// metrics endpoint and graceful shutdown.
#include <signal.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/moeserve.grpc.pb.h"
#include "tests/server_process.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kBinary[] = "server/moeserve";

// grpc.health.v1 is not shipped as a .proto by Debian; its two messages are
// tiny, so the test speaks them as raw protobuf bytes through a generic stub:
// HealthCheckRequest{string service = 1}, HealthCheckResponse{enum status =
// 1} with SERVING = 1, NOT_SERVING = 2, SERVICE_UNKNOWN = 3.
grpc::Status HealthCheck(grpc::Channel* channel, const std::string& service,
                         int* status) {
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1);
  grpc::ByteBuffer recv;
  grpc::GenericStub stub(channel->shared_from_this());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status result;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", {}, &send, &recv,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   result = s;
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!result.ok()) return result;
  std::vector<grpc::Slice> slices;
  recv.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // An all-default message (status UNKNOWN = 0) is empty on the wire.
  *status = bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
  return result;
}

class ServerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::ServerProcess::Start(
        kBinary, {"--model_dir=/nonexistent/model", "--policy=lru",
                  "--ab=lru=0.5,overlap=0.5", "--drain_seconds=5"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Inference::NewStub(server_->channel());
  }

  grpc::Status Generate(const v1::GenerateRequest& request,
                        std::vector<v1::GenerateResponse>* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) out->push_back(response);
    return reader->Finish();
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(ServerE2eTest, HealthIsNotServingWithoutAModel) {
  int status = -1;
  ASSERT_TRUE(HealthCheck(server_->channel().get(), "", &status).ok());
  EXPECT_EQ(status, 2);  // NOT_SERVING
  ASSERT_TRUE(
      HealthCheck(server_->channel().get(), "moeserve.v1.Inference", &status)
          .ok());
  EXPECT_EQ(status, 2);
  grpc::Status unknown =
      HealthCheck(server_->channel().get(), "no.such.Service", &status);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerE2eTest, ListModelsIsEmptyWithoutAModel) {
  grpc::ClientContext context;
  v1::ListModelsResponse response;
  ASSERT_TRUE(stub_->ListModels(&context, {}, &response).ok());
  EXPECT_EQ(response.models_size(), 0);
}

TEST_F(ServerE2eTest, ValidGenerateIsUnavailableWithoutAModel) {
  v1::GenerateRequest request;
  request.set_prompt("The LORD");
  request.mutable_sampling()->set_max_new_tokens(8);
  std::vector<v1::GenerateResponse> out;
  grpc::Status st = Generate(request, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(st.error_message(), HasSubstr("no model is loaded"));
  EXPECT_TRUE(out.empty());  // no fake generation
}

TEST_F(ServerE2eTest, BadInputIsInvalidArgumentEvenWithoutAModel) {
  v1::GenerateRequest empty;
  std::vector<v1::GenerateResponse> out;
  grpc::Status st = Generate(empty, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), StartsWith("prompt:"));

  v1::GenerateRequest top_p;
  top_p.set_prompt("x");
  top_p.mutable_sampling()->set_top_p(1.5f);
  st = Generate(top_p, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), StartsWith("sampling.top_p:"));

  v1::GenerateRequest too_many;
  too_many.set_prompt("x");
  too_many.mutable_sampling()->set_max_new_tokens(1'000'000);
  v1::GenerateUnaryResponse unary;
  grpc::ClientContext context;
  st = stub_->GenerateUnary(&context, too_many, &unary);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), StartsWith("sampling.max_new_tokens:"));
  EXPECT_TRUE(out.empty());
}

TEST_F(ServerE2eTest, UnknownPolicyIsNotFound) {
  v1::GenerateRequest request;
  request.set_prompt("x");
  request.set_policy("no_such_policy");
  std::vector<v1::GenerateResponse> out;
  grpc::Status st = Generate(request, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("lru, overlap"));
  request.set_policy("overlap");  // configured by --ab: exists, no model
  st = Generate(request, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ServerE2eTest, OversizedMessageIsRefusedByTheTransport) {
  v1::GenerateRequest request;
  request.set_prompt(std::string(5 << 20, 'a'));  // over the 4 MiB default
  std::vector<v1::GenerateResponse> out;
  grpc::Status st = Generate(request, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ServerE2eTest, MetricsEndpointCountsRpcsAndReportsHealth) {
  v1::GenerateRequest empty;
  std::vector<v1::GenerateResponse> out;
  ASSERT_EQ(Generate(empty, &out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  absl::StatusOr<std::string> metrics =
      testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(*metrics, StartsWith("200\n"));
  EXPECT_THAT(*metrics,
              HasSubstr("moeserve_grpc_requests_total{method=\"Generate\","
                        "code=\"INVALID_ARGUMENT\"} 1"));
  EXPECT_THAT(*metrics, HasSubstr("moeserve_model_loaded 0"));
  EXPECT_THAT(*metrics, HasSubstr("moeserve_engine_info{policy=\"overlap\""));
  absl::StatusOr<std::string> health =
      testing::HttpGet(server_->metrics_port(), "/healthz");
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_THAT(*health, StartsWith("503\n"));
}

TEST_F(ServerE2eTest, SigtermDrainsAndExitsZero) {
  EXPECT_EQ(server_->StopWith(SIGTERM), 0);
}

}  // namespace
}  // namespace moeserve
