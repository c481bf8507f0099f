#include "engine/moe_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/architecture.h"
#include "engine/internal/status_macros.h"

namespace moeserve::engine {

using KDType = kernels::DType;
using kernels::Tensor;

namespace {

// A bf16 weight as a kernels tensor (weights are read-only; kernels take
// non-const views).
absl::StatusOr<Tensor> WeightTensor(const ModelWeights& w,
                                    const std::string& name) {
  const WeightView* view = w.Find(name);
  if (view == nullptr) {
    return absl::NotFoundError(absl::StrCat("weight ", name, " not loaded"));
  }
  return Tensor::Make(const_cast<void*>(view->data), KDType::kBF16,
                      view->shape.data(), static_cast<int>(view->shape.size()));
}

Tensor F32(std::vector<float>& buf, std::initializer_list<int64_t> shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (static_cast<int64_t>(buf.size()) < numel) buf.resize(numel);
  return Tensor(buf.data(), KDType::kF32, shape);
}

Tensor I32(std::vector<int32_t>& buf, std::initializer_list<int64_t> shape) {
  return Tensor(buf.data(), KDType::kI32, shape);
}

}  // namespace

struct MoeModel::LayerWeights {
  Tensor input_norm, post_norm;
  Tensor q, k, v, o, q_bias, k_bias, v_bias, q_norm, k_norm;
  Tensor router;
  // qwen2_moe's shared expert; invalid elsewhere.
  Tensor shared_gate_proj, shared_up, shared_down, shared_gate;
};

// Activations of one forward pass; grown on demand, reused across calls.
struct MoeModel::Scratch {
  std::vector<int32_t> ids, positions, slots, query_start, block_tables;
  std::vector<int32_t> last_rows, expert_ids, rows;
  std::vector<float> x, h, q, k, v, attn, proj, router_logits, router_weights;
  std::vector<float> moe_out, expert_in, expert_out, expert_ws, row_weights;
  std::vector<float> shared_a, shared_b, shared_out, shared_gate, last;
  std::vector<float> predict_logits, predict_weights;
  std::vector<int32_t> predict_ids;
  std::vector<int32_t> topk_ids;
  int64_t num_seqs = 0;
  int64_t max_blocks = 0;
};

MoeModel::MoeModel(const ModelWeights* weights, kernels::Backend* backend,
                   ExpertProvider* experts,
                   std::unique_ptr<kernels::Stream> stream)
    : weights_(weights),
      backend_(backend),
      experts_(experts),
      stream_(std::move(stream)),
      scratch_(std::make_unique<Scratch>()) {}

MoeModel::~MoeModel() = default;

absl::StatusOr<std::unique_ptr<MoeModel>> MoeModel::Create(
    const ModelWeights* weights, kernels::Backend* backend,
    ExpertProvider* experts) {
  const ModelConfig& c = weights->config();
  const ExpertBlob& blob = weights->expert({0, 0});
  if (blob.up_offset != blob.gate_bytes ||
      blob.down_offset != 2 * blob.gate_bytes) {
    return absl::UnimplementedError(absl::StrCat(
        "expert matrices of ", c.expert_intermediate_size, "x", c.hidden_size,
        " are not contiguous in the packed blob (bf16 size ", blob.gate_bytes,
        " is not a multiple of 64 bytes)"));
  }
  ENGINE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                          backend->CreateStream());
  auto model = std::unique_ptr<MoeModel>(
      new MoeModel(weights, backend, experts, std::move(stream)));
  ENGINE_RETURN_IF_ERROR(model->ResolveWeights());
  return model;
}

