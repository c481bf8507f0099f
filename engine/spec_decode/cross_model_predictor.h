// CrossModelPredictor: SP-MoE's cross-model expert prediction (seed 003
// §4.2.1) for the external drafter. At each draft layer i of D, the router
// input of the rows that draft (one per sequence) goes through the TARGET's
// routers of target layers [i*L/D, (i+1)*L/D): softmax top
// num_experts_per_tok, as MoeModel::PredictExperts computes it, so the
// lookahead names, per draft position and target layer, the experts the
// target's routers pick for the draft's hidden states.
//
// Everything runs on the draft model's stream, in the backend's memory (the
// target's routers where the target model keeps them, applied by
// MoeModel::ApplyRouter as its own routing does; VRAM on CUDA), with no
// wait of its own: per draft
// pass at most one upload of the drafting rows (when the pass has catch-up
// rows besides them) and one copy of every target layer's top-k ids into
// pinned host memory, enqueued at the last draft layer, which the draft's
// Forward() then waits for with its logits. So the prediction adds no
// host<->device synchronisation to the draft pass (MoeModel::PredictExperts
// waits once per call: L per draft position).
//
// Use, per draft pass: BeginPass(rows) before the draft's Forward(),
// OnDraftLayer from its expert provider's BeginLayer, AddTo after Forward()
// returned OK. A backend error in BeginPass or OnDraftLayer costs only that
// pass's lookahead (AddTo adds nothing); the draft itself goes on.
//
// Owns its scratch; borrows the target model and the backend (both must
// outlive it). Thread-compatible: the drafter's step thread.
#ifndef MOESERVE_ENGINE_SPEC_DECODE_CROSS_MODEL_PREDICTOR_H_
#define MOESERVE_ENGINE_SPEC_DECODE_CROSS_MODEL_PREDICTOR_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/internal/scratch_buffer.h"
#include "engine/moe_model.h"
#include "engine/spec_decode/drafter.h"
#include "kernels/backend.h"

namespace moeserve::engine::spec_decode {

class CrossModelPredictor {
 public:
  // For a draft model of `draft_layers` layers whose hidden size is the
  // target's, computing on `stream` (the draft model's,
  // ExpertProvider::AttachCompute) of `backend`. REQUIRES: draft_layers > 0.
  CrossModelPredictor(MoeModel* target, int draft_layers,
                      kernels::Backend* backend, kernels::Stream* stream);
  // Waits for a pass whose ops may still be in flight (its Forward()
  // failed) before its scratch goes.
  ~CrossModelPredictor();

  // Before a draft pass: the rows of its batch to predict from (ascending,
  // distinct). Reserves the scratch for them: nothing is in flight after a
  // pass that ended with AddTo (its Forward() ended with a wait); after one
  // that did not (a failed Forward()), this waits for the stream first.
  void BeginPass(std::span<const int64_t> rows);

  // The draft's BeginLayer for draft layer `layer`: `hidden` F32[n, d] in
  // the backend's memory, written by ops on the stream, after which the
  // predictions are enqueued.
  void OnDraftLayer(int layer, const float* hidden, int64_t n);

  // After the pass's Forward() returned OK: adds each target layer's
  // predicted experts (the union over the pass's rows) to `lookahead` at
  // draft position `position`, and ends the pass. Adds nothing when the
  // pass failed to predict.
  void AddTo(ExpertLookahead* lookahead, int position);

 private:
  // Enqueues the predictions of draft layer `layer` (and, at the last one,
  // the copy of every target layer's ids to the host).
  absl::Status Enqueue(int layer, const float* hidden, int64_t n);

  MoeModel* const target_;
  const int draft_layers_;
  kernels::Backend* const backend_;
  kernels::Stream* const stream_;
  const int target_layers_;
  const int64_t hidden_size_;
  const int64_t num_experts_;
  const int top_k_;

  // Of the pass in progress.
  std::vector<int32_t> rows_;
  bool open_ = false;           // BeginPass without AddTo yet
  bool ok_ = false;             // nothing failed so far
  bool rows_uploaded_ = false;  // rows_dev_ holds rows_
  int layers_done_ = 0;         // draft layers whose predictions are enqueued

  ScratchBuffer rows_dev_;                                      // I32[m]
  ScratchBuffer rows_host_{ScratchBuffer::Where::kPinnedHost};  // I32[m]
  ScratchBuffer gathered_;                                      // F32[m, d]
  ScratchBuffer logits_;                                        // F32[m, E]
  ScratchBuffer weights_;                                       // F32[m, k]
  ScratchBuffer ids_;  // I32[L, m, k], target layer t's at t * m * k
  ScratchBuffer ids_host_{ScratchBuffer::Where::kPinnedHost};  // copy of ids_
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_CROSS_MODEL_PREDICTOR_H_
