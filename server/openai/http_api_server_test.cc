// The HTTP API server on a loopback port with a fake engine, spoken to in
// raw HTTP/1.1: routes, errors, bodies, auth, server-sent events, a client
// that leaves mid-stream, and shutdown with generations parked.
#include "server/openai/http_api_server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/testing/slowloris.h"
#include "nlohmann/json.hpp"
#include "server/openai/openai_frontend.h"
#include "server/openai/testing/fake_model_host.h"

namespace moeserve::server::openai {
namespace {

using testing::FakeCallState;
using testing::FakeModelHost;
using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef0123";

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval timeout = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n =
        send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

// Reads from `fd` into `got` until it holds `needle`; false when the
// connection ends (or its receive timeout passes) first.
bool RecvUntil(int fd, absl::string_view needle, std::string* got) {
  char buf[4096];
  while (!absl::StrContains(*got, needle)) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    got->append(buf, static_cast<size_t>(n));
  }
  return true;
}

std::string Request(const std::string& method, const std::string& path,
                    const std::string& body,
                    const std::string& extra_headers = "") {
  return absl::StrCat(method, " ", path,
                      " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n",
                      extra_headers,
                      body.empty() && method == "GET"
                          ? ""
                          : absl::StrCat("Content-Type: application/json\r\n"
                                         "Content-Length: ",
                                         body.size(), "\r\n"),
                      "\r\n", body);
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

struct Reply {
  int status = 0;
  std::string head;
  std::string body;
};

Reply Parse(const std::string& raw) {
  Reply r;
  const size_t end = raw.find("\r\n\r\n");
  r.head = raw.substr(0, end);
  r.body = end == std::string::npos ? "" : raw.substr(end + 4);
  if (raw.size() > 12) r.status = std::atoi(raw.substr(9, 3).c_str());
  return r;
}

Reply Fetch(int port, const std::string& method, const std::string& path,
            const std::string& body = "",
            const std::string& extra_headers = "") {
  const int fd = Connect(port);
  SendAll(fd, Request(method, path, body, extra_headers));
  Reply r = Parse(ReadAll(fd));
  close(fd);
  return r;
}

class HttpApiServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpApiOptions options = {}) {
    frontend_ = std::make_unique<OpenAiFrontend>(
        &host_, nullptr, RequestLimits(), "demo",
        ChatTemplate::FromTemplateText("[INST]", "</s>"));
    options.host = "127.0.0.1";
    options.port = 0;
    absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> server =
        OpenAiHttpServer::Start(options, frontend_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    port_ = server_->port();
  }

  // Pushes `text` pieces, then the last with `finish`, once the n-th call
  // started.
  std::thread Feed(size_t n, std::vector<std::string> pieces,
                   v1::FinishReason finish) {
    return std::thread([this, n, pieces, finish] {
      std::shared_ptr<FakeCallState> call = host_.WaitForCall(n);
      ASSERT_NE(call, nullptr);
      for (const std::string& p : pieces) {
        absl::SleepFor(absl::Milliseconds(5));
        call->PushText(p);
      }
      call->PushText("", finish);
    });
  }

  FakeModelHost host_;
  std::unique_ptr<OpenAiFrontend> frontend_;
  std::unique_ptr<OpenAiHttpServer> server_;
  int port_ = 0;
};

TEST_F(HttpApiServerTest, HealthModelsAndRouting) {
  StartServer();
  Reply r = Fetch(port_, "GET", "/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");
  host_.SetReady(absl::UnavailableError("model is loading"));
  r = Fetch(port_, "GET", "/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("loading"));
  host_.SetReady(absl::OkStatus());

  r = Fetch(port_, "GET", "/v1/models");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.head, HasSubstr("application/json"));
  EXPECT_EQ(nlohmann::json::parse(r.body)["data"][0]["id"], "lru");
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models/lru").status, 200);
  r = Fetch(port_, "GET", "/v1/models/gpt-4");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "model_not_found");

