// RouterProbe: a model's routers, asked ahead of time. A policy that
// predicts the experts of upcoming layers (overlap: layer l+1's router on
// layer l's hidden state) asks it through ResidencyControl::PredictExperts;
// the model hands itself to its expert provider as the probe when it is
// created (ExpertProvider::AttachRouterProbe), so no closure travels
// between the engine, the builder and the residency.
//
// Thread-safety: callable only from inside the model's forward pass (from
// the expert provider's hooks), on its thread.
#ifndef MOESERVE_ENGINE_ROUTER_PROBE_H_
#define MOESERVE_ENGINE_ROUTER_PROBE_H_

#include <cstdint>
#include <vector>

namespace moeserve::engine {

class RouterProbe {
 public:
  virtual ~RouterProbe() = default;

  // Applies `layer`'s router to `hidden` (F32 [n, hidden_size] in the
  // device memory BeginLayer handed to the expert provider) and returns the
  // distinct experts of every row's top-k, ascending (empty on error).
  virtual std::vector<int> PredictExperts(int layer, const float* hidden,
                                          int64_t n, int k) = 0;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_ROUTER_PROBE_H_
