#include "tools/client/client_channel.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::client {
namespace {

using ::testing::HasSubstr;

std::string TempFile(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << contents;
  return path;
}

TEST(ClientChannelTest, PlaintextNeedsNoFiles) {
  absl::StatusOr<ClientChannel> channel =
      ClientChannel::Create({.target = "127.0.0.1:1"});
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_NE(channel->channel(), nullptr);
}

TEST(ClientChannelTest, RefusesIncompleteOrUnreadableTlsSettings) {
  absl::StatusOr<ClientChannel> no_key = ClientChannel::Create(
      {.target = "127.0.0.1:1", .tls_ca_file = "x", .tls_cert_file = "c"});
  EXPECT_EQ(no_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_key.status().message(), HasSubstr("--tls_key_file"));

  absl::StatusOr<ClientChannel> no_ca = ClientChannel::Create(
      {.target = "127.0.0.1:1", .tls_cert_file = "c", .tls_key_file = "k"});
  EXPECT_THAT(no_ca.status().message(), HasSubstr("--tls_ca_file"));

  absl::StatusOr<ClientChannel> missing = ClientChannel::Create(
      {.target = "127.0.0.1:1", .tls_ca_file = "/nonexistent/ca.pem"});
  EXPECT_THAT(missing.status().message(),
              HasSubstr("--tls_ca_file: cannot read /nonexistent/ca.pem"));
}

TEST(ClientChannelTest, TokenFileNeedsATokenAndTheTokenIsSent) {
  absl::StatusOr<ClientChannel> empty =
      ClientChannel::Create({.target = "127.0.0.1:1",
                             .auth_token_file = TempFile("empty_token", "\n")});
  EXPECT_THAT(empty.status().message(), HasSubstr("holds no token"));
  absl::StatusOr<ClientChannel> comments = ClientChannel::Create(
      {.target = "127.0.0.1:1",
       .auth_token_file = TempFile("comment_token", "# only a comment\n\n")});
  EXPECT_THAT(comments.status().message(), HasSubstr("holds no token"));

  // The server's format: comments and blank lines before the token.
  absl::StatusOr<ClientChannel> ok = ClientChannel::Create(
      {.target = "127.0.0.1:1",
       .auth_token_file =
           TempFile("token", "# ops team\n\n  s3cret  \nsecond\n")});
  ASSERT_TRUE(ok.ok()) << ok.status();
  grpc::ClientContext context;
  ok->Prepare(&context);  // adds metadata; nothing observable without a call
}

}  // namespace
}  // namespace moeserve::client
