// The canonical names of gRPC status codes ("INVALID_ARGUMENT"): grpc++ has
// no public function for them. One table for the server's metric labels and
// the client tools' output.
#ifndef MOESERVE_BASE_GRPC_CODE_NAME_H_
#define MOESERVE_BASE_GRPC_CODE_NAME_H_

#include "grpcpp/support/status.h"

namespace moeserve {

// "OK" .. "UNAUTHENTICATED"; "UNKNOWN" for a value outside 0..16 (the gRPC
// spec's treatment of a code it does not know), so the result is always one
// of the 17 names: safe as a bounded Prometheus label value.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace moeserve

#endif  // MOESERVE_BASE_GRPC_CODE_NAME_H_