  r = Fetch(port_, "GET", "/v2/nothing");
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(nlohmann::json::parse(r.body).contains("error"));
  r = Fetch(port_, "GET", "/v1/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_THAT(r.head, HasSubstr("Allow: POST"));
  EXPECT_EQ(Fetch(port_, "POST", "/v1/models", "{}").status, 405);
}

TEST_F(HttpApiServerTest, NonStreamedCompletion) {
  StartServer();
  std::thread feed = Feed(1, {"The", " LORD"}, v1::LENGTH);
  Reply r = Fetch(port_, "POST", "/v1/completions",
                  R"({"model": "lru", "prompt": "x", "max_tokens": 2})");
  feed.join();
  ASSERT_EQ(r.status, 200) << r.body;
  const nlohmann::json body = nlohmann::json::parse(r.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "The LORD");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_THAT(host_.calls().at(0)->caller(),
              ::testing::StartsWith("peer:http:127.0.0.1:"));
  EXPECT_TRUE(server_->WaitForOpenCalls(absl::Now() + absl::Seconds(5)));
}

TEST_F(HttpApiServerTest, StreamedChatEndsWithDone) {
  StartServer();
  std::thread feed = Feed(1, {"Hel", "lo"}, v1::EOS_TOKEN);
  Reply r = Fetch(port_, "POST", "/v1/chat/completions",
                  R"({"messages": [{"role": "user", "content": "Hi"}],
                      "stream": true})");
  feed.join();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.head, HasSubstr("text/event-stream"));
  EXPECT_THAT(r.body, HasSubstr("chat.completion.chunk"));
  EXPECT_THAT(r.body, HasSubstr("\"role\":\"assistant\""));
  EXPECT_THAT(r.body, HasSubstr("\"content\":\"Hel\""));
  EXPECT_THAT(r.body, HasSubstr("\"finish_reason\":\"stop\""));
  EXPECT_THAT(r.body, HasSubstr("data: [DONE]\n\n"));
  EXPECT_EQ(host_.calls().at(0)->request().prompt(), "[INST] Hi [/INST]");
}

TEST_F(HttpApiServerTest, ErrorsAreOpenAiBodies) {
  StartServer();
  Reply r =
      Fetch(port_, "POST", "/v1/completions", R"({"prompt": "x", "n": 20})");
  EXPECT_EQ(r.status, 400);
  nlohmann::json e = nlohmann::json::parse(r.body)["error"];
  EXPECT_EQ(e["param"], "n");
  EXPECT_EQ(e["type"], "invalid_request_error");
  r = Fetch(port_, "POST", "/v1/completions", "{not json");
  EXPECT_EQ(r.status, 400);
  r = Fetch(port_, "POST", "/v1/completions",
            R"({"model": "x", "prompt": "x"})");
  EXPECT_EQ(r.status, 404);
  host_.SetStartStatus(absl::ResourceExhaustedError("queue is full"));
  r = Fetch(port_, "POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"],
            "rate_limit_exceeded");
  host_.SetStartStatus(absl::OkStatus());
  server_->StartDraining();
  r = Fetch(port_, "POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 503);
}

TEST_F(HttpApiServerTest, BodiesAreBounded) {
  HttpApiOptions options;
  options.max_body_bytes = 100;
  StartServer(options);
  const std::string big =
      absl::StrCat(R"({"prompt": ")", std::string(200, 'a'), "\"}");
  Reply r = Fetch(port_, "POST", "/v1/completions", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_THAT(r.body, HasSubstr("larger than"));
  // Without a Content-Length (chunked), the bound holds as it arrives.
  const int fd = Connect(port_);
  SendAll(fd,
          absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       "Connection: close\r\nTransfer-Encoding: chunked\r\n"
                       "Content-Type: application/json\r\n\r\n",
                       absl::Hex(big.size()), "\r\n", big, "\r\n0\r\n\r\n"));
  r = Parse(ReadAll(fd));
  close(fd);
  EXPECT_EQ(r.status, 413);
}

TEST_F(HttpApiServerTest, TokensAreRequiredButHealthIsOpen) {
  HttpApiOptions options;
  options.identify =
      [](absl::string_view header) -> std::optional<std::string> {
    if (header == absl::StrCat("Bearer ", kToken)) return "token:abc";
    return std::nullopt;
  };
  StartServer(options);
  Reply r = Fetch(port_, "GET", "/v1/models");
  EXPECT_EQ(r.status, 401);
  EXPECT_THAT(r.head, HasSubstr("WWW-Authenticate: Bearer"));
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "invalid_api_key");
  const std::string auth =
      absl::StrCat("Authorization: Bearer ", kToken, "\r\n");
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models", "", auth).status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  EXPECT_EQ(
      Fetch(port_, "POST", "/v1/completions", R"({"prompt": "x"})").status,
      401);
  std::thread feed = Feed(1, {"a"}, v1::LENGTH);
  r = Fetch(port_, "POST", "/v1/completions", R"({"prompt": "x"})", auth);
  feed.join();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(host_.calls().at(0)->caller(), "id:token:abc");
}

