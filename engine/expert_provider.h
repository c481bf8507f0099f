// ExpertProvider: how the forward pass gets at expert weights.
//
// For each MoE layer the forward pass asks, once, for every expert its
// router selected, computes them, then releases them. Whatever stands behind
// this interface decides where the bytes live and when they move (the fast
// tier and its offload policy plug in here); the forward pass only needs a
// pointer to each packed blob (layout: engine/model_weights.h) that stays
// valid until the release.
#ifndef MOESERVE_ENGINE_EXPERT_PROVIDER_H_
#define MOESERVE_ENGINE_EXPERT_PROVIDER_H_

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model_weights.h"

namespace moeserve::engine {

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;

  // Makes `experts` of `layer` usable and returns their blobs, in order.
  // Requests for all experts of one layer come together so transfers can be
  // issued at once. Blocks until every blob is ready.
  virtual absl::StatusOr<std::vector<const std::byte*>> Acquire(
      int layer, std::span<const int> experts) = 0;

  // Ends the use begun by Acquire with the same arguments.
  virtual void Release(int layer, std::span<const int> experts) = 0;
};

// Every expert resident in the packed arena of ModelWeights: no movement.
class ResidentExperts final : public ExpertProvider {
 public:
  // `weights` must outlive this object and have been loaded with packed
  // experts.
  explicit ResidentExperts(const ModelWeights* weights) : weights_(weights) {}

  absl::StatusOr<std::vector<const std::byte*>> Acquire(
      int layer, std::span<const int> experts) override {
    std::vector<const std::byte*> blobs;
    blobs.reserve(experts.size());
    for (int e : experts) blobs.push_back(weights_->expert({layer, e}).data);
    return blobs;
  }
  void Release(int, std::span<const int>) override {}

 private:
  const ModelWeights* const weights_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_EXPERT_PROVIDER_H_