absl::Status MoeModel::ResolveWeights() {
  const ModelWeights& w = *weights_;
  const ModelConfig& c = w.config();
  const Architecture& arch = *c.architecture;
  ENGINE_ASSIGN_OR_RETURN(embedding_, WeightTensor(w, arch.EmbeddingName()));
  ENGINE_ASSIGN_OR_RETURN(final_norm_, WeightTensor(w, arch.FinalNormName()));
  if (c.tie_word_embeddings) {
    lm_head_ = embedding_;
  } else {
    ENGINE_ASSIGN_OR_RETURN(lm_head_, WeightTensor(w, arch.LmHeadName()));
  }
  layers_.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& lw = layers_[l];
    const AttentionTensorNames a = arch.AttentionNames(l);
    ENGINE_ASSIGN_OR_RETURN(lw.input_norm,
                            WeightTensor(w, arch.InputNormName(l)));
    ENGINE_ASSIGN_OR_RETURN(lw.post_norm,
                            WeightTensor(w, arch.PostAttentionNormName(l)));
    ENGINE_ASSIGN_OR_RETURN(lw.q, WeightTensor(w, a.q));
    ENGINE_ASSIGN_OR_RETURN(lw.k, WeightTensor(w, a.k));
    ENGINE_ASSIGN_OR_RETURN(lw.v, WeightTensor(w, a.v));
    ENGINE_ASSIGN_OR_RETURN(lw.o, WeightTensor(w, a.o));
    if (c.attention_bias) {
      ENGINE_ASSIGN_OR_RETURN(lw.q_bias, WeightTensor(w, a.q_bias));
      ENGINE_ASSIGN_OR_RETURN(lw.k_bias, WeightTensor(w, a.k_bias));
      ENGINE_ASSIGN_OR_RETURN(lw.v_bias, WeightTensor(w, a.v_bias));
    }
    if (c.qk_norm != QkNorm::kNone) {
      ENGINE_ASSIGN_OR_RETURN(lw.q_norm, WeightTensor(w, a.q_norm));
      ENGINE_ASSIGN_OR_RETURN(lw.k_norm, WeightTensor(w, a.k_norm));
    }
    ENGINE_ASSIGN_OR_RETURN(lw.router, WeightTensor(w, arch.RouterName(l)));
    if (std::optional<SharedExpertTensorNames> s = arch.SharedExpertNames(l);
        s.has_value() && c.shared_expert_intermediate_size > 0) {
      ENGINE_ASSIGN_OR_RETURN(lw.shared_gate_proj,
                              WeightTensor(w, s->mlp.gate));
      ENGINE_ASSIGN_OR_RETURN(lw.shared_up, WeightTensor(w, s->mlp.up));
      ENGINE_ASSIGN_OR_RETURN(lw.shared_down, WeightTensor(w, s->mlp.down));
      ENGINE_ASSIGN_OR_RETURN(lw.shared_gate, WeightTensor(w, s->gate));
    }
  }
  return absl::OkStatus();
}

absl::Status MoeModel::Forward(std::span<const SequenceChunk> batch,
                               KvCache* cache, std::vector<float>* logits) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  if (batch.empty()) return absl::InvalidArgumentError("empty batch");
  // Flatten the batch: token ids, positions, KV slots, per-sequence ranges
  // and block tables.
  s.ids.clear();
  s.positions.clear();
  s.slots.clear();
  s.query_start.assign(1, 0);
  s.last_rows.clear();
  s.num_seqs = static_cast<int64_t>(batch.size());
  s.max_blocks = 1;
  for (const SequenceChunk& seq : batch) {
    const int64_t end = seq.start_position + seq.tokens.size();
    if (seq.tokens.empty() || seq.block_table == nullptr ||
        static_cast<int64_t>(seq.block_table->size()) * cache->block_size() <
            end) {
      return absl::InvalidArgumentError(
          "sequence chunk without tokens or without KV blocks for them");
    }
    if (end > c.max_position_embeddings) {
      return absl::OutOfRangeError(
          absl::StrCat("position ", end - 1, " beyond max_position_embeddings ",
                       c.max_position_embeddings));
    }
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      const int64_t pos = seq.start_position + i;
      s.ids.push_back(seq.tokens[i]);
      s.positions.push_back(static_cast<int32_t>(pos));
      s.slots.push_back((*seq.block_table)[pos / cache->block_size()] *
                            cache->block_size() +
                        pos % cache->block_size());
    }
    s.query_start.push_back(static_cast<int32_t>(s.ids.size()));
    s.last_rows.push_back(static_cast<int32_t>(s.ids.size() - 1));
    s.max_blocks = std::max<int64_t>(s.max_blocks, seq.block_table->size());
  }
  s.block_tables.assign(s.num_seqs * s.max_blocks, 0);
  for (int64_t i = 0; i < s.num_seqs; ++i) {
    std::copy(batch[i].block_table->begin(), batch[i].block_table->end(),
              s.block_tables.begin() + i * s.max_blocks);
  }
  const int64_t n = static_cast<int64_t>(s.ids.size());
  const int64_t d = c.hidden_size;
  kernels::Stream& st = *stream_;

  StepInfo info;
  info.step = step_++;
  info.num_seqs = static_cast<int>(s.num_seqs);
  info.num_tokens = static_cast<int>(n);
  for (const SequenceChunk& seq : batch) {
    if (seq.tokens.size() > 1) info.num_prefill_tokens += seq.tokens.size();
  }
  cache_ = cache;
  experts_->BeginStep(info);
  absl::Status status = RunLayers(n);
  experts_->EndStep();
  ENGINE_RETURN_IF_ERROR(status);
  Tensor x = F32(s.x, {n, d});
  // Final norm and lm_head on each sequence's last token only.
  Tensor last = F32(s.last, {s.num_seqs, d});
  ENGINE_RETURN_IF_ERROR(
      backend_->GatherRows(st, x, I32(s.last_rows, {s.num_seqs}), last));
  ENGINE_RETURN_IF_ERROR(
      backend_->RmsNorm(st, last, final_norm_, c.rms_norm_eps, last));
  logits->resize(s.num_seqs * c.vocab_size);
  Tensor out(logits->data(), KDType::kF32, {s.num_seqs, c.vocab_size});
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, last, lm_head_, {}, out));
  return st.Synchronize();
}

