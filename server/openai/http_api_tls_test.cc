// The HTTP API server over HTTPS and mTLS, driven by curl with certificates
// that `openssl` makes for this test run (as metrics/http_exporter_tls_test
// does for the metrics port).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/openai/http_api_server.h"
#include "server/openai/openai_frontend.h"
#include "server/openai/testing/fake_model_host.h"

namespace moeserve::server::openai {
namespace {

using testing::FakeCallState;
using testing::FakeModelHost;
using ::testing::HasSubstr;

int Shell(const std::string& command, std::string* out = nullptr) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) {
    text.append(buf, n);
  }
  const int status = pclose(pipe);
  if (out != nullptr) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class HttpApiTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp ? tmp : "/tmp", "/openai_pki_", getpid());
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", dir_, "; cd ", dir_, ";", "openssl req -x509 ",
        key, " -nodes -days 2 -subj /CN=test-ca -keyout ca.key -out ca.pem;",
        "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext;", "openssl req ",
        key, " -nodes -subj /CN=localhost -keyout server.key -out server.csr;",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key",
        " -CAcreateserial -days 2 -extfile san.ext -out server.pem;",
        "openssl req ", key,
        " -nodes -subj /CN=client -keyout client.key -out client.csr;",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key",
        " -CAcreateserial -days 2 -out client.pem");
    ASSERT_EQ(Shell(absl::StrCat("(", script, ") >/dev/null 2>&1")), 0)
        << "openssl could not make the test PKI";
    options_.tls_cert_pem = ReadFile(Path("server.pem"));
    options_.tls_key_pem = ReadFile(Path("server.key"));
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

  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }
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
  std::string dir_;
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
  const std::string sse = Curl(absl::StrCat(
      "-d '{\"prompt\": \"x\", \"stream\": true}' ", Url("/v1/completions")));
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
  options_.tls_client_ca_pem = ReadFile(Path("ca.pem"));
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