TEST_F(HttpApiServerTest, ClientLeavingMidStreamCancelsTheCall) {
  StartServer();
  const int fd = Connect(port_);
  SendAll(fd, Request("POST", "/v1/completions",
                      R"({"prompt": "x", "stream": true})"));
  std::shared_ptr<FakeCallState> call = host_.WaitForCall(1);
  ASSERT_NE(call, nullptr);
  call->PushText("first");
  std::string got;
  ASSERT_TRUE(RecvUntil(fd, "first", &got)) << got;
  EXPECT_EQ(server_->open_calls(), 1);
  close(fd);  // the client goes away mid-stream
  // The server notices when it next writes.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!call->cancelled() && absl::Now() < deadline) {
    call->PushText("more");
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(call->cancelled());
  EXPECT_TRUE(server_->WaitForOpenCalls(absl::Now() + absl::Seconds(5)));
  // The call goes with the response, once libmicrohttpd frees it.
  for (int i = 0; i < 500 && !call->released(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(call->released());
}

// A parked connection is not read by libmicrohttpd: only the hangup watch
// can tell that its client left, with nothing pushed by the engine.
TEST_F(HttpApiServerTest, ClientLeavingAParkedRequestCancelsTheCall) {
  StartServer();
  const char* const kBodies[] = {R"({"prompt": "x"})",
                                 R"({"prompt": "x", "stream": true})"};
  for (int n = 1; n <= 2; ++n) {
    const char* body = kBodies[n - 1];
    SCOPED_TRACE(body);
    const int fd = Connect(port_);
    SendAll(fd, Request("POST", "/v1/completions", body));
    std::shared_ptr<FakeCallState> call = host_.WaitForCall(n);
    ASSERT_NE(call, nullptr);
    close(fd);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!call->cancelled() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_TRUE(call->cancelled());
    EXPECT_TRUE(server_->WaitForOpenCalls(absl::Now() + absl::Seconds(5)));
    for (int i = 0; i < 500 && !call->released(); ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(call->released());
  }
}

TEST_F(HttpApiServerTest, StopEndsParkedGenerations) {
  StartServer();
  const int stream_fd = Connect(port_);
  SendAll(stream_fd, Request("POST", "/v1/completions",
                             R"({"prompt": "x", "stream": true})"));
  const int unary_fd = Connect(port_);
  SendAll(unary_fd, Request("POST", "/v1/completions", R"({"prompt": "y"})"));
  std::shared_ptr<FakeCallState> a = host_.WaitForCall(1);
  std::shared_ptr<FakeCallState> b = host_.WaitForCall(2);
  ASSERT_NE(b, nullptr);
  absl::SleepFor(absl::Milliseconds(100));  // both parked
  EXPECT_EQ(server_->open_calls(), 2);
  EXPECT_FALSE(server_->WaitForOpenCalls(absl::Now() + absl::Milliseconds(50)));
  server_->Stop();
  EXPECT_TRUE(a->cancelled());
  EXPECT_TRUE(b->cancelled());
  EXPECT_EQ(server_->open_calls(), 0);
  ReadAll(stream_fd);
  ReadAll(unary_fd);
  close(stream_fd);
  close(unary_fd);
}

// A cross-site "simple" POST (text/plain, form, multipart) must not start
// a generation: POST bodies are JSON or 415 (issue 29 item 3).
TEST_F(HttpApiServerTest, PostBodiesMustBeJson) {
  StartServer();
  const std::string body = R"({"prompt": "x", "max_tokens": 1})";
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded",
                           "multipart/form-data; boundary=x", "image/png",
                           "application/jsonx", ""}) {
    SCOPED_TRACE(type);
    for (const char* path : {"/v1/completions", "/tokenize"}) {
      const int fd = Connect(port_);
      SendAll(fd, absl::StrCat(
                      "POST ", path,
                      " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n",
                      *type ? absl::StrCat("Content-Type: ", type, "\r\n") : "",
                      "Content-Length: ", body.size(), "\r\n\r\n", body));
      Reply r = Parse(ReadAll(fd));
      close(fd);
      EXPECT_EQ(r.status, 415) << path << " " << r.body;
      ASSERT_TRUE(nlohmann::json::accept(r.body)) << r.body;
      const nlohmann::json e = nlohmann::json::parse(r.body)["error"];
      EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("Content-Type"));
      EXPECT_EQ(e["param"], "Content-Type");
    }
  }
  EXPECT_EQ(host_.calls().size(), 0u);
  // Parameters and case are allowed.
  const int fd = Connect(port_);
  SendAll(fd, absl::StrCat("POST /tokenize HTTP/1.1\r\nHost: x\r\n"
                           "Connection: close\r\n"
                           "Content-Type: Application/JSON; charset=utf-8\r\n"
                           "Content-Length: 15\r\n\r\n{\"prompt\": \"a\"}"));
  EXPECT_EQ(Parse(ReadAll(fd)).status, 200);
  close(fd);
}

