// Comparison of secrets (API tokens) whose running time tells an attacker
// nothing about the secret: both sides are hashed with SHA-256 and the
// digests compared with OpenSSL's CRYPTO_memcmp, which reads every byte.
// Hashing first also hides the secret's length. Thread-safe (no state).
#ifndef MOESERVE_SERVER_SECURITY_CONSTANT_TIME_H_
#define MOESERVE_SERVER_SECURITY_CONSTANT_TIME_H_

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace moeserve::server::security {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest Sha256(absl::string_view data);

// a == b, in time that depends on neither's content.
bool DigestsEqual(const Sha256Digest& a, const Sha256Digest& b);

// a == b for secrets: compares SHA-256(a) with SHA-256(b) in constant time.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace moeserve::server::security

#endif  // MOESERVE_SERVER_SECURITY_CONSTANT_TIME_H_
