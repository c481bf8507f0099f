#include "server/security/bearer_tokens.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/security/constant_time.h"

namespace moeserve::server::security {
namespace {

constexpr char kA[] = "tok-aaaaaaaaaaaaaaaa";
constexpr char kB[] = "tok/bbbbbbbbbbbbbbbb==";

TEST(ConstantTimeTest, EqualsOnlyWhenEqual) {
  EXPECT_TRUE(ConstantTimeEquals(kA, kA));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals(kA, kB));
  EXPECT_FALSE(ConstantTimeEquals(kA, "tok-aaaaaaaaaaaaaaab"));  // last byte
  EXPECT_FALSE(ConstantTimeEquals(kA, "tok-aaaaaaaaaaaaaaa"));   // a prefix
  EXPECT_FALSE(ConstantTimeEquals(kA, ""));
  // Embedded NULs count: no C-string comparison underneath.
  EXPECT_FALSE(
      ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(ConstantTimeTest, DigestIsSha256) {
  // SHA-256("abc"), FIPS 180-2 appendix B.1.
  const Sha256Digest d = Sha256("abc");
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[1], 0x78);
  EXPECT_EQ(d[31], 0xad);
}

TEST(BearerTokensTest, ParsesLinesCommentsAndSpaces) {
  absl::StatusOr<BearerTokens> tokens = BearerTokens::Parse(
      absl::StrCat("# ops tokens\n\n  ", kA, "  \r\n", kB, "\n"), "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 2);
  const std::optional<std::string> a = tokens->Identify(kA);
  const std::optional<std::string> b = tokens->Identify(kB);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(absl::StartsWith(*a, "token:")) << *a;
  EXPECT_EQ(a->size(), 6 + 12);
  // The identity never contains the token.
  EXPECT_FALSE(absl::StrContains(*a, "aaaa"));
  EXPECT_FALSE(tokens->Identify("tok-aaaaaaaaaaaaaaab").has_value());
  EXPECT_FALSE(tokens->Identify("").has_value());
}

TEST(BearerTokensTest, IdentityIsStableAcrossOrder) {
  auto one = BearerTokens::Parse(absl::StrCat(kA, "\n", kB), "f");
  auto two = BearerTokens::Parse(absl::StrCat(kB, "\n", kA), "f");
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ(one->Identify(kA), two->Identify(kA));
}

TEST(BearerTokensTest, AuthorizationHeader) {
  auto tokens = BearerTokens::Parse(kA, "f");
  ASSERT_TRUE(tokens.ok());
  EXPECT_TRUE(tokens->IdentifyAuthorization(absl::StrCat("Bearer ", kA)));
  EXPECT_TRUE(tokens->IdentifyAuthorization(absl::StrCat("bearer  ", kA)));
  EXPECT_FALSE(tokens->IdentifyAuthorization(kA));  // no scheme
  EXPECT_FALSE(tokens->IdentifyAuthorization(absl::StrCat("Basic ", kA)));
  EXPECT_FALSE(tokens->IdentifyAuthorization("Bearer "));
  EXPECT_FALSE(tokens->IdentifyAuthorization(""));
}

// Each refusal names the line and the rule, never the token.
void ExpectRefused(const std::string& contents, const std::string& reason) {
  absl::StatusOr<BearerTokens> tokens = BearerTokens::Parse(contents, "f");
  ASSERT_FALSE(tokens.ok()) << contents;
  EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tokens.status().message(), reason))
      << tokens.status();
  for (const char* secret : {"short", "has space", "tok-aaaaaaaaaaaaaaaa"}) {
    EXPECT_FALSE(absl::StrContains(tokens.status().message(), secret))
        << tokens.status();
  }
}

TEST(BearerTokensTest, RefusesBadFiles) {
  ExpectRefused("", "holds no token");
  ExpectRefused("# only a comment\n\n   \n", "holds no token");
  ExpectRefused("short\n", "f line 1: a token must be 16 to 4096");
  ExpectRefused(absl::StrCat("# c\n", "has space in the token text\n"),
                "f line 2: a token may hold only");
  ExpectRefused("tok=aaaaaaaaaaaaaaaaaa\n", "may hold only");  // '=' inside
  ExpectRefused(absl::StrCat(kA, "\n", kB, "\n", kA, "\n"),
                "f line 3: repeats the token of line 1");
  ExpectRefused(std::string(5000, 'x'), "this one has 5000");
}

TEST(BearerTokensTest, LoadFileReadsAndRefusesWithReason) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/tokens.txt");
  std::ofstream(path) << kA << "\n";
  absl::StatusOr<BearerTokens> tokens = BearerTokens::LoadFile(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_TRUE(tokens->Identify(kA).has_value());

  absl::StatusOr<BearerTokens> missing =
      BearerTokens::LoadFile(path + ".missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(),
                                "cannot read --auth_token_file"))
      << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(),
                                "No such file or directory"))
      << missing.status();

  std::ofstream(path, std::ios::trunc) << "\n";
  absl::StatusOr<BearerTokens> empty = BearerTokens::LoadFile(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(absl::StrContains(empty.status().message(), "holds no token"))
      << empty.status();
}

}  // namespace
}  // namespace moeserve::server::security
