#include "server/security/security_options.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/security/grpc_credentials.h"

namespace moeserve::server::security {
namespace {

// Two unrelated self-signed certificates with their keys, made by `openssl`
// once for the suite, and a token file.
class SecurityOptionsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = new std::string(absl::StrCat(tmp ? tmp : "/tmp", "/sec_", getpid()));
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", *dir_, "; cd ", *dir_, ";", "openssl req -x509 ",
        key, " -nodes -days 2 -subj /CN=one", " -keyout one.key -out one.pem;",
        "openssl req -x509 ", key, " -nodes -days 2 -subj /CN=two",
        " -keyout two.key -out two.pem;",
        "echo 'not a certificate' > junk.pem;",
        "echo tok-aaaaaaaaaaaaaaaa > tokens.txt; : > empty.txt");
    const int status =
        std::system(absl::StrCat("(", script, ") >/dev/null 2>&1").c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "openssl could not make the test certificates";
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string F(const std::string& name) {
    return absl::StrCat(*dir_, "/", name);
  }
  static void ExpectRefused(const SecurityFiles& files,
                            const std::string& reason) {
    absl::StatusOr<SecurityOptions> o = LoadSecurityOptions(files);
    ASSERT_FALSE(o.ok()) << reason;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(o.status().message(), reason)) << o.status();
  }

  static std::string* dir_;
};

std::string* SecurityOptionsTest::dir_ = nullptr;

TEST_F(SecurityOptionsTest, NothingSetIsPlaintextWithoutAuth) {
  absl::StatusOr<SecurityOptions> o = LoadSecurityOptions({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->tls());
  EXPECT_FALSE(o->mtls());
  EXPECT_EQ(o->tokens, nullptr);
  EXPECT_NE(MakeGrpcServerCredentials(*o), nullptr);
}

TEST_F(SecurityOptionsTest, LoadsTlsMtlsAndTokens) {
  SecurityFiles f;
  f.tls_cert_file = F("one.pem");
  f.tls_key_file = F("one.key");
  f.tls_client_ca_file = F("two.pem");
  f.auth_token_file = F("tokens.txt");
  f.metrics_auth = true;
  absl::StatusOr<SecurityOptions> o = LoadSecurityOptions(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->tls());
  EXPECT_TRUE(o->mtls());
  EXPECT_TRUE(absl::StartsWith(o->tls_cert_pem, "-----BEGIN CERTIFICATE"));
  ASSERT_NE(o->tokens, nullptr);
  EXPECT_TRUE(o->tokens->Identify("tok-aaaaaaaaaaaaaaaa").has_value());
  EXPECT_TRUE(o->metrics_auth);
  EXPECT_NE(MakeGrpcServerCredentials(*o), nullptr);
  f.tls_client_ca_file.clear();
  f.auth_token_file.clear();
  f.metrics_auth = false;
  o = LoadSecurityOptions(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_NE(MakeGrpcServerCredentials(*o), nullptr);
}

TEST_F(SecurityOptionsTest, RefusesBadCombinations) {
  SecurityFiles f;
  f.tls_cert_file = F("one.pem");
  ExpectRefused(f, "--tls_cert_file and --tls_key_file go together");
  f = SecurityFiles();
  f.tls_key_file = F("one.key");
  ExpectRefused(f, "--tls_cert_file and --tls_key_file go together");
  f = SecurityFiles();
  f.tls_client_ca_file = F("two.pem");
  ExpectRefused(f, "--tls_client_ca_file needs --tls_cert_file");
  f = SecurityFiles();
  f.metrics_auth = true;
  ExpectRefused(f, "--metrics_auth needs --auth_token_file");
}

TEST_F(SecurityOptionsTest, RefusesBadFilesWithTheReason) {
  SecurityFiles f;
  f.tls_cert_file = F("missing.pem");
  f.tls_key_file = F("one.key");
  ExpectRefused(f, "cannot read --tls_cert_file");
  f.tls_cert_file = F("junk.pem");
  ExpectRefused(f, "holds no PEM certificate");
  f.tls_cert_file = F("one.pem");
  f.tls_key_file = F("junk.pem");
  ExpectRefused(f, "holds no unencrypted PEM private key");
  f.tls_key_file = F("two.key");
  ExpectRefused(f, "is not the key of --tls_cert_file");
  f.tls_key_file = F("one.key");
  f.tls_client_ca_file = F("junk.pem");
  ExpectRefused(f, "--tls_client_ca_file");
  f.tls_client_ca_file.clear();
  f.auth_token_file = F("empty.txt");
  ExpectRefused(f, "holds no token");
  f.auth_token_file = F("missing.txt");
  ExpectRefused(f, "cannot read --auth_token_file");
}

TEST(ExposureWarningTest, WarnsBeyondLoopbackOnly) {
  SecurityOptions none;
  EXPECT_EQ(ExposureWarning("127.0.0.1", none), "");
  EXPECT_EQ(ExposureWarning("127.1.2.3", none), "");
  EXPECT_EQ(ExposureWarning("::1", none), "");
  EXPECT_EQ(ExposureWarning("localhost", none), "");
  EXPECT_TRUE(absl::StrContains(ExposureWarning("0.0.0.0", none),
                                "neither TLS nor authentication"));
  EXPECT_TRUE(absl::StrContains(ExposureWarning("::", none),
                                "neither TLS nor authentication"));
  EXPECT_TRUE(absl::StrContains(ExposureWarning("10.0.0.5", none),
                                "neither TLS nor authentication"));
  SecurityOptions tls_and_tokens;
  tls_and_tokens.tls_cert_pem = "x";
  auto tokens = BearerTokens::Parse("tok-aaaaaaaaaaaaaaaa", "f");
  ASSERT_TRUE(tokens.ok());
  tls_and_tokens.tokens = std::make_shared<const BearerTokens>(*tokens);
  EXPECT_EQ(ExposureWarning("0.0.0.0", tls_and_tokens), "");
  SecurityOptions tokens_only = tls_and_tokens;
  tokens_only.tls_cert_pem.clear();
  EXPECT_TRUE(
      absl::StrContains(ExposureWarning("0.0.0.0", tokens_only), "plaintext"));
}

TEST(OpenMethodTest, HealthAndReflectionOnly) {
  EXPECT_TRUE(IsOpenMethod("/grpc.health.v1.Health/Check"));
  EXPECT_TRUE(IsOpenMethod("/grpc.health.v1.Health/Watch"));
  EXPECT_TRUE(IsOpenMethod(
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"));
  EXPECT_FALSE(IsOpenMethod("/moeserve.v1.Inference/Generate"));
  EXPECT_FALSE(IsOpenMethod("/grpc.health.v1.HealthX/Check"));
  EXPECT_FALSE(IsOpenMethod(""));
}

}  // namespace
}  // namespace moeserve::server::security
