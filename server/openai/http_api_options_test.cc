// --http_port / --http_host, and the options the HTTP API port gets.
#include "server/openai/http_api_options.h"

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/security/bearer_tokens.h"

ABSL_DECLARE_FLAG(int, http_port);
ABSL_DECLARE_FLAG(std::string, http_host);
ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(int, http_head_timeout_s);

namespace moeserve::server::openai {
namespace {

TEST(HttpApiFlags, OffByDefaultOnTheGrpcHost) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_host, "0.0.0.0");
  absl::StatusOr<ServerOptions> o = ServerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->http_port, 0);
  EXPECT_EQ(o->http_host, "0.0.0.0");
  absl::SetFlag(&FLAGS_http_port, 8000);
  absl::SetFlag(&FLAGS_http_host, "127.0.0.1");
  o = ServerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->http_port, 8000);
  EXPECT_EQ(o->http_host, "127.0.0.1");
}

// Issue 29: the head deadline of both HTTP ports, 10 s unless set.
TEST(HttpApiFlags, HeadTimeoutReachesThePortAndIsRangeChecked) {
  absl::FlagSaver saver;
  absl::StatusOr<ServerOptions> o = ServerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(HttpApiOptionsFor(*o, {}).head_timeout_s, 10);
  absl::SetFlag(&FLAGS_http_head_timeout_s, 3);
  o = ServerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(HttpApiOptionsFor(*o, {}).head_timeout_s, 3);
  for (int bad : {0, -1, 3601}) {
    absl::SetFlag(&FLAGS_http_head_timeout_s, bad);
    EXPECT_THAT(std::string(ServerOptionsFromFlags().status().message()),
                ::testing::StartsWith("--http_head_timeout_s:"));
  }
}

TEST(HttpApiFlags, PortOutOfRangeIsRefusedByName) {
  for (int port : {-1, 65536, 1 << 30}) {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_http_port, port);
    absl::StatusOr<ServerOptions> o = ServerOptionsFromFlags();
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status().message()),
                ::testing::StartsWith("--http_port:"));
  }
}

TEST(HttpApiFlags, HostMustBeAnAddress) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_http_port, 8000);
  absl::SetFlag(&FLAGS_http_host, "api.example.com");
  absl::StatusOr<ServerOptions> o = ServerOptionsFromFlags();
  EXPECT_THAT(std::string(o.status().message()),
              ::testing::StartsWith("--http_host:"));
  for (const char* good : {"localhost", "::1", "0.0.0.0"}) {
    absl::SetFlag(&FLAGS_http_host, good);
    EXPECT_TRUE(ServerOptionsFromFlags().ok()) << good;
  }
  // Not checked while the API is off.
  absl::SetFlag(&FLAGS_http_port, 0);
  absl::SetFlag(&FLAGS_http_host, "api.example.com");
  EXPECT_TRUE(ServerOptionsFromFlags().ok());
}

TEST(HttpApiOptionsFor, SameTlsTokensAndABodyBound) {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.http_port = 8000;
  options.limits.max_prompt_bytes = 1000;
  security::SecurityOptions security;
  security.tls_cert_pem = "CERT";
  security.tls_key_pem = "KEY";
  absl::StatusOr<security::BearerTokens> tokens =
      security::BearerTokens::Parse("0123456789abcdef0123\n", "test");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  security.tokens =
      std::make_shared<const security::BearerTokens>(*std::move(tokens));
  const HttpApiOptions http = HttpApiOptionsFor(options, security);
  EXPECT_EQ(http.host, "127.0.0.1");
  EXPECT_EQ(http.port, 8000);
  EXPECT_EQ(http.tls_cert_pem, "CERT");
  EXPECT_EQ(http.tls_key_pem, "KEY");
  EXPECT_EQ(http.max_body_bytes, 2000 + kBodyOverheadBytes);
  ASSERT_TRUE(http.identify);
  EXPECT_FALSE(http.identify("").has_value());
  EXPECT_FALSE(http.identify("Bearer wrong-token-0000000").has_value());
  std::optional<std::string> id = http.identify("Bearer 0123456789abcdef0123");
  ASSERT_TRUE(id.has_value());
  EXPECT_THAT(*id, ::testing::StartsWith("token:"));
  // Without tokens: no check (the caller is the peer).
  security.tokens = nullptr;
  EXPECT_FALSE(HttpApiOptionsFor(options, security).identify);
}

}  // namespace
}  // namespace moeserve::server::openai
