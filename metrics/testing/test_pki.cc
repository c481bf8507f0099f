#include "metrics/testing/test_pki.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::metrics::testing {

int Shell(const std::string& command, std::string* out) {
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

std::unique_ptr<TestPki> TestPki::Make(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto pki = std::unique_ptr<TestPki>(
      new TestPki(absl::StrCat(tmp ? tmp : "/tmp", "/", name, "_", getpid())));
  const std::string& d = pki->dir_;
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
  const std::string script = absl::StrCat(
      "set -e; mkdir -p ", d, "; cd ", d, ";", "openssl req -x509 ", key,
      " -nodes -days 2 -subj /CN=test-ca", " -keyout ca.key -out ca.pem;",
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext;",
      "openssl req ", key, " -nodes -subj /CN=localhost -keyout server.key",
      " -out server.csr;",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key",
      " -CAcreateserial -days 2 -extfile san.ext -out server.pem;",
      "openssl req ", key, " -nodes -subj /CN=test-client",
      " -keyout client.key -out client.csr;",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key",
      " -CAcreateserial -days 2 -out client.pem;", "openssl req -x509 ", key,
      " -nodes -days 2 -subj /CN=rogue", " -keyout rogue.key -out rogue.pem");
  if (Shell(absl::StrCat("(", script, ") >/dev/null 2>&1")) != 0) {
    return nullptr;
  }
  return pki;
}

std::string TestPki::Path(const std::string& file) const {
  return absl::StrCat(dir_, "/", file);
}

std::string TestPki::Pem(const std::string& file) const {
  return ReadFile(Path(file));
}

}  // namespace moeserve::metrics::testing
