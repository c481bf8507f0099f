// Target validation for moeserve_loadgen: the load generator only ever talks
// to this machine (127.0.0.0/8, ::1 or "localhost"), so that it cannot be
// pointed at someone else's server.
#ifndef MOESERVE_TOOLS_LOADGEN_LOOPBACK_H_
#define MOESERVE_TOOLS_LOADGEN_LOOPBACK_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moeserve::loadgen {

// OK when `target` is "HOST:PORT" (optionally prefixed with "ipv4:",
// "ipv6:" or "dns:///"; IPv6 hosts in brackets) with a loopback HOST and a
// port in 1..65535; INVALID_ARGUMENT otherwise.
absl::Status CheckLoopbackTarget(absl::string_view target);

}  // namespace moeserve::loadgen

#endif  // MOESERVE_TOOLS_LOADGEN_LOOPBACK_H_
