// SlowTier: where every expert always lives (DESIGN.md "Core abstractions").
//
// A slow tier fills a caller-owned buffer with one expert in the packed blob
// layout of engine/model_weights.h (gate at 0, up at up_offset, down at
// down_offset, `bytes` long, padding zeroed). It is the source side of the
// Link (link.h).
//
//   HostSlowTier  copies from ModelWeights' packed arena (memcpy). REQUIRES
//                 weights loaded with LoadOptions{.pack_experts = true}.
//   DiskSlowTier  preads the three matrices from the model's safetensors
//                 files at their ExpertSource offsets, so the experts need no
//                 RAM (load the weights with pack_experts = false). It tries
//                 O_DIRECT (an aligned superset read into an aligned bounce
//                 buffer) and falls back to buffered pread, with one log
//                 line, when the filesystem refuses O_DIRECT (EINVAL).
//
// Ownership: a tier borrows the ModelWeights (must outlive it); the disk
// tier owns its file descriptors.
// Thread safety: Read may be called concurrently from any thread.
#ifndef MOESERVE_ENGINE_OFFLOAD_SLOW_TIER_H_
#define MOESERVE_ENGINE_OFFLOAD_SLOW_TIER_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model_weights.h"

namespace moeserve::engine {

class SlowTier {
 public:
  virtual ~SlowTier() = default;

  // "host" or "disk".
  virtual std::string_view name() const = 0;

  // Writes expert `id` as a packed blob (weights.expert(id).bytes bytes)
  // into `dst`. REQUIRES: `dst` is 64-byte aligned and that long; `id` valid.
  // Errors: DataLoss naming the file on a short read or I/O error.
  virtual absl::Status Read(ExpertId id, std::byte* dst) = 0;

  // When every blob already sits in host RAM (the host tier): the memory
  // that holds them all, so a device link can page-lock it once and copy
  // from it directly. Empty otherwise.
  virtual std::span<const std::byte> HostArena() const { return {}; }
  // Blob `id` inside HostArena(). REQUIRES: HostArena() is not empty.
  virtual const std::byte* HostBlob(ExpertId id) const {
    (void)id;
    return nullptr;
  }
};

// FailedPrecondition when `weights` holds no packed experts.
absl::StatusOr<std::unique_ptr<SlowTier>> NewHostSlowTier(
    const ModelWeights* weights);

struct DiskSlowTierOptions {
  // Try O_DIRECT first. Default: true. False: buffered pread only.
  bool direct_io = true;
};

// NotFound / PermissionDenied (from open) naming the shard file.
absl::StatusOr<std::unique_ptr<SlowTier>> NewDiskSlowTier(
    const ModelWeights* weights, const DiskSlowTierOptions& options = {});

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_SLOW_TIER_H_
