// OffloadStack: one engine's two-tier expert memory assembled from its
// parts: the offload policy (by name, from policies/'s registry), the slow
// tier (host RAM or disk), and the fast tier with its link
// (engine/offload/ExpertResidency). It is the engine's ExpertProvider.
//
// Lives in server/ because it is where the engine meets concrete policies:
// the engine itself only knows the plugin contract.
//
// Owns the policy, the slow tier and the residency (declared so that the
// residency, which borrows the other two, is destroyed first).
// Thread-safety: as ExpertResidency.
#ifndef MOESERVE_SERVER_OFFLOAD_STACK_H_
#define MOESERVE_SERVER_OFFLOAD_STACK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/offload/expert_residency.h"
#include "engine/offload/link.h"
#include "engine/offload/slow_tier.h"
#include "metrics/registry.h"
#include "policies/registry.h"

namespace moeserve::server {

struct OffloadOptions {
  std::string engine_name;     // the `policy` metric label
  std::string policy = "lru";  // registry name
  policies::PolicyConfig policy_config;
  uint64_t capacity_bytes = 0;     // fast-tier budget
  std::string slow_tier = "host";  // "host" or "disk"
  engine::LinkOptions link;
  metrics::Registry* registry = nullptr;  // may be null
  // The backend whose memory holds the expert slots; null: host RAM (the CPU
  // backend's case). Must outlive the stack.
  kernels::Backend* fast_tier_backend = nullptr;
};

// Fast-tier bytes for a budget given in MiB (wins when > 0) or as a share of
// all expert bytes; at least one expert blob.
uint64_t ExpertCacheBytes(const engine::ModelWeights& weights, double ratio,
                          int64_t megabytes);

class OffloadStack final : public engine::ExpertProvider {
 public:
  // REQUIRES: for slow_tier "host", `weights` was loaded with packed experts.
  static absl::StatusOr<std::unique_ptr<OffloadStack>> Create(
      const engine::ModelWeights* weights, const OffloadOptions& options,
      engine::PredictFn predict);

  // A factory for engine::Engine::Create.
  static engine::ExpertProviderFactory Factory(
      const engine::ModelWeights* weights, OffloadOptions options);

  void BeginStep(const engine::StepInfo& info) override {
    residency_->BeginStep(info);
  }
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
  absl::StatusOr<const std::byte*> Acquire(engine::ExpertId id) override {
    return residency_->Acquire(id);
  }
  void Release(engine::ExpertId id) override { residency_->Release(id); }
  void EndLayer(int layer) override { residency_->EndLayer(layer); }

  engine::ResidencyStats stats() const { return residency_->stats(); }
  const engine::ExpertResidency& residency() const { return *residency_; }

 private:
  OffloadStack() = default;

  std::unique_ptr<engine::OffloadPolicy> policy_;
  std::unique_ptr<engine::SlowTier> slow_;
  std::unique_ptr<engine::ExpertResidency> residency_;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_OFFLOAD_STACK_H_
