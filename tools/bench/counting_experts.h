// CountingExperts: an ExpertProvider that forwards to another one and counts
// what the forward pass asks for. MoeModel acquires each expert its router
// selected for the whole batch once per layer per Forward(), so the counters
// give exactly the distinct (layer, expert) pairs, and hence the expert
// bytes, that one forward pass reads.
//
// Ownership: borrows `inner` and `weights`, which must outlive it.
// Thread-compatible (MoeModel::Forward is not reentrant).
#ifndef MOESERVE_TOOLS_BENCH_COUNTING_EXPERTS_H_
#define MOESERVE_TOOLS_BENCH_COUNTING_EXPERTS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "engine/expert_provider.h"
#include "engine/model_weights.h"

namespace moeserve::bench {

class CountingExperts final : public engine::ExpertProvider {
 public:
  CountingExperts(engine::ExpertProvider* inner,
                  const engine::ModelWeights* weights)
      : inner_(inner), weights_(weights) {}

  void BeginStep(const engine::StepInfo& info) override {
    inner_->BeginStep(info);
  }
  void EndStep() override { inner_->EndStep(); }
  void BeginLayer(int layer, std::span<const int> experts,
                  std::span<const int> token_counts, const float* hidden,
                  int64_t n) override {
    inner_->BeginLayer(layer, experts, token_counts, hidden, n);
  }
  const kernels::Int4ExpertLayout* int4_layout() const override {
    return inner_->int4_layout();
  }
  const kernels::Fp8ExpertLayout* fp8_layout() const override {
    return inner_->fp8_layout();
  }
  bool IsReadyForCompute(engine::ExpertId id) const override {
    return inner_->IsReadyForCompute(id);
  }
  absl::StatusOr<const std::byte*> Acquire(engine::ExpertId id) override {
    const engine::ExpertBlob& b = weights_->expert(id);
    bytes_ += b.gate_bytes + b.up_bytes + b.down_bytes;
    ++experts_;
    return inner_->Acquire(id);
  }
  void Release(engine::ExpertId id) override { inner_->Release(id); }
  void EndLayer(int layer) override { inner_->EndLayer(layer); }

  // Distinct (layer, expert) pairs acquired since the last Reset().
  uint64_t experts() const { return experts_; }
  // Their weight bytes (gate + up + down, without padding).
  uint64_t bytes() const { return bytes_; }
  void Reset() { experts_ = bytes_ = 0; }

 private:
  engine::ExpertProvider* const inner_;
  const engine::ModelWeights* const weights_;
  uint64_t experts_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_COUNTING_EXPERTS_H_
