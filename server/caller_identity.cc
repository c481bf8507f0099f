#include "server/caller_identity.h"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/security/grpc_credentials.h"

namespace moeserve::server {
namespace {

// Fills `out` from the kernel's CSPRNG. getrandom blocks only before the
// pool is first initialised (early boot); EINTR is retried.
void RandomBytes(std::array<unsigned char, 16>* out) {
  size_t filled = 0;
  while (filled < out->size()) {
    const ssize_t n = getrandom(out->data() + filled, out->size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // No kernel CSPRNG (pre-3.17 kernel or a seccomp filter):
      // std::random_device reads the same pool through /dev/urandom.
      std::random_device device;
      for (size_t i = filled; i < out->size(); ++i) {
        (*out)[i] = static_cast<unsigned char>(device());
      }
      return;
    }
    filled += static_cast<size_t>(n);
  }
}

}  // namespace

std::string CallerOf(const grpc::ServerContextBase& context) {
  if (std::optional<std::string> id = security::CallIdentity(context)) {
    return "id:" + *id;
  }
  return absl::StrCat("peer:", context.peer());
}

std::string ScopedRequestId(std::string_view caller,
                            std::string_view request_id) {
  // Length-prefixed: no (caller, id) pair can spell another's key.
  std::string key = absl::StrCat(caller.size(), ":");
  key.append(caller);
  key.append(request_id);
  return key;
}

std::string NewServerRequestId() {
  std::array<unsigned char, 16> bytes;
  RandomBytes(&bytes);
  return "req-" +
         absl::BytesToHexString(absl::string_view(
             reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace moeserve::server
