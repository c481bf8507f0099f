// CountingExperts: an ExpertProvider that forwards to another one and counts
// what the forward pass asks for. MoeModel calls Acquire once per MoE layer
// per Forward() with the distinct experts its router selected for the whole
// batch, so the counters give exactly the distinct (layer, expert) pairs, and
// hence the expert bytes, that one forward pass reads.
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

  absl::StatusOr<std::vector<const std::byte*>> Acquire(
      int layer, std::span<const int> experts) override {
    for (int e : experts) {
      const engine::ExpertBlob& b = weights_->expert({layer, e});
      bytes_ += b.gate_bytes + b.up_bytes + b.down_bytes;
    }
    experts_ += experts.size();
    return inner_->Acquire(layer, experts);
  }
  void Release(int layer, std::span<const int> experts) override {
    inner_->Release(layer, experts);
  }

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
