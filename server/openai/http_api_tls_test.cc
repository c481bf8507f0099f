// The HTTP API server over HTTPS and mTLS, driven by curl with certificates
// that `openssl` makes for this test run (as metrics/http_exporter_tls_test
// does for the metrics port).

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/testing/test_pki.h"
#include "server/openai/http_api_server.h"
#include "server/openai/openai_frontend.h"
#include "server/openai/testing/fake_model_host.h"

namespace moeserve::server::openai {
namespace {

using metrics::testing::Shell;
using metrics::testing::TestPki;
using testing::FakeCallState;
using testing::FakeModelHost;
using ::testing::HasSubstr;

class HttpApiTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = TestPki::Make("openai_pki");
    ASSERT_NE(pki_, nullptr) << "openssl could not make the test PKI";
    options_.tls_cert_pem = pki_->Pem("server.pem");
    options_.tls_key_pem = pki_->Pem("server.key");
    frontend_ = std::make_unique<OpenAiFrontend>(
        &host_, nullptr, RequestLimits(), "demo",
        absl::FailedPreconditionError("messages: no chat template"));
  }

  void StartServer() {
    absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> server =
        OpenAiHttpServer::Start(options_, frontend_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::string Path(const std::string& name) const { return pki_->Path(name); }
  std::string Url(const char* path) const {
    return absl::StrCat("https://127.0.0.1:", server_->port(), path);
  }
  // curl's status line + body for `url` with `args`.
  std::string Curl(const std::string& args) const {
    std::string out;
    Shell(
        absl::StrCat("curl -sN --max-time 10 -w ' HTTP%{http_code}' --cacert ",
                     Path("ca.pem"), " ", args),
        &out);
    return out;
  }

  FakeModelHost host_;
  std::unique_ptr<TestPki> pki_;
  HttpApiOptions options_;
  std::unique_ptr<OpenAiFrontend> frontend_;
  std::unique_ptr<OpenAiHttpServer> server_;
};

TEST_F(HttpApiTlsTest, StreamsOverHttpsOnly) {
  StartServer();
  EXPECT_THAT(Curl(Url("/health")), HasSubstr("HTTP200"));
  std::thread feed([this] {
    std::shared_ptr<FakeCallState> call = host_.WaitForCall(1);
    ASSERT_NE(call, nullptr);
    call->PushText("The");
    call->PushText(" LORD", v1::LENGTH);
  });
  const std::string sse =
      Curl(absl::StrCat("-H 'Content-Type: application/json' "
                        "-d '{\"prompt\": \"x\", \"stream\": true}' ",
                        Url("/v1/completions")));
  feed.join();
  EXPECT_THAT(sse, HasSubstr("\"text\":\" LORD\""));
  EXPECT_THAT(sse, HasSubstr("data: [DONE]\n\n HTTP200"));
  // Plain HTTP gets no HTTP answer.
  std::string out;
  Shell(absl::StrCat("curl -s --max-time 10 -o /dev/null -w '%{http_code}' "
                     "http://127.0.0.1:",
                     server_->port(), "/health"),
        &out);
  EXPECT_EQ(out, "000");
}

TEST_F(HttpApiTlsTest, ClientCaRequiresASignedClientCertificate) {
  options_.tls_client_ca_pem = pki_->Pem("ca.pem");
  StartServer();
  const std::string with_cert =
      Curl(absl::StrCat("--cert ", Path("client.pem"), " --key ",
                        Path("client.key"), " ", Url("/v1/models")));
  EXPECT_THAT(with_cert, HasSubstr("HTTP200"));
  const std::string without = Curl(Url("/v1/models"));
  EXPECT_TRUE(absl::StrContains(without, "HTTP403") ||
              absl::StrContains(without, "HTTP000"))
      << without;
}

}  // namespace
}  // namespace moeserve::server::openai
