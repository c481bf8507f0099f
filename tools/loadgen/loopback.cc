#include "tools/loadgen/loopback.h"

#include <arpa/inet.h>

#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace moeserve::loadgen {
namespace {

bool IsLoopbackHost(absl::string_view host) {
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

}  // namespace

absl::Status CheckLoopbackTarget(absl::string_view target) {
  absl::string_view rest = target;
  for (absl::string_view prefix : {"ipv4:", "ipv6:", "dns:///"}) {
    if (absl::ConsumePrefix(&rest, prefix)) break;
  }
  absl::string_view host;
  absl::string_view port;
  if (absl::ConsumePrefix(&rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos || close + 1 >= rest.size() ||
        rest[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("target '", target, "': expected [IPV6]:PORT"));
    }
    host = rest.substr(0, close);
    port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos ||
        rest.find(':') != colon) {  // a bare IPv6 address is ambiguous
      return absl::InvalidArgumentError(
          absl::StrCat("target '", target, "': expected HOST:PORT"));
    }
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  uint32_t port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number == 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", target, "': bad port '", port, "'"));
  }
  if (!IsLoopbackHost(host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target '", target,
        "' is not loopback; moeserve_loadgen only drives 127.0.0.0/8, ::1 "
        "or localhost"));
  }
  return absl::OkStatus();
}

}  // namespace moeserve::loadgen
