// ScratchBuffer: one growable buffer in a backend's device memory, for the
// forward pass's activations, or in its page-locked host memory
// (Where::kPinnedHost) for what the host reads back or uploads every layer:
// copies from and to pinned memory are truly asynchronous on CUDA, where a
// pageable buffer makes the driver stage the copy and wait. It only grows
// (to the largest size asked for) and Reserve() may reallocate, dropping the
// contents, so callers reserve at the start of a step, when nothing in
// flight reads it.
//
// Owns its kernels::Buffer; borrows nothing. Not thread-safe.
#ifndef MOESERVE_ENGINE_INTERNAL_SCRATCH_BUFFER_H_
#define MOESERVE_ENGINE_INTERNAL_SCRATCH_BUFFER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class ScratchBuffer {
 public:
  enum class Where { kDevice, kPinnedHost };
  explicit ScratchBuffer(Where where = Where::kDevice) : where_(where) {}

  // At least `bytes` (> 0 rounds up to 256) of memory.
  absl::Status Reserve(kernels::Backend& backend, int64_t bytes) {
    bytes = bytes < 256 ? 256 : bytes;
    if (buffer_ != nullptr && buffer_->bytes() >= bytes) return {};
    buffer_.reset();  // Free first: the new one may need the room.
    // Grow by half again so slowly rising batch sizes do not reallocate
    // every step.
    const int64_t want = bytes + bytes / 2;
    absl::StatusOr<std::unique_ptr<kernels::Buffer>> b =
        where_ == Where::kDevice ? backend.Allocate(want)
                                 : backend.AllocateHost(want);
    if (!b.ok()) return b.status();
    buffer_ = *std::move(b);
    return {};
  }
  void* data() const { return buffer_ == nullptr ? nullptr : buffer_->data(); }
  int64_t bytes() const { return buffer_ == nullptr ? 0 : buffer_->bytes(); }

 private:
  const Where where_;
  std::unique_ptr<kernels::Buffer> buffer_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_INTERNAL_SCRATCH_BUFFER_H_
