// Issue 29: a request that does not parse (a string field that is not
// UTF-8, a truncated message, garbage) was answered UNIMPLEMENTED with no
// message, uncounted, with one libprotobuf ERROR line each. Now:
// INVALID_ARGUMENT naming the problem, counted, and the log bounded.
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"
#include "proto/moeserve.grpc.pb.h"
#include "server/grpc_server.h"
#include "server/inference_service.h"
#include "server/protobuf_log.h"
#include "server/server_metrics.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace moeserve::server {
namespace {

using ::testing::HasSubstr;

// Ready, one engine, every request refused after the checks: only the
// parsing is the point.
class RefusingHost final : public ModelHost {
 public:
  absl::Status CheckReady() const override { return absl::OkStatus(); }
  std::vector<std::string> EngineNames() const override { return {"lru"}; }
  v1::ListModelsResponse ListModels() const override { return {}; }
  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest& request) override {
    v1::TokenizeResponse response;
    response.add_token_ids(static_cast<uint32_t>(request.text().size()));
    return response;
  }
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartGenerate(
      const v1::GenerateRequest&, absl::Time, std::string_view) override {
    return absl::UnavailableError("not here");
  }
  bool Abort(std::string_view, std::string_view) override { return false; }
};

// Field 1 (a proto3 string in every request type here) holding `bytes`.
std::string StringField1(const std::string& bytes) {
  return absl::StrCat(std::string(1, '\x0a'),
                      std::string(1, static_cast<char>(bytes.size())), bytes);
}

const std::string kNotUtf8 = StringField1("ab\xff\xfe");
const std::string kTruncated = StringField1("hello").substr(0, 4);
const std::string kGarbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";

grpc::ByteBuffer Raw(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

class MalformedRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The server's log, to count its lines.
    logger_ = std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_));
    previous_logger_ = spdlog::default_logger();
    spdlog::set_default_logger(logger_);
    options_.host = "127.0.0.1";
    options_.port = 0;
    auto metrics =
        ServerMetrics::Create(&registry_, options_, [] { return true; });
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
    service_ = std::make_unique<InferenceService>(&host_, options_.limits,
                                                  metrics_.get());
    auto server = GrpcServer::Start(options_, service_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Now());
    spdlog::set_default_logger(previous_logger_);
  }

  // A unary call of `method` with `bytes` as its request.
  grpc::Status Unary(const std::string& method, const std::string& bytes,
                     grpc::ByteBuffer* response = nullptr) {
    grpc::ClientContext context;
    grpc::ByteBuffer ignored;
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer,
                                             grpc::ByteBuffer>(
        channel_.get(),
        grpc::internal::RpcMethod(("/moeserve.v1.Inference/" + method).c_str(),
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &context, Raw(bytes), response != nullptr ? response : &ignored);
  }

  // Generate (server streaming) with `bytes` as its request.
  grpc::Status Stream(const std::string& bytes) {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel_.get(),
            grpc::internal::RpcMethod(
                "/moeserve.v1.Inference/Generate",
                grpc::internal::RpcMethod::SERVER_STREAMING),
            &context, Raw(bytes)));
    grpc::ByteBuffer message;
    while (reader->Read(&message)) {
    }
    return reader->Finish();
  }

  std::string Metrics() { return registry_.Serialize(); }

  std::ostringstream log_;
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<spdlog::logger> previous_logger_;
  RefusingHost host_;
  metrics::Registry registry_;
  ServerOptions options_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(MalformedRequestTest, NotUtf8IsInvalidArgumentNamingTheField) {
  grpc::Status st = Unary("Tokenize", kNotUtf8);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("request: not a valid moeserve.v1.TokenizeRequest: "
                        "string field moeserve.v1.TokenizeRequest.text is not "
                        "valid UTF-8"));
  st = Unary("GenerateUnary", kNotUtf8);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("moeserve.v1.GenerateRequest.prompt is not valid"));
  st = Stream(kNotUtf8);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("moeserve.v1.GenerateRequest.prompt is not valid"));
  st = Unary("Abort", kNotUtf8);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("AbortRequest.request_id"));
}

TEST_F(MalformedRequestTest, TruncatedAndGarbageAreInvalidArgument) {
  for (const std::string& bytes : {kTruncated, kGarbage}) {
    for (const char* method :
         {"Tokenize", "GenerateUnary", "Abort", "ListModels"}) {
      grpc::Status st = Unary(method, bytes);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_THAT(st.error_message(), HasSubstr("are not a complete protobuf "
                                                "message (truncated or not "
                                                "protobuf)"))
          << method;
    }
    grpc::Status st = Stream(bytes);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(),
                HasSubstr("not a valid moeserve.v1.GenerateRequest"));
  }
}

TEST_F(MalformedRequestTest, ParsedRequestsStillWork) {
  v1::TokenizeRequest request;
  request.set_text("four");
  grpc::ByteBuffer response;
  grpc::Status st = Unary("Tokenize", request.SerializeAsString(), &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  v1::TokenizeResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  ASSERT_EQ(parsed.token_ids_size(), 1);
  EXPECT_EQ(parsed.token_ids(0), 4u);
  // A valid request refused after parsing keeps its own answer.
  v1::GenerateRequest generate;
  generate.set_prompt("hi");
  EXPECT_EQ(Stream(generate.SerializeAsString()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Unary("Abort", v1::AbortRequest().SerializeAsString()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // request_id: empty
}

TEST_F(MalformedRequestTest, CountedAndTheLogIsBounded) {
  ::testing::internal::CaptureStderr();
  const absl::Time start = absl::Now();
  constexpr int kCalls = 2000;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(Unary("Tokenize", i % 2 ? kNotUtf8 : kGarbage).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  ASSERT_EQ(Stream(kNotUtf8).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const absl::Duration took = absl::Now() - start;
  const std::string stderr_text = ::testing::internal::GetCapturedStderr();
  const std::string text = Metrics();
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "moeserve_grpc_requests_total{method=\"Tokenize\","
                        "code=\"INVALID_ARGUMENT\"} ",
                        kCalls)));
  EXPECT_THAT(text,
              HasSubstr("moeserve_grpc_requests_total{method=\"Generate\","
                        "code=\"INVALID_ARGUMENT\"} 1"));
  // libprotobuf writes nothing to stderr itself ...
  EXPECT_THAT(stderr_text, ::testing::Not(HasSubstr("libprotobuf")));
  // ... and the server's lines about them are rate-limited.
  logger_->flush();
  const std::string log = log_.str();
  const int lines = static_cast<int>(std::count(log.begin(), log.end(), '\n'));
  const int windows = 1 + static_cast<int>(absl::ToDoubleSeconds(took) /
                                           kProtobufLogWindowSeconds);
  EXPECT_LE(lines, kProtobufLogLinesPerWindow * (windows + 1)) << log;
  // (Other tests of this process may have spent the window's lines.)
  EXPECT_LT(log.size(), 8192u * (windows + 1));
  std::printf("%d calls in %.2f s: %d log lines, %zu bytes\n", kCalls + 1,
              absl::ToDoubleSeconds(took), lines, log.size());
}

}  // namespace
}  // namespace moeserve::server
