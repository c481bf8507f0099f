// QuantizedExperts: the int4 draft's own pool (MoE-SpeQ §3.4.2): every
// expert of the model quantized once, at load, to symmetric int4 (round to
// nearest; groups of 128 columns per bf16 scale where 128 divides the row,
// smaller groups otherwise: kernels/int4_expert.h) and held in one arena in
// the compute backend's memory, the fast tier of a GPU. It is the
// ExpertProvider of the int4 drafter's forward passes: Acquire hands out an
// expert's int4 blob and nothing ever moves. Its bytes are the draft's
// memory; the engine builder charges them to the engine's fast-tier budget
// (EngineSpec::draft_budget).
//
// Owns the arena; borrows the backend (must outlive it). Thread-safe after
// Create (read-only).
#ifndef MOESERVE_ENGINE_SPEC_DECODE_QUANTIZED_EXPERTS_H_
#define MOESERVE_ENGINE_SPEC_DECODE_QUANTIZED_EXPERTS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/expert_provider.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"
#include "kernels/int4_expert.h"

namespace moeserve::engine::spec_decode {

class QuantizedExperts final : public ExpertProvider {
 public:
  // The int4 copy of every expert of `weights`, in `backend`'s memory,
  // quantized on `threads` threads (0: one per hardware thread, at most
  // 32; the result is the same for any count). ResourceExhausted when it
  // does not fit; InvalidArgument for expert shapes int4 cannot hold (an
  // odd row length).
  static absl::StatusOr<std::unique_ptr<QuantizedExperts>> Create(
      const ModelWeights& weights, kernels::Backend* backend, int threads = 0);

  // Bytes the int4 copy of `config`'s experts takes (for budgets).
  static absl::StatusOr<uint64_t> BytesFor(const ModelConfig& config);

  kernels::Device device() const override { return device_; }
  const kernels::Int4ExpertLayout* int4_layout() const override {
    return &layout_;
  }
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override;
  void Release(ExpertId) override {}

  uint64_t bytes() const { return static_cast<uint64_t>(arena_->bytes()); }
  const kernels::Int4ExpertLayout& layout() const { return layout_; }

 private:
  QuantizedExperts(const ModelConfig& config, kernels::Int4ExpertLayout layout,
                   std::unique_ptr<kernels::Buffer> arena,
                   kernels::Device device);

  const int num_layers_;
  const int num_experts_;
  const kernels::Int4ExpertLayout layout_;
  const std::unique_ptr<kernels::Buffer> arena_;
  const kernels::Device device_;
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_QUANTIZED_EXPERTS_H_
