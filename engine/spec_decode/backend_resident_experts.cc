#include "engine/spec_decode/backend_resident_experts.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::engine::spec_decode {

absl::StatusOr<std::unique_ptr<BackendResidentExperts>>
BackendResidentExperts::Create(const ModelWeights& weights,
                               kernels::Backend* backend) {
  // The packed arena is one block: blob (layer, expert) at
  // (layer * num_experts + expert) * bytes from the first (model_weights.h).
  const ExpertBlob& first = weights.expert({0, 0});
  const int64_t total = static_cast<int64_t>(weights.num_layers()) *
                        weights.num_experts() *
                        static_cast<int64_t>(first.bytes);
  if (first.data == nullptr || total <= 0) {
    return absl::FailedPreconditionError(
        "resident experts in backend memory: the weights have no packed "
        "experts (loaded without pack_experts)");
  }
  const ExpertBlob& last =
      weights.expert({weights.num_layers() - 1, weights.num_experts() - 1});
  if (last.data + last.bytes != first.data + total) {
    return absl::InternalError(
        "resident experts in backend memory: the packed experts are not one "
        "arena in (layer, expert) order");
  }
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> arena,
                            backend->Allocate(total));
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            backend->CreateStream());
  MOESERVE_RETURN_IF_ERROR(
      backend->CopyToDevice(*stream, arena->data(), first.data, total));
  MOESERVE_RETURN_IF_ERROR(stream->Synchronize());
  return std::unique_ptr<BackendResidentExperts>(
      new BackendResidentExperts(weights, std::move(arena), backend->device()));
}

BackendResidentExperts::BackendResidentExperts(
    const ModelWeights& weights, std::unique_ptr<kernels::Buffer> arena,
    kernels::Device device)
    : weights_(weights), arena_(std::move(arena)), device_(device) {}

absl::StatusOr<const std::byte*> BackendResidentExperts::Acquire(ExpertId id) {
  if (id.layer < 0 || id.layer >= weights_.num_layers() || id.expert < 0 ||
      id.expert >= weights_.num_experts()) {
    return absl::OutOfRangeError(absl::StrCat(
        "resident expert (", id.layer, ", ", id.expert, ") out of range"));
  }
  const int64_t bytes = static_cast<int64_t>(weights_.expert(id).bytes);
  return static_cast<const std::byte*>(arena_->data()) +
         (static_cast<int64_t>(id.layer) * weights_.num_experts() + id.expert) *
             bytes;
}

}  // namespace moeserve::engine::spec_decode
