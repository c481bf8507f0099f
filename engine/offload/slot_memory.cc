#include "engine/offload/slot_memory.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {

void SlotMemory::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

absl::StatusOr<std::unique_ptr<SlotMemory>> SlotMemory::Create(
    int num_slots, size_t slot_bytes, kernels::Backend* device) {
  std::unique_ptr<SlotMemory> m(new SlotMemory(num_slots, slot_bytes, device));
  if (absl::Status s = m->Allocate(); !s.ok()) return s;
  return m;
}

absl::Status SlotMemory::Allocate() {
  const size_t size = (num_slots_ * slot_bytes_ + 4095) / 4096 * 4096;
  if (device_ == nullptr) {
    host_arena_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, size)));
    if (host_arena_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate a fast tier of ", size, " bytes"));
    }
    // Touch every page now: otherwise the first copy into each slot pays
    // the page faults (measured: the first lru pass at R=0.5 copied at 0.12x
    // the plain memcpy rate, 0.78x once warm).
    std::memset(host_arena_.get(), 0, size);
    base_ = host_arena_.get();
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> arena =
      device_->Allocate(static_cast<int64_t>(size));
  if (!arena.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "fast tier of ", num_slots_, " expert slots (", size, " bytes) on ",
        device_->name(), ": ", arena.status().message()));
  }
  device_arena_ = *std::move(arena);
  base_ = static_cast<std::byte*>(device_arena_->data());
  for (int s = 0; s < num_slots_; ++s) {
    absl::StatusOr<std::unique_ptr<kernels::Event>> e = device_->CreateEvent();
    if (!e.ok()) return e.status();
    released_.push_back(*std::move(e));
  }
  return absl::OkStatus();
}

kernels::Device SlotMemory::device() const {
  return device_ != nullptr ? device_->device() : kernels::Device::kCpu;
}

absl::Status SlotMemory::AttachCompute(kernels::Backend* backend,
                                       kernels::Stream* stream) {
  if (device_ == nullptr) return absl::OkStatus();
  if (backend != device_) {
    return absl::FailedPreconditionError(
        absl::StrCat("expert slots live on ", device_->name(),
                     " but the model computes on ", backend->name()));
  }
  compute_ = stream;
  return absl::OkStatus();
}

void SlotMemory::MarkReleased(int slot) {
  if (device_ == nullptr || compute_ == nullptr) return;
  // Marks the end of the kernels that read the slot; a later copy into it
  // waits for this on the device (fence()).
  if (absl::Status r = device_->RecordEvent(*compute_, *released_[slot]);
      !r.ok()) {
    // Without the marker the slot cannot be reused safely: drain instead.
    spdlog::error("expert residency: {}; synchronising", r.ToString());
    (void)compute_->Synchronize();
  }
}

absl::StatusOr<std::unique_ptr<LinkTransport>> SlotMemory::NewTransport(
    SlowTier* slow, int num_workers) const {
  if (device_ == nullptr) return NewHostTransport(slow);
  return NewDeviceTransport(device_, slow, slot_bytes_, num_workers);
}

}  // namespace moeserve::engine