absl::Status MoeModel::Attention(int layer, int64_t n, KvCache* cache) {
  const ModelConfig& c = config();
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size, hd = c.head_dim;
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads;
  Tensor x = F32(s.x, {n, d});
  Tensor h = F32(s.h, {n, d});
  ENGINE_RETURN_IF_ERROR(
      backend_->RmsNorm(st, x, lw.input_norm, c.rms_norm_eps, h));
  Tensor q = F32(s.q, {n, heads * hd});
  Tensor k = F32(s.k, {n, kv * hd});
  Tensor v = F32(s.v, {n, kv * hd});
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.q, lw.q_bias, q));
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.k, lw.k_bias, k));
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.v, lw.v_bias, v));
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (c.qk_norm == QkNorm::kWholeProjection) {
    ENGINE_RETURN_IF_ERROR(backend_->RmsNorm(st, q, lw.q_norm, eps, q));
    ENGINE_RETURN_IF_ERROR(backend_->RmsNorm(st, k, lw.k_norm, eps, k));
  } else if (c.qk_norm == QkNorm::kPerHead) {
    Tensor qh = F32(s.q, {n * heads, hd});
    Tensor kh = F32(s.k, {n * kv, hd});
    ENGINE_RETURN_IF_ERROR(backend_->RmsNorm(st, qh, lw.q_norm, eps, qh));
    ENGINE_RETURN_IF_ERROR(backend_->RmsNorm(st, kh, lw.k_norm, eps, kh));
  }
  Tensor q3 = F32(s.q, {n, heads, hd});
  Tensor k3 = F32(s.k, {n, kv, hd});
  Tensor v3 = F32(s.v, {n, kv, hd});
  Tensor positions = I32(s.positions, {n});
  const float theta = static_cast<float>(c.rope_theta);
  ENGINE_RETURN_IF_ERROR(backend_->RopeRotateHalf(st, q3, positions, theta));
  ENGINE_RETURN_IF_ERROR(backend_->RopeRotateHalf(st, k3, positions, theta));
  const kernels::PagedKvCache pages = cache->layer(layer);
  ENGINE_RETURN_IF_ERROR(
      backend_->KvWrite(st, k3, v3, I32(s.slots, {n}), pages));
  const kernels::AttentionBatch batch{
      I32(s.query_start, {s.num_seqs + 1}), positions,
      I32(s.block_tables, {s.num_seqs, s.max_blocks})};
  Tensor attn = F32(s.attn, {n, heads * hd});
  ENGINE_RETURN_IF_ERROR(backend_->Attention(st, q3, pages, batch, attn));
  Tensor proj = F32(s.proj, {n, d});
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, attn, lw.o, {}, proj));
  return backend_->Add(st, x, proj, x);
}

absl::Status MoeModel::MoeBlock(int layer, int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size;
  Tensor x = F32(s.x, {n, d});
  Tensor h = F32(s.h, {n, d});
  ENGINE_RETURN_IF_ERROR(
      backend_->RmsNorm(st, x, layers_[layer].post_norm, c.rms_norm_eps, h));
  Tensor moe_out = F32(s.moe_out, {n, d});
  std::fill_n(s.moe_out.begin(), n * d, 0.0f);
  ENGINE_RETURN_IF_ERROR(RoutedExperts(layer, n));
  if (layers_[layer].shared_up.valid()) {
    ENGINE_RETURN_IF_ERROR(SharedExpert(layer, n));
  }
  return backend_->Add(st, x, moe_out, x);
}

absl::Status MoeModel::RunLayers(int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  Tensor x = F32(s.x, {n, c.hidden_size});
  ENGINE_RETURN_IF_ERROR(
      backend_->Embedding(*stream_, I32(s.ids, {n}), embedding_, x));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    ENGINE_RETURN_IF_ERROR(Attention(l, n, cache_));
    ENGINE_RETURN_IF_ERROR(MoeBlock(l, n));
  }
  return absl::OkStatus();
}

