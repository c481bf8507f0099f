#include "metrics/http_exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moeserve::metrics {
namespace {

struct HttpResponse {
  int status = 0;
  std::string headers;  // raw, including the status line
  std::string body;
};

// One HTTP/1.0 request over a plain socket; the server closes when done.
HttpResponse Fetch(int port, const std::string& method,
                   const std::string& path) {
  HttpResponse response;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return response;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return response;
  }
  const std::string request =
      absl::StrCat(method, " ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  (void)!write(fd, request.data(), request.size());
  std::string raw;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) raw.append(buf, n);
  close(fd);
  const size_t split = raw.find("\r\n\r\n");
  if (split == std::string::npos) return response;
  response.headers = raw.substr(0, split);
  response.body = raw.substr(split + 4);
  // "HTTP/1.1 200 OK"
  if (response.headers.size() > 12) {
    (void)absl::SimpleAtoi(response.headers.substr(9, 3), &response.status);
  }
  return response;
}

// One server for the suite: each civetweb shutdown costs about two seconds.
class HttpExporterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    registry_ = new Registry;
    healthy_ = new std::atomic<bool>(true);
    Counter* c = *(*registry_->AddCounter("moeserve_x_total", "X.", {"policy"}))
                      ->WithLabels({"lru"});
    c->Inc(42);
    auto server = MetricsHttpServer::Start("127.0.0.1", 0, registry_,
                                           [] { return healthy_->load(); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    ASSERT_GT(server_->port(), 0);
  }
  static void TearDownTestSuite() {
    delete server_;  // before what its handlers use
    delete healthy_;
    delete registry_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    *healthy_ = true;
  }

  static Registry* registry_;
  static std::atomic<bool>* healthy_;
  static MetricsHttpServer* server_;
};

Registry* HttpExporterTest::registry_ = nullptr;
std::atomic<bool>* HttpExporterTest::healthy_ = nullptr;
MetricsHttpServer* HttpExporterTest::server_ = nullptr;

TEST_F(HttpExporterTest, ServesMetrics) {
  const HttpResponse r = Fetch(server_->port(), "GET", "/metrics");
  EXPECT_EQ(r.status, 200) << r.headers;
  EXPECT_TRUE(absl::StrContains(
      r.headers, "Content-Type: text/plain; version=0.0.4; charset=utf-8"))
      << r.headers;
  EXPECT_EQ(r.body, registry_->Serialize());
  EXPECT_TRUE(
      absl::StrContains(r.body, "moeserve_x_total{policy=\"lru\"} 42\n"))
      << r.body;
}

TEST_F(HttpExporterTest, MetricsReflectLaterUpdates) {
  (*(*registry_->AddGauge("later", "L.", {}))->WithLabels({}))->Set(7);
  const HttpResponse r = Fetch(server_->port(), "GET", "/metrics");
  EXPECT_TRUE(absl::StrContains(r.body, "\nlater 7\n")) << r.body;
}

TEST_F(HttpExporterTest, HealthzFollowsCallback) {
  HttpResponse r = Fetch(server_->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok");
  *healthy_ = false;
  r = Fetch(server_->port(), "GET", "/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "not ready");
}

TEST_F(HttpExporterTest, UnknownPathIs404) {
  EXPECT_EQ(Fetch(server_->port(), "GET", "/").status, 404);
  EXPECT_EQ(Fetch(server_->port(), "GET", "/metricsx").status, 404);
  EXPECT_EQ(Fetch(server_->port(), "GET", "/metrics/x").status, 404);
}

TEST_F(HttpExporterTest, OtherMethodsAre405) {
  const HttpResponse r = Fetch(server_->port(), "POST", "/metrics");
  EXPECT_EQ(r.status, 405);
  EXPECT_TRUE(absl::StrContains(r.headers, "Allow: GET, HEAD"));
}

TEST_F(HttpExporterTest, PortInUseIsError) {
  auto second = MetricsHttpServer::Start("127.0.0.1", server_->port(),
                                         registry_, nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  // The first server is unaffected.
  EXPECT_EQ(Fetch(server_->port(), "GET", "/healthz").status, 200);
}

TEST(HttpExporterStartTest, PortHeldByOtherSocketIsError) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  Registry registry;
  auto server = MetricsHttpServer::Start("127.0.0.1", ntohs(addr.sin_port),
                                         &registry, nullptr);
  EXPECT_FALSE(server.ok());
  close(fd);
}

TEST(HttpExporterStartTest, BadPortIsInvalidArgument) {
  Registry registry;
  EXPECT_EQ(MetricsHttpServer::Start("127.0.0.1", 70000, &registry, nullptr)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Also covers Stop(): the port is closed afterwards, and Stop() twice (the
// destructor stops again) is fine.
TEST(HttpExporterStartTest, EmptyHealthCallbackMeansHealthyThenStop) {
  Registry registry;
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_EQ(Fetch(port, "GET", "/healthz").status, 200);
  (*server)->Stop();
  (*server)->Stop();
  EXPECT_EQ(Fetch(port, "GET", "/healthz").status, 0);  // connection refused
}

}  // namespace
}  // namespace moeserve::metrics
