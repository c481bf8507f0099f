// LinkTransport: how one expert's bytes get from the slow tier into a
// fast-tier slot; the Link (link.h) runs it on its worker threads and does
// the queueing, accounting and optional emulation around it.
//
//   HostTransport    the fast tier is host RAM: SlowTier::Read straight into
//                    the slot; busy time is wall time.
//   DeviceTransport  the fast tier is device memory (VRAM slots): each worker
//                    owns a copy stream, a page-locked staging buffer and two
//                    events. The source is the slow tier's host arena when it
//                    has one (page-locked once with RegisterHost, so the DMA
//                    reads it directly), else the blob is first read into the
//                    staging buffer. The copy waits on the device for the
//                    slot's last readers (`after`), runs on the worker's copy
//                    stream (overlapping the compute stream) and is timed
//                    with events: busy time = event time of the copy plus
//                    the host read into staging, if any.
//
// Ownership: a transport borrows the slow tier and the backend (both must
// outlive it); DeviceTransport owns its streams, staging buffers and events
// and unregisters the arena it registered.
// Thread safety: Move may run concurrently for different workers; one worker
// index is used by one thread.
#ifndef MOESERVE_ENGINE_OFFLOAD_LINK_TRANSPORT_H_
#define MOESERVE_ENGINE_OFFLOAD_LINK_TRANSPORT_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "engine/offload/slow_tier.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class LinkTransport {
 public:
  virtual ~LinkTransport() = default;

  // Fills the slot at `dst` (the transfer size given at construction) with
  // expert `id` and returns once the bytes are there, with the seconds the
  // link was busy. `after` (may be null): device work that must finish
  // before `dst` is overwritten. `worker` is the calling Link worker's index.
  virtual absl::StatusOr<double> Move(int worker, ExpertId id, std::byte* dst,
                                      kernels::Event* after) = 0;
};

std::unique_ptr<LinkTransport> NewHostTransport(SlowTier* slow);

// ResourceExhausted / Internal when the streams, staging buffers or events
// cannot be had. `bytes` is the transfer size; `num_workers` >= 1.
absl::StatusOr<std::unique_ptr<LinkTransport>> NewDeviceTransport(
    kernels::Backend* backend, SlowTier* slow, size_t bytes, int num_workers);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_LINK_TRANSPORT_H_