std::vector<int> MoeModel::PredictExperts(int layer, const float* hidden,
                                          int64_t n, int k) {
  const ModelConfig& c = config();
  const int64_t E = c.num_experts;
  k = std::clamp<int>(k, 1, static_cast<int>(E));
  Scratch& s = *scratch_;
  Tensor h(const_cast<float*>(hidden), KDType::kF32, {n, c.hidden_size});
  std::vector<int> experts;
  // Own buffers: this runs inside RoutedExperts, whose routing is in use.
  if (!Route(layer, h, k, /*normalize=*/false, &s.predict_logits,
             &s.predict_weights, &s.predict_ids)
           .ok()) {
    return experts;  // a failed prediction only costs prefetching
  }
  std::vector<bool> chosen(E, false);
  for (int32_t e : s.predict_ids) chosen[e] = true;
  for (int e = 0; e < E; ++e) {
    if (chosen[e]) experts.push_back(e);
  }
  return experts;
}

absl::Status MoeModel::Route(int layer, const Tensor& h, int k, bool normalize,
                             std::vector<float>* logits,
                             std::vector<float>* weights,
                             std::vector<int32_t>* ids) {
  const int64_t n = h.dim(0), E = config().num_experts;
  Tensor logits_t = F32(*logits, {n, E});
  ENGINE_RETURN_IF_ERROR(
      backend_->MatMul(*stream_, h, layers_[layer].router, {}, logits_t));
  ids->resize(n * k);
  ENGINE_RETURN_IF_ERROR(backend_->RouterTopK(*stream_, logits_t, k, normalize,
                                              F32(*weights, {n, k}),
                                              I32(*ids, {n, k})));
  return stream_->Synchronize();  // routing is read on the host
}

// Router, top-k, then every selected expert once on all of its tokens.
absl::Status MoeModel::RoutedExperts(int layer, int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size, E = c.num_experts;
  const int64_t k = c.num_experts_per_tok, ffn = c.expert_intermediate_size;
  Tensor h = F32(s.h, {n, d});
  ENGINE_RETURN_IF_ERROR(Route(layer, h, static_cast<int>(k), c.norm_topk_prob,
                               &s.router_logits, &s.router_weights,
                               &s.topk_ids));

  // Group (token, weight) pairs by expert, experts in ascending order.
  std::vector<std::vector<int32_t>> rows(E);
  std::vector<std::vector<float>> row_weights(E);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = s.topk_ids[t * k + j];
      rows[e].push_back(static_cast<int32_t>(t));
      row_weights[e].push_back(s.router_weights[t * k + j]);
    }
  }
  std::vector<int> selected, counts;
  for (int e = 0; e < E; ++e) {
    if (rows[e].empty()) continue;
    selected.push_back(e);
    counts.push_back(static_cast<int>(rows[e].size()));
  }
  experts_->BeginLayer(layer, selected, counts, s.h.data(), n);
  Tensor moe_out = F32(s.moe_out, {n, d});
  for (int e : selected) {
    ENGINE_ASSIGN_OR_RETURN(const std::byte* blob_data,
                            experts_->Acquire({layer, e}));
    const int64_t m = static_cast<int64_t>(rows[e].size());
    Tensor row_ids(rows[e].data(), KDType::kI32, {m});
    Tensor in = F32(s.expert_in, {m, d});
    Tensor out = F32(s.expert_out, {m, d});
    Tensor ws = F32(s.expert_ws, {kernels::ExpertFfnWorkspaceElems(m, ffn)});
    Tensor blob(const_cast<std::byte*>(blob_data), KDType::kBF16,
                {3 * ffn * d});
    Tensor w(row_weights[e].data(), KDType::kF32, {m});
    absl::Status status = backend_->GatherRows(st, h, row_ids, in);
    if (status.ok()) status = backend_->ExpertFfn(st, in, blob, ffn, ws, out);
    if (status.ok()) {
      status = backend_->ScaleAddRows(st, out, row_ids, w, moe_out);
    }
    // The blob must stay put until the kernels that read it have run.
    if (status.ok()) status = st.Synchronize();
    experts_->Release({layer, e});
    ENGINE_RETURN_IF_ERROR(status);
  }
  experts_->EndLayer(layer);
  return absl::OkStatus();
}

// qwen2_moe: out += sigmoid(h Wg^T) * down(silu(gate(h)) * up(h)).
absl::Status MoeModel::SharedExpert(int layer, int64_t n) {
  const ModelConfig& c = config();
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size, f = c.shared_expert_intermediate_size;
  Tensor h = F32(s.h, {n, d});
  Tensor a = F32(s.shared_a, {n, f});
  Tensor b = F32(s.shared_b, {n, f});
  Tensor out = F32(s.shared_out, {n, d});
  Tensor gate = F32(s.shared_gate, {n, 1});
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.shared_gate_proj, {}, a));
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.shared_up, {}, b));
  ENGINE_RETURN_IF_ERROR(backend_->SiluMul(st, a, b, a));
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, a, lw.shared_down, {}, out));
  ENGINE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.shared_gate, {}, gate));
  return backend_->SigmoidGatedAdd(st, out, gate, F32(s.moe_out, {n, d}));
}

}  // namespace moeserve::engine
