#include "server/security/constant_time.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace moeserve::server::security {

Sha256Digest Sha256(absl::string_view data) {
  Sha256Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         digest.data());
  return digest;
}

bool DigestsEqual(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  return DigestsEqual(Sha256(a), Sha256(b));
}

}  // namespace moeserve::server::security
