// Test-only: a throwaway PKI made by `openssl` for the HTTP servers' TLS
// tests (metrics/http_exporter_tls_test, server/openai/http_api_tls_test),
// plus the shell and file helpers they drive curl with.
#ifndef MOESERVE_METRICS_TESTING_TEST_PKI_H_
#define MOESERVE_METRICS_TESTING_TEST_PKI_H_

#include <memory>
#include <string>

namespace moeserve::metrics::testing {

// Runs `command` with sh; returns its exit status and, through `out`, its
// standard output.
int Shell(const std::string& command, std::string* out = nullptr);

// The whole file ("" when it cannot be read).
std::string ReadFile(const std::string& path);

// A CA, a server certificate for localhost / 127.0.0.1 and a client
// certificate, signed by the CA, and a self-signed "rogue" one (P-256 keys:
// quick to make), in a fresh directory under $TEST_TMPDIR: ca.pem, ca.key,
// server.pem, server.key, client.pem, client.key, rogue.pem, rogue.key.
class TestPki {
 public:
  // Null when openssl failed. `name` tells tests of one process apart.
  static std::unique_ptr<TestPki> Make(const std::string& name = "pki");

  std::string Path(const std::string& file) const;
  std::string Pem(const std::string& file) const;

 private:
  explicit TestPki(std::string dir) : dir_(std::move(dir)) {}
  const std::string dir_;
};

}  // namespace moeserve::metrics::testing

#endif  // MOESERVE_METRICS_TESTING_TEST_PKI_H_
