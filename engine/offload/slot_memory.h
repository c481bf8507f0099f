// SlotMemory: the bytes of the fast tier. One allocation of num_slots x
// slot_bytes, either in host RAM (page-aligned and pre-faulted) or in a
// backend's device memory. Device slots also carry the load fence: an event
// per slot, recorded on the compute stream at every Release
// (MarkReleased), which a copy into the slot waits for on the device
// (fence(), passed to Link::Submit), so a blob is never overwritten while
// kernels enqueued before its Release may still read it.
//
// Ownership: owns the allocation and the events; borrows the backend and
// the compute stream (both must outlive it).
// Thread safety: Create and AttachCompute happen before any load or
// Release (not concurrently with anything). data(), fence() and
// NewTransport may then be called from any thread; MarkReleased calls must
// not overlap (SlotPool makes them under its lock).
#ifndef MOESERVE_ENGINE_OFFLOAD_SLOT_MEMORY_H_
#define MOESERVE_ENGINE_OFFLOAD_SLOT_MEMORY_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/offload/link_transport.h"
#include "engine/offload/slow_tier.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class SlotMemory {
 public:
  // `device` null: host RAM. ResourceExhausted when the memory cannot be
  // had; the backend's error when its events cannot be created.
  static absl::StatusOr<std::unique_ptr<SlotMemory>> Create(
      int num_slots, size_t slot_bytes, kernels::Backend* device);
  SlotMemory(const SlotMemory&) = delete;
  SlotMemory& operator=(const SlotMemory&) = delete;

  kernels::Device device() const;
  // Device slots: `backend` must be the slots' backend (FailedPrecondition
  // otherwise); `stream` is where the forward pass reads them. Host slots:
  // nothing to do.
  absl::Status AttachCompute(kernels::Backend* backend,
                             kernels::Stream* stream);

  std::byte* data(int slot) const { return base_ + slot * slot_bytes_; }
  // What a copy into `slot` must wait for; null for host slots.
  kernels::Event* fence(int slot) const {
    return device_ != nullptr ? released_[slot].get() : nullptr;
  }
  // Records `slot`'s fence on the compute stream (device slots with a
  // compute stream attached; otherwise nothing). If the record fails, drains
  // the compute stream instead, so the slot is still safe to overwrite.
  void MarkReleased(int slot);

  // The transport that fills these slots from `slow`: SlowTier::Read into
  // host slots, or copies on `num_workers` copy streams into device slots.
  absl::StatusOr<std::unique_ptr<LinkTransport>> NewTransport(
      SlowTier* slow, int num_workers) const;

 private:
  SlotMemory(int num_slots, size_t slot_bytes, kernels::Backend* device)
      : num_slots_(num_slots), slot_bytes_(slot_bytes), device_(device) {}
  absl::Status Allocate();

  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };

  const int num_slots_;
  const size_t slot_bytes_;
  kernels::Backend* const device_;                      // null: host slots
  std::unique_ptr<std::byte, FreeDeleter> host_arena_;  // host slots
  std::unique_ptr<kernels::Buffer> device_arena_;       // device slots
  std::byte* base_ = nullptr;
  std::vector<std::unique_ptr<kernels::Event>> released_;  // [slot], device
  kernels::Stream* compute_ = nullptr;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_SLOT_MEMORY_H_
