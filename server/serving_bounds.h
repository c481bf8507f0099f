// ServingBounds: how much of the server one client, or all of them, may
// hold at once on the gRPC side, and how long a shutdown may take. The
// defaults are what a server behind a load balancer expects (HTTP/2's
// recommended 100 streams per connection, as nginx uses; a fixed handful of
// threads for what still needs one); `--help` lists the flags and
// server/README.md ("Bounds and shutdown") says why each is where it is.
#ifndef MOESERVE_SERVER_SERVING_BOUNDS_H_
#define MOESERVE_SERVER_SERVING_BOUNDS_H_

#include "absl/status/statusor.h"

namespace moeserve::server {

struct ServingBounds {
  // Generate + GenerateUnary calls open at once, server-wide
  // (--max_open_streams); more are RESOURCE_EXHAUSTED.
  int max_open_streams = 1024;
  // HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS of every connection
  // (--max_streams_per_connection): a client cannot open more calls of any
  // kind (health Watch, reflection included) on one connection.
  int max_streams_per_connection = 100;
  // Threads gRPC may create for synchronous handlers (--grpc_max_threads),
  // through a grpc::ResourceQuota. Only server reflection still has one
  // (its bidirectional stream holds a thread while open); every moeserve
  // method and health run on gRPC's callback API and need none per call.
  // With the quota spent a new reflection stream is RESOURCE_EXHAUSTED
  // instead of costing another thread.
  int grpc_max_threads = 16;
};

// The flags above, range-checked (INVALID_ARGUMENT naming the flag).
absl::StatusOr<ServingBounds> ServingBoundsFromFlags();

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_SERVING_BOUNDS_H_
