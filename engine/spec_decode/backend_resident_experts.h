// BackendResidentExperts: every expert of a model copied once, at creation,
// into one arena in the compute backend's memory (VRAM on CUDA), in the
// weights' own packed blob layout (bf16, or an int4 / fp8 checkpoint's
// layout). The ExpertProvider of a small model whose experts all fit beside
// the target (the external drafter's draft model on a GPU): Acquire hands
// out a blob of the arena and nothing ever moves. ResidentExperts
// (engine/expert_provider.h) is the same for the weights' host arena, which
// a CPU backend computes from directly.
//
// Owns the arena; borrows the backend (must outlive it). Thread-safe after
// Create (read-only).
#ifndef MOESERVE_ENGINE_SPEC_DECODE_BACKEND_RESIDENT_EXPERTS_H_
#define MOESERVE_ENGINE_SPEC_DECODE_BACKEND_RESIDENT_EXPERTS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/expert_provider.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"

namespace moeserve::engine::spec_decode {

class BackendResidentExperts final : public ExpertProvider {
 public:
  // Copies the packed expert arena of `weights` (loaded with pack_experts)
  // into `backend`'s memory in one copy, and waits for it. `weights` must
  // outlive the result (its layouts are shared). FailedPrecondition when
  // the weights have no packed experts; ResourceExhausted when the backend
  // has no room.
  static absl::StatusOr<std::unique_ptr<BackendResidentExperts>> Create(
      const ModelWeights& weights, kernels::Backend* backend);

  kernels::Device device() const override { return device_; }
  const kernels::Int4ExpertLayout* int4_layout() const override {
    return weights_.int4_layout();
  }
  const kernels::Fp8ExpertLayout* fp8_layout() const override {
    return weights_.fp8_layout();
  }
  // OutOfRange for an id outside the model.
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override;
  void Release(ExpertId) override {}

  uint64_t bytes() const { return static_cast<uint64_t>(arena_->bytes()); }

 private:
  BackendResidentExperts(const ModelWeights& weights,
                         std::unique_ptr<kernels::Buffer> arena,
                         kernels::Device device);

  const ModelWeights& weights_;
  const std::unique_ptr<kernels::Buffer> arena_;
  const kernels::Device device_;
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_BACKEND_RESIDENT_EXPERTS_H_