// libmicrohttpd 0.9.75 answers a Content-Length that is not a number or
// overflows itself, with its status line and headers twice and an HTML
// page; the connection watch answers it instead: one response, and only
// one, then the end (issue 29 item 4). 2^64 - 1 parses, so it is ours: 413.
TEST_F(HttpApiServerTest, BadContentLengthIsOneCleanResponse) {
  StartServer();
  // The last is refused by libmicrohttpd: the server stops right after it.
  for (const char* length : {"18446744073709551615", "99999999999999999999999",
                             "-1", "12x", "0x10", "18446744073709551616"}) {
    SCOPED_TRACE(length);
    const int fd = Connect(port_);
    SendAll(fd, absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                             "Content-Type: application/json\r\n"
                             "Content-Length: ",
                             length, "\r\n\r\n{}"));
    const std::string raw = ReadAll(fd);
    close(fd);
    int responses = 0;
    for (size_t at = raw.find("HTTP/1."); at != std::string::npos;
         at = raw.find("HTTP/1.", at + 1)) {
      ++responses;
    }
    EXPECT_EQ(responses, 1) << raw;
    const Reply r = Parse(raw);
    EXPECT_TRUE(r.status == 400 || r.status == 413) << raw;
    if (absl::string_view(length) != "18446744073709551615") {  // refused
      EXPECT_THAT(raw, HasSubstr("\"param\":\"Content-Length\"")) << raw;
    }
    EXPECT_THAT(raw, ::testing::Not(HasSubstr("<html")));
  }
}

// GET routes keep the connection: two GETs, pipelined, on one connection
// are both answered (issue 29 item 8).
TEST_F(HttpApiServerTest, GetsKeepTheConnectionAlive) {
  StartServer();
  const int fd = Connect(port_);
  SendAll(fd,
          "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
          "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  RecvUntil(fd, "\"object\":\"list\"", &got);
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(got, HasSubstr("ok\n"));
  EXPECT_THAT(got, HasSubstr("\"object\":\"list\"")) << got;
  EXPECT_THAT(got, ::testing::Not(HasSubstr("Connection: close")));
  // And a third, sent after the two answers, on the same connection.
  got.clear();
  SendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  got = ReadAll(fd);
  EXPECT_THAT(got, HasSubstr("HTTP/1.1 200"));
  close(fd);
}

// A stream still running when the server stops ends as a stream: an error
// event, then [DONE], then the chunked body's end (issue 29 item 8).
TEST_F(HttpApiServerTest, StreamCutByStopEndsWithErrorAndDone) {
  StartServer();
  const int fd = Connect(port_);
  SendAll(fd, Request("POST", "/v1/completions",
                      R"({"prompt": "x", "stream": true})"));
  std::shared_ptr<FakeCallState> call = host_.WaitForCall(1);
  ASSERT_NE(call, nullptr);
  call->PushText("first");
  std::string got;
  ASSERT_TRUE(RecvUntil(fd, "first", &got)) << got;
  server_->StartDraining();
  server_->Stop();  // --drain_seconds are over
  got += ReadAll(fd);
  close(fd);
  EXPECT_TRUE(call->cancelled());
  const size_t error = got.find("data: {\"error\"");
  const size_t done = got.find("data: [DONE]\n\n");
  ASSERT_NE(error, std::string::npos) << got;
  ASSERT_NE(done, std::string::npos) << got;
  EXPECT_LT(error, done);
  EXPECT_THAT(got.substr(error), HasSubstr("shutting down"));
  EXPECT_TRUE(absl::EndsWith(got, "0\r\n\r\n")) << got;  // the last chunk
}

