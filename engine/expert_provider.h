// ExpertProvider: how the forward pass gets at expert weights.
//
// For each MoE layer the forward pass announces every expert its router
// selected (BeginLayer), then acquires them in ascending order; the ones
// IsReadyForCompute are held together and computed in one grouped op, any
// other is acquired with nothing held, computed alone and released before
// the next Acquire. Whatever stands behind
// this interface decides where the bytes live and when they move (the fast
// tier and its offload policy plug in here); the forward pass only needs a
// pointer to each packed blob (layout: engine/model_weights.h) that stays
// valid until the release.
#ifndef MOESERVE_ENGINE_EXPERT_PROVIDER_H_
#define MOESERVE_ENGINE_EXPERT_PROVIDER_H_

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model_weights.h"
#include "engine/offload/offload_policy.h"
#include "engine/router_probe.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class HostExperts;

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;

  // Where Acquire's blobs live; MoeModel refuses a provider whose device is
  // not its backend's.
  virtual kernels::Device device() const { return kernels::Device::kCpu; }

  // Non-null when Acquire's blobs are int4 experts in this layout
  // (kernels/int4_expert.h: an int4 draft's pool, or the experts of an int4
  // checkpoint, ModelWeights::int4_layout()) instead of packed bf16.
  virtual const kernels::Int4ExpertLayout* int4_layout() const {
    return nullptr;
  }

  // Non-null when Acquire's blobs are fp8 experts in this layout
  // (kernels/fp8_expert.h: the experts of an FP8 checkpoint,
  // ModelWeights::fp8_layout()).
  virtual const kernels::Fp8ExpertLayout* fp8_layout() const { return nullptr; }

  // Called once by MoeModel::Create, before any step: the backend and the
  // stream on which the forward pass reads the blobs (both outlive the
  // provider's use of them).
  virtual absl::Status AttachCompute(kernels::Backend* backend,
                                     kernels::Stream* stream) {
    (void)backend, (void)stream;
    return absl::OkStatus();
  }

  // Called once by MoeModel::Create after AttachCompute: the model's
  // routers, for a provider whose policy predicts upcoming layers
  // (router_probe.h). Borrowed; outlives the provider's use of it.
  virtual void AttachRouterProbe(RouterProbe* probe) { (void)probe; }

  // Brackets one forward pass (one engine step).
  virtual void BeginStep(const StepInfo& info) { (void)info; }
  virtual void EndStep() {}

  // Called once per MoE layer (twice in a row in a step split into two
  // micro-batches: offload_policy.h) before any Acquire of that layer, with
  // every expert the router selected (ascending), the tokens routed to each,
  // and the router's input `hidden` (F32 [n, hidden_size], in the memory of
  // the model's device: an opaque handle for RouterProbe::PredictExperts),
  // so transfers for the whole layer can be issued at once.
  virtual void BeginLayer(int layer, std::span<const int> experts,
                          std::span<const int> token_counts,
                          const float* hidden, int64_t n) {
    (void)layer, (void)experts, (void)token_counts, (void)hidden, (void)n;
  }

  // Whether Acquire(id) would hand out a blob already in place: no load, no
  // wait, no slot taken, no in-place read. The forward pass holds such
  // experts together (they occupy nothing new); any other it acquires with
  // nothing else held. Default: true (every blob in place).
  virtual bool IsReadyForCompute(ExpertId id) const {
    (void)id;
    return true;
  }

  // Hybrid execution (engine/host_experts.h): the host side that computes
  // the experts this provider serves from the slow tier's host memory
  // (computed in place) while the model's device computes the resident
  // ones; owned by the provider. Null (the default): every blob Acquire
  // hands out is in device() memory.
  virtual HostExperts* host_compute() const { return nullptr; }
  // With host_compute(): whether Acquire(id), for an expert of the layer
  // announced by the last BeginLayer, hands out host bytes to be computed
  // on host_compute() (then the forward pass may hold it alongside others,
  // and must not read it from the device). Default: false.
  virtual bool ComputesOnHost(ExpertId id) const {
    (void)id;
    return false;
  }
  // The measured host compute of one such expert: `rows` tokens in
  // `seconds` on host_compute(), reported before its Release.
  virtual void RecordHostCompute(ExpertId id, int64_t rows, double seconds) {
    (void)id, (void)rows, (void)seconds;
  }

  // Makes `id` usable and returns its packed blob, valid until Release(id)
  // (and, on an asynchronous device, until the compute stream has passed the
  // ops enqueued before the Release).
  // Blocks until the blob is ready. The forward pass holds at most one
  // expert that was not IsReadyForCompute (ComputesOnHost ones aside: they
  // take no slot), and only with no other slot held, so a fast tier of one
  // free slot always makes progress.
  virtual absl::StatusOr<const std::byte*> Acquire(ExpertId id) = 0;
  virtual void Release(ExpertId id) = 0;

  // Every expert of `layer` has been computed and released.
  virtual void EndLayer(int layer) { (void)layer; }
};

// Every expert resident in the packed arena of ModelWeights: no movement.
class ResidentExperts final : public ExpertProvider {
 public:
  // `weights` must outlive this object and have been loaded with packed
  // experts.
  explicit ResidentExperts(const ModelWeights* weights) : weights_(weights) {}

  const kernels::Int4ExpertLayout* int4_layout() const override {
    return weights_->int4_layout();
  }
  const kernels::Fp8ExpertLayout* fp8_layout() const override {
    return weights_->fp8_layout();
  }
  absl::StatusOr<const std::byte*> Acquire(ExpertId id) override {
    return weights_->expert(id).data;
  }
  void Release(ExpertId) override {}

 private:
  const ModelWeights* const weights_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_EXPERT_PROVIDER_H_
