// Reads what a soak run watches in another process: resident memory, thread
// count and open file descriptors, from /proc (Linux only).
#ifndef MOESERVE_TOOLS_SOAK_PROCESS_PROBE_H_
#define MOESERVE_TOOLS_SOAK_PROCESS_PROBE_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace moeserve::soak {

struct ProcessSample {
  int64_t rss_bytes = 0;  // VmRSS
  int64_t hwm_bytes = 0;  // VmHWM: the peak RSS so far
  int threads = 0;        // Threads
  int open_fds = 0;       // entries of /proc/PID/fd
};

// NOT_FOUND when the process is gone; PERMISSION_DENIED when /proc hides it.
absl::StatusOr<ProcessSample> SampleProcess(pid_t pid);

}  // namespace moeserve::soak

#endif  // MOESERVE_TOOLS_SOAK_PROCESS_PROBE_H_