// Issue 29 item 1, as filed: 256 connections from 64 addresses (4 each,
// under the per-address cap of 32) send half a request, then one header
// line every 2 s; the idle cut (5 s) restarts on each, and before the cap
// on requests arriving (64 by default) every /health timed out for as long
// as they went on. With the server's defaults, a fresh client's /health
// must be answered throughout (bound 5 s for loaded or sanitized machines;
// the latency is printed).
TEST_F(HttpApiServerTest, SlowlorisFromManyAddressesDoesNotStallHealth) {
  StartServer();  // the defaults --http_port runs with
  metrics::testing::Slowloris attack(port_, 256, 64, absl::Seconds(2));
  absl::SleepFor(absl::Milliseconds(500));  // the attack is in
  absl::Duration slowest;
  int probes = 0;
  for (const absl::Time end = absl::Now() + absl::Seconds(3); absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(100))) {
    const metrics::testing::Probe p =
        metrics::testing::ProbeGet(port_, "/health");
    ++probes;
    EXPECT_EQ(p.status, 200) << "probe " << probes << ", after " << p.latency;
    EXPECT_LT(p.latency, absl::Seconds(5));
    slowest = std::max(slowest, p.latency);
  }
  const OpenAiHttpServer::SlowCuts cuts = server_->slow_cuts();
  std::printf(
      "HTTP API port under slowloris (256 connections from 64 addresses, a "
      "header line every 2 s, default bounds): %d /health probes, slowest "
      "%.1f ms; cut %d over the cap of 64 arriving; the attack reopened %d\n",
      probes, absl::ToDoubleMilliseconds(slowest), cuts.too_many,
      attack.reopened());
  EXPECT_GT(cuts.too_many, 0);
}

// Issue 29 item 1: a body that trickles in below min_body_bytes_per_s is
// cut once the grace (head_timeout_s) is over; the idle cut alone never
// ends it. And a trickled head on a kept-alive connection is cut too.
TEST_F(HttpApiServerTest, TrickledBodyAndHeadAreCut) {
  HttpApiOptions options;
  options.head_timeout_s = 1;
  options.min_body_bytes_per_s = 100;
  StartServer(options);
  const int fd = Connect(port_);
  SendAll(fd,
          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
          "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n");
  const absl::Time start = absl::Now();
  bool cut = false;
  char buf[512];
  while (!cut && absl::Now() - start < absl::Seconds(6)) {
    absl::SleepFor(absl::Milliseconds(300));
    cut = send(fd, " ", 1, MSG_NOSIGNAL) <= 0 ||
          recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == 0;
  }
  const absl::Duration body_took = absl::Now() - start;
  close(fd);
  EXPECT_TRUE(cut) << "a body of 3 bytes/s was not cut in " << body_took;
  EXPECT_LT(body_took, absl::Seconds(5));
  EXPECT_EQ(server_->slow_cuts().body, 1);

  // Keep-alive: the second request's head has its own deadline.
  const int kept = Connect(port_);
  SendAll(kept, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  ASSERT_TRUE(RecvUntil(kept, "ok\n", &got)) << got;
  const absl::Time head_start = absl::Now();
  SendAll(kept, "GET /health HTTP/1.1\r\nHost: x\r\n");
  cut = false;
  for (int line = 0; !cut && absl::Now() - head_start < absl::Seconds(6);
       ++line) {
    absl::SleepFor(absl::Milliseconds(300));
    const std::string header = absl::StrCat("X-", line, ": a\r\n");
    cut = send(kept, header.data(), header.size(), MSG_NOSIGNAL) <= 0 ||
          recv(kept, buf, sizeof(buf), MSG_DONTWAIT) == 0;
  }
  const absl::Duration head_took = absl::Now() - head_start;
  close(kept);
  EXPECT_TRUE(cut) << "a trickled head was not cut in " << head_took;
  EXPECT_LT(head_took, absl::Seconds(5));
  EXPECT_EQ(server_->slow_cuts().head, 1);
  std::printf(
      "a body at 3 B/s cut after %.2f s (grace 1 s, minimum 100 B/s); "
      "a second request's head, a line every 0.3 s, cut after %.2f s "
      "(head deadline 1 s)\n",
      absl::ToDoubleSeconds(body_took), absl::ToDoubleSeconds(head_took));
}

TEST(HttpApiServer, RefusesBadOptions) {
  FakeModelHost host;
  OpenAiFrontend frontend(&host, nullptr, RequestLimits(), "demo",
                          absl::FailedPreconditionError("none"));
  HttpApiOptions options;
  options.host = "not-an-address";
  EXPECT_EQ(OpenAiHttpServer::Start(options, &frontend).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.host = "127.0.0.1";
  options.head_timeout_s = 0;
  EXPECT_EQ(OpenAiHttpServer::Start(options, &frontend).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.head_timeout_s = 10;
  options.tls_cert_pem = "x";
  EXPECT_EQ(OpenAiHttpServer::Start(options, &frontend).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moeserve::server::openai
