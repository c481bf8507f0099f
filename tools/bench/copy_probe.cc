#include "tools/bench/copy_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/status_macros.h"

namespace moeserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kRingBudgetBytes = int64_t{1} << 30;  // per side

}  // namespace

absl::StatusOr<CopyProbe> MeasurePinnedCopy(kernels::Backend* backend,
                                            int64_t bytes_per_copy,
                                            int copies) {
  if (bytes_per_copy < 1 || copies < 1) {
    return absl::InvalidArgumentError(
        "copy probe: bytes_per_copy and copies must be >= 1");
  }
  const int buffers = static_cast<int>(
      std::clamp<int64_t>(kRingBudgetBytes / bytes_per_copy, 1, copies));
  // A copy stream, as the link's transport uses.
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            backend->CreateCopyStream());
  std::vector<std::unique_ptr<kernels::Buffer>> host, device;
  for (int i = 0; i < buffers; ++i) {
    MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> h,
                              backend->AllocateHost(bytes_per_copy));
    std::memset(h->data(), i + 1, bytes_per_copy);  // pages touched
    host.push_back(std::move(h));
    MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> d,
                              backend->Allocate(bytes_per_copy));
    device.push_back(std::move(d));
  }
  // Warm-up: every destination written once.
  for (int i = 0; i < buffers; ++i) {
    MOESERVE_RETURN_IF_ERROR(backend->CopyToDevice(
        *stream, device[i]->data(), host[i]->data(), bytes_per_copy));
  }
  MOESERVE_RETURN_IF_ERROR(stream->Synchronize());

  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Event> start,
                            backend->CreateEvent());
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Event> stop,
                            backend->CreateEvent());
  const Clock::time_point wall_start = Clock::now();
  MOESERVE_RETURN_IF_ERROR(backend->RecordEvent(*stream, *start));
  for (int i = 0; i < copies; ++i) {
    // Shift the source by one so no pair repeats the warm-up's exactly.
    MOESERVE_RETURN_IF_ERROR(
        backend->CopyToDevice(*stream, device[i % buffers]->data(),
                              host[(i + 1) % buffers]->data(), bytes_per_copy));
  }
  MOESERVE_RETURN_IF_ERROR(backend->RecordEvent(*stream, *stop));
  MOESERVE_RETURN_IF_ERROR(stop->Synchronize());
  const double wall =
      std::chrono::duration<double>(Clock::now() - wall_start).count();
  MOESERVE_ASSIGN_OR_RETURN(const double event_seconds,
                            stop->SecondsSince(*start));

  CopyProbe p;
  p.bytes_per_copy = bytes_per_copy;
  p.copies = copies;
  p.buffers = buffers;
  p.event_seconds = event_seconds;
  p.wall_seconds = wall;
  const double bytes = static_cast<double>(bytes_per_copy) * copies;
  p.event_gbps = event_seconds > 0 ? bytes / event_seconds / 1e9 : 0;
  p.wall_gbps = wall > 0 ? bytes / wall / 1e9 : 0;
  return p;
}

}  // namespace moeserve::bench
