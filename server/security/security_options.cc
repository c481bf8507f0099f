#include "server/security/security_options.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain (leaf first) to serve TLS with, on the gRPC "
          "port and the metrics port; needs --tls_key_file.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificate(s): clients must present a certificate signed "
          "by one (mTLS) on both ports; needs --tls_cert_file.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of accepted API tokens, one per line (# comments allowed). "
          "gRPC calls must send 'authorization: Bearer <token>' "
          "(UNAUTHENTICATED otherwise); health and reflection stay open.");
ABSL_FLAG(bool, metrics_auth, false,
          "Require a token from --auth_token_file on /metrics and /healthz "
          "too (401 otherwise).");

namespace moeserve::server::security {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const std::string& flag,
                                    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read --", flag, " ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  if (pem.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " ", path, " is larger than ", kMaxPemBytes, " bytes"));
  }
  return pem;
}

// OpenSSL's reason for the last failure, or `fallback`.
std::string OpenSslReason(const char* fallback) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  const char* reason = code ? ERR_reason_error_string(code) : nullptr;
  return reason ? reason : fallback;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;

Bio MemBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of `pem`, or an error naming the flag and file.
absl::StatusOr<Cert> FirstCertificate(const std::string& pem,
                                      const std::string& flag,
                                      const std::string& path) {
  Bio bio = MemBio(pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, " holds no PEM certificate (",
                     OpenSslReason("unreadable"), ")"));
  }
  return cert;
}

absl::Status CheckKeyMatches(const SecurityOptions& o,
                             const SecurityFiles& files) {
  absl::StatusOr<Cert> cert =
      FirstCertificate(o.tls_cert_pem, "tls_cert_file", files.tls_cert_file);
  if (!cert.ok()) return cert.status();
  Bio bio = MemBio(o.tls_key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key_file ", files.tls_key_file,
                     " holds no unencrypted PEM private key (",
                     OpenSslReason("unreadable"), ")"));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key_file ", files.tls_key_file,
        " is not the key of --tls_cert_file ", files.tls_cert_file));
  }
  return absl::OkStatus();
}

absl::Status CheckCombination(const SecurityFiles& f) {
  if (f.tls_cert_file.empty() != f.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together");
  }
  if (!f.tls_client_ca_file.empty() && f.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_client_ca_file needs --tls_cert_file and --tls_key_file "
        "(mTLS is TLS)");
  }
  if (f.metrics_auth && f.auth_token_file.empty()) {
    return absl::InvalidArgumentError("--metrics_auth needs --auth_token_file");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SecurityOptions> LoadSecurityOptions(
    const SecurityFiles& files) {
  if (absl::Status st = CheckCombination(files); !st.ok()) return st;
  SecurityOptions o;
  o.metrics_auth = files.metrics_auth;
  if (!files.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPem("tls_cert_file", files.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPem("tls_key_file", files.tls_key_file);
    if (!key.ok()) return key.status();
    o.tls_cert_pem = *std::move(cert);
    o.tls_key_pem = *std::move(key);
    if (absl::Status st = CheckKeyMatches(o, files); !st.ok()) return st;
  }
  if (!files.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPem("tls_client_ca_file", files.tls_client_ca_file);
    if (!ca.ok()) return ca.status();
    absl::StatusOr<Cert> first =
        FirstCertificate(*ca, "tls_client_ca_file", files.tls_client_ca_file);
    if (!first.ok()) return first.status();
    o.tls_client_ca_pem = *std::move(ca);
  }
  if (!files.auth_token_file.empty()) {
    absl::StatusOr<BearerTokens> tokens =
        BearerTokens::LoadFile(files.auth_token_file);
    if (!tokens.ok()) return tokens.status();
    o.tokens = std::make_shared<const BearerTokens>(*std::move(tokens));
  }
  return o;
}

absl::StatusOr<SecurityOptions> SecurityOptionsFromFlags() {
  SecurityFiles files;
  files.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  files.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  files.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  files.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  files.metrics_auth = absl::GetFlag(FLAGS_metrics_auth);
  return LoadSecurityOptions(files);
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost") return true;
  const std::string literal(host);
  in_addr v4;
  if (inet_pton(AF_INET, literal.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  return inet_pton(AF_INET6, literal.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

std::string ExposureWarning(absl::string_view host,
                            const SecurityOptions& options) {
  if (IsLoopbackHost(host)) return "";
  const bool auth = options.tokens != nullptr || options.mtls();
  if (!options.tls() && !auth) {
    return absl::StrCat(
        "listening on ", host,
        " (beyond loopback) with neither TLS nor authentication: anyone who "
        "can reach the ports can run and abort requests. See "
        "--tls_cert_file, --tls_key_file, --tls_client_ca_file, "
        "--auth_token_file.");
  }
  if (!options.tls()) {
    return absl::StrCat("listening on ", host,
                        " (beyond loopback) without TLS: API tokens travel "
                        "in plaintext. See --tls_cert_file.");
  }
  if (!auth) {
    return absl::StrCat("listening on ", host,
                        " (beyond loopback) with TLS but no authentication: "
                        "any client can call. See --auth_token_file or "
                        "--tls_client_ca_file.");
  }
  return "";
}

}  // namespace moeserve::server::security
