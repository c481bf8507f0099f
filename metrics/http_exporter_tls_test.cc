// MetricsHttpServer over HTTPS, mTLS and with a bearer-token check, driven
// by curl with certificates that `openssl` makes for this test run.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "metrics/http_exporter.h"
#include "metrics/testing/test_pki.h"

namespace moeserve::metrics {
namespace {

using testing::Shell;
using testing::TestPki;

// curl's HTTP status for `url` ("000" when no HTTP answer came), with
// `args` (certificates, headers) added.
std::string CurlStatus(const std::string& url, const std::string& args) {
  std::string out;
  Shell(absl::StrCat("curl -s --max-time 10 -o /dev/null -w '%{http_code}' ",
                     args, " '", url, "'"),
        &out);
  return out;
}

class HttpsExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = TestPki::Make();
    ASSERT_NE(pki_, nullptr) << "openssl could not make the test PKI";
    options_.tls_cert_pem = pki_->Pem("server.pem");
    options_.tls_key_pem = pki_->Pem("server.key");
  }
  std::string Url(const MetricsHttpServer& server, const char* path) const {
    return absl::StrCat("https://127.0.0.1:", server.port(), path);
  }
  std::string Ca() const {
    return absl::StrCat("--cacert ", pki_->Path("ca.pem"));
  }

  std::unique_ptr<TestPki> pki_;
  HttpExporterOptions options_;
  Registry registry_;
};

TEST_F(HttpsExporterTest, ServesOverTlsOnly) {
  auto server = MetricsHttpServer::Start(options_, &registry_, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(CurlStatus(Url(**server, "/healthz"), Ca()), "200");
  EXPECT_EQ(CurlStatus(Url(**server, "/metrics"), Ca()), "200");
  // Not trusted without the CA; plain HTTP gets no HTTP answer.
  EXPECT_EQ(CurlStatus(Url(**server, "/healthz"), ""), "000");
  EXPECT_EQ(
      CurlStatus(
          absl::StrCat("http://127.0.0.1:", (*server)->port(), "/healthz"), ""),
      "000");
}

TEST_F(HttpsExporterTest, ClientCaRequiresSignedClientCertificate) {
  options_.tls_client_ca_pem = pki_->Pem("ca.pem");
  auto server = MetricsHttpServer::Start(options_, &registry_, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string client =
      absl::StrCat(Ca(), " --cert ", pki_->Path("client.pem"), " --key ",
                   pki_->Path("client.key"));
  EXPECT_EQ(CurlStatus(Url(**server, "/healthz"), client), "200");
  const std::string no_cert = CurlStatus(Url(**server, "/healthz"), Ca());
  EXPECT_TRUE(no_cert == "403" || no_cert == "000") << no_cert;
  // A certificate the CA did not sign.
  const std::string rogue =
      CurlStatus(Url(**server, "/healthz"),
                 absl::StrCat(Ca(), " --cert ", pki_->Path("rogue.pem"),
                              " --key ", pki_->Path("rogue.key")));
  EXPECT_TRUE(rogue == "403" || rogue == "000") << rogue;
}

TEST_F(HttpsExporterTest, AuthorizeRefusesWith401) {
  options_.authorize = [](absl::string_view authorization) {
    return authorization == "Bearer good-token-0123456789";
  };
  auto server = MetricsHttpServer::Start(options_, &registry_, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(CurlStatus(Url(**server, "/metrics"), Ca()), "401");
  EXPECT_EQ(CurlStatus(Url(**server, "/healthz"),
                       absl::StrCat(Ca(), " -H 'Authorization: Bearer bad'")),
            "401");
  EXPECT_EQ(CurlStatus(Url(**server, "/metrics"),
                       absl::StrCat(Ca(),
                                    " -H 'Authorization: Bearer "
                                    "good-token-0123456789'")),
            "200");
  std::string headers;
  Shell(absl::StrCat("curl -s -D - -o /dev/null ", Ca(), " '",
                     Url(**server, "/metrics"), "'"),
        &headers);
  EXPECT_TRUE(absl::StrContains(headers, "WWW-Authenticate: Bearer"))
      << headers;
}

// Clients that connect and never start the TLS handshake hold no thread:
// a probe from another address is answered at once.
TEST_F(HttpsExporterTest, SilentConnectionsDoNotStallHandshakes) {
  // Silent connections would be cut only after 60 s (idle and head
  // deadlines): a probe answered well before that did not wait for them.
  options_.idle_timeout_s = 60;
  options_.head_timeout_s = 60;
  auto server = MetricsHttpServer::Start(options_, &registry_, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> silent;
  for (int i = 0; i < 32; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in from = {};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.2", &from.sin_addr);
    sockaddr_in to = {};
    to.sin_family = AF_INET;
    to.sin_port = htons((*server)->port());
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    silent.push_back(fd);
  }
  const absl::Time start = absl::Now();
  EXPECT_EQ(CurlStatus(Url(**server, "/healthz"), Ca()), "200");
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(20));
  std::fprintf(stderr, "probe answered in %.3f s beside 32 silent ones\n",
               absl::ToDoubleSeconds(took));
  for (int fd : silent) close(fd);
}

TEST_F(HttpsExporterTest, KeyThatIsNotPemIsRefusedAtStart) {
  options_.tls_key_pem = "not a key";
  auto server = MetricsHttpServer::Start(options_, &registry_, nullptr);
  EXPECT_FALSE(server.ok());
}

}  // namespace
}  // namespace moeserve::metrics
