// OffloadStack: one engine's two-tier expert memory assembled from its
// parts: the offload policy (by name, from policies/'s registry), the slow
// tier (host RAM or disk), and the fast tier with its link
// (engine/offload/ExpertResidency). It is the engine's ExpertProvider.
//
// Built by BuildEngine (engine_builder.h), the one place where the engine
// meets concrete policies; the engine itself only knows the plugin contract.
//
// Owns the policy, the slow tier and the residency (declared so that the
// residency, which borrows the other two, is destroyed first).
// Thread-safety: as ExpertResidency.
#ifndef MOESERVE_ENGINE_BUILDER_OFFLOAD_STACK_H_
#define MOESERVE_ENGINE_BUILDER_OFFLOAD_STACK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/builder/engine_spec.h"
#include "engine/engine.h"
#include "engine/offload/expert_residency.h"
#include "engine/offload/slow_tier.h"
#include "metrics/registry.h"

namespace moeserve::engine {

class OffloadStack final : public ExpertProvider {
 public:
  // Builds the stack `spec` asks for with `capacity_bytes` of fast tier.
  // `fast_tier_backend`: the backend whose memory holds the expert slots
  // (VRAM on CUDA); null for host RAM (the CPU backend). Borrowed, as are
  // `weights` and `registry` (may be null); all must outlive the stack.
  // REQUIRES: for slow_tier "host", `weights` was loaded with packed experts.
  static absl::StatusOr<std::unique_ptr<OffloadStack>> Create(
      const ModelWeights* weights, const EngineSpec& spec,
      uint64_t capacity_bytes, kernels::Backend* fast_tier_backend,
      metrics::Registry* registry, PredictFn predict);

  void OnLookahead(const ExpertLookahead& lookahead) override {
    residency_->OnLookahead(lookahead);
  }
  int ChooseDraftLength(const DraftLengthQuery& query) override {
    return residency_->ChooseDraftLength(query);
  }
  double link_seconds_per_transfer() const override {
    return residency_->link_seconds_per_transfer();
  }
  void BeginStep(const StepInfo& info) override { residency_->BeginStep(info); }
  void EndStep() override { residency_->EndStep(); }
  void BeginLayer(int layer, std::span<const int> experts,
                  std::span<const int> token_counts, const float* hidden,
                  int64_t n) override {
    residency_->BeginLayer(layer, experts, token_counts, hidden, n);
  }
  kernels::Device device() const override { return residency_->device(); }
  absl::Status AttachCompute(kernels::Backend* backend,
                             kernels::Stream* stream) override {
    return residency_->AttachCompute(backend, stream);
  }
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override {
    return residency_->Acquire(id);
  }
  void Release(ExpertId id) override { residency_->Release(id); }
  void EndLayer(int layer) override { residency_->EndLayer(layer); }

  const ExpertResidency& residency() const { return *residency_; }
  ExpertResidency& mutable_residency() { return *residency_; }
  OffloadPolicy* policy() { return policy_.get(); }

 private:
  OffloadStack() = default;

  std::unique_ptr<OffloadPolicy> policy_;
  std::unique_ptr<SlowTier> slow_;
  std::unique_ptr<ExpertResidency> residency_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_BUILDER_OFFLOAD_STACK_H_
