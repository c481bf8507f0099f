#include "engine/spec_decode/cross_model_predictor.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::engine::spec_decode {

using kernels::DType;
using kernels::Tensor;

CrossModelPredictor::CrossModelPredictor(MoeModel* target, int draft_layers,
                                         kernels::Backend* backend,
                                         kernels::Stream* stream)
    : target_(target),
      draft_layers_(draft_layers),
      backend_(backend),
      stream_(stream),
      target_layers_(static_cast<int>(target->config().num_hidden_layers)),
      hidden_size_(target->config().hidden_size),
      num_experts_(target->config().num_experts),
      top_k_(std::clamp<int>(
          static_cast<int>(target->config().num_experts_per_tok), 1,
          static_cast<int>(num_experts_))) {}

CrossModelPredictor::~CrossModelPredictor() {
  // Nothing to report to: the drafter is going away.
  if (open_) stream_->Synchronize().IgnoreError();
}

void CrossModelPredictor::BeginPass(std::span<const int64_t> rows) {
  absl::Status status;
  // A failed Forward() returns without its final wait.
  if (open_) status = stream_->Synchronize();
  open_ = true;
  rows_uploaded_ = false;
  layers_done_ = 0;
  rows_.assign(rows.begin(), rows.end());
  const int64_t m = static_cast<int64_t>(rows_.size());
  const int64_t ids_bytes = int64_t{target_layers_} * m * top_k_ * 4;
  kernels::Backend& b = *backend_;
  for (auto [buf, bytes] : {std::pair{&rows_dev_, m * 4},
                            {&rows_host_, m * 4},
                            {&gathered_, m * hidden_size_ * 4},
                            {&logits_, m * num_experts_ * 4},
                            {&weights_, m * top_k_ * 4},
                            {&ids_, ids_bytes},
                            {&ids_host_, ids_bytes}}) {
    if (status.ok()) status = buf->Reserve(b, bytes);
  }
  ok_ = status.ok() && m > 0;
}

void CrossModelPredictor::OnDraftLayer(int layer, const float* hidden,
                                       int64_t n) {
  if (!ok_) return;
  // A failed prediction costs only this pass's lookahead.
  ok_ = Enqueue(layer, hidden, n).ok();
}

absl::Status CrossModelPredictor::Enqueue(int layer, const float* hidden,
                                          int64_t n) {
  const int64_t m = static_cast<int64_t>(rows_.size());
  const int64_t d = hidden_size_, E = num_experts_, k = top_k_;
  const kernels::Device device = backend_->device();
  kernels::Stream& st = *stream_;
  if (hidden == nullptr || layer != layers_done_ || rows_.back() >= n) {
    return absl::InternalError(absl::StrCat(
        "cross-model prediction: draft layer ", layer, " of ", n, " rows"));
  }
  Tensor all(const_cast<float*>(hidden), DType::kF32, {n, d}, device);
  Tensor x = all;  // m == n: every row drafts (rows are 0 .. n-1)
  if (m < n) {
    // Catch-up rows besides the drafting ones: gather the drafting rows,
    // whose indices go up once a pass.
    if (!rows_uploaded_) {
      std::memcpy(rows_host_.data(), rows_.data(), m * 4);
      MOESERVE_RETURN_IF_ERROR(backend_->CopyToDevice(
          st, rows_dev_.data(), rows_host_.data(), m * 4));
      rows_uploaded_ = true;
    }
    x = Tensor(static_cast<float*>(gathered_.data()), DType::kF32, {m, d},
               device);
    MOESERVE_RETURN_IF_ERROR(
        backend_->GatherRows(st, all,
                             Tensor(static_cast<int32_t*>(rows_dev_.data()),
                                    DType::kI32, {m}, device),
                             x));
  }
  Tensor logits(static_cast<float*>(logits_.data()), DType::kF32, {m, E},
                device);
  Tensor weights(static_cast<float*>(weights_.data()), DType::kF32, {m, k},
                 device);
  const int first = layer * target_layers_ / draft_layers_;
  const int last = (layer + 1) * target_layers_ / draft_layers_;
  for (int t = first; t < last; ++t) {
    Tensor ids(static_cast<int32_t*>(ids_.data()) + t * m * k, DType::kI32,
               {m, k}, device);
    MOESERVE_RETURN_IF_ERROR(target_->ApplyRouter(st, t, x, static_cast<int>(k),
                                                  /*normalize=*/false, logits,
                                                  weights, ids));
  }
  if (layer == draft_layers_ - 1) {
    // One copy of every target layer's ids; Forward()'s wait covers it.
    MOESERVE_RETURN_IF_ERROR(backend_->CopyToHost(
        st, ids_host_.data(), ids_.data(), target_layers_ * m * k * 4));
  }
  layers_done_ = layer + 1;
  return absl::OkStatus();
}

void CrossModelPredictor::AddTo(ExpertLookahead* lookahead, int position) {
  open_ = false;
  if (!ok_ || layers_done_ != draft_layers_) return;
  const int64_t per_layer = static_cast<int64_t>(rows_.size()) * top_k_;
  const int32_t* ids = static_cast<const int32_t*>(ids_host_.data());
  for (int t = 0; t < target_layers_; ++t) {
    AddToLookahead(lookahead, position, t, target_layers_,
                   std::span<const int>(ids + t * per_layer, per_layer));
  }
}

}  // namespace moeserve::engine::spec_decode
