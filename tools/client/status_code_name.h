// The canonical names of gRPC status codes ("INVALID_ARGUMENT"), as the
// client tools print them; grpc++ has no public function for it.
#ifndef MOESERVE_TOOLS_CLIENT_STATUS_CODE_NAME_H_
#define MOESERVE_TOOLS_CLIENT_STATUS_CODE_NAME_H_

#include "grpcpp/support/status.h"

namespace moeserve::client {

// "OK" .. "UNAUTHENTICATED"; "OUT_OF_SET" for a value outside 0..16.
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace moeserve::client

#endif  // MOESERVE_TOOLS_CLIENT_STATUS_CODE_NAME_H_
