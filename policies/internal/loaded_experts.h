// LoadedExperts: the fast tier's contents as the OnLoaded / OnEvicted hooks
// report them (offload_policy.h), by layer. For policies that act on what
// is loaded (e.g. evict a layer's experts after it) without asking
// IsResident about every expert of the model. It lags the residency until
// the next delivery point and never holds a load still in flight (which
// could not be evicted anyway).
//
// Thread safety: none; used from the engine's step thread only.
#ifndef MOESERVE_POLICIES_INTERNAL_LOADED_EXPERTS_H_
#define MOESERVE_POLICIES_INTERNAL_LOADED_EXPERTS_H_

#include <map>
#include <set>
#include <vector>

#include "engine/model_weights.h"

namespace moeserve::policies::internal {

class LoadedExperts {
 public:
  void OnLoaded(engine::ExpertId id) { by_layer_[id.layer].insert(id.expert); }
  void OnEvicted(engine::ExpertId id) {
    auto it = by_layer_.find(id.layer);
    if (it != by_layer_.end()) it->second.erase(id.expert);
  }
  // The loaded experts of `layer`, ascending.
  std::vector<int> OfLayer(int layer) const {
    auto it = by_layer_.find(layer);
    if (it == by_layer_.end()) return {};
    return std::vector<int>(it->second.begin(), it->second.end());
  }

 private:
  std::map<int, std::set<int>> by_layer_;
};

}  // namespace moeserve::policies::internal

#endif  // MOESERVE_POLICIES_INTERNAL_LOADED_EXPERTS_H_
