// MeasurePinnedCopy: the plain host-to-device copy rate of one backend for
// transfers of one expert blob's size, measured in the same run as the
// policy bench so the link's achieved expert-copy rate can be read against
// it ("the link moves experts at 0.9x a plain pinned copy").
//
// Copies go from AllocateHost memory (page-locked on CUDA) into Allocate'd
// memory with Backend::CopyToDevice, back to back on one copy stream
// (Backend::CreateCopyStream, as the link's device transport): first one
// untimed copy into every buffer (pages touched, driver warm), then `copies`
// timed ones cycling over a ring of distinct source/destination pairs
// (as many as fit in about 1 GiB per side, at most `copies`). Timed with
// events around the whole run (CUDA: device time; CPU: timestamps, i.e.
// wall time of the synchronous memcpys) and with the wall clock.
//
// Owns nothing after it returns. Thread-compatible.
#ifndef MOESERVE_TOOLS_BENCH_COPY_PROBE_H_
#define MOESERVE_TOOLS_BENCH_COPY_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace moeserve::bench {

struct CopyProbe {
  int64_t bytes_per_copy = 0;
  int copies = 0;   // Timed copies.
  int buffers = 0;  // Distinct source/destination pairs they cycled over.
  double event_seconds = 0;
  double wall_seconds = 0;
  double event_gbps = 0;  // bytes_per_copy * copies / event_seconds / 1e9.
  double wall_gbps = 0;
};

// InvalidArgument for bytes_per_copy or copies < 1; allocation and copy
// errors from the backend.
absl::StatusOr<CopyProbe> MeasurePinnedCopy(kernels::Backend* backend,
                                            int64_t bytes_per_copy,
                                            int copies = 64);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_COPY_PROBE_H_
