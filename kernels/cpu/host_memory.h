// Host-memory pieces of the CPU backend's memory API (kernels/backend.h):
// an aligned heap Buffer and an Event that is a timestamp. On the CPU every
// op and copy has finished when its enqueueing call returns, so an event is
// "complete" as soon as it is recorded.
//
// Thread safety: a HostBuffer is immutable after construction; a TimeEvent is
// used by one thread at a time (as Event).
#ifndef MOESERVE_KERNELS_CPU_HOST_MEMORY_H_
#define MOESERVE_KERNELS_CPU_HOST_MEMORY_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace moeserve::kernels::cpu {

// `bytes` (> 0) bytes aligned to `alignment` (a power of two, >= 64);
// ResourceExhausted when the allocation fails, InvalidArgument for bytes <= 0.
absl::StatusOr<std::unique_ptr<Buffer>> AllocateAligned(int64_t bytes,
                                                        int64_t alignment);

class TimeEvent final : public Event {
 public:
  void Record() { at_ = std::chrono::steady_clock::now(); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::StatusOr<double> SecondsSince(const Event& start) const override;

 private:
  std::chrono::steady_clock::time_point at_{};
};

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_HOST_MEMORY_H_
