#include "engine/moe_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/architecture.h"
#include "engine/host_attention.h"
#include "engine/host_experts.h"
#include "engine/internal/dense_graphs.h"
#include "engine/internal/scratch_buffer.h"

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

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

struct MoeModel::LayerWeights {
  Tensor input_norm, post_norm;
  Tensor q, k, v, o, q_bias, k_bias, v_bias, q_norm, k_norm;
  Tensor router;
  // qwen2_moe's shared expert; invalid elsewhere.
  Tensor shared_gate_proj, shared_up, shared_down, shared_gate;
};

// One router evaluation's buffers: device outputs, their host copy (one
// copy into pinned memory) and views of it.
struct MoeModel::RouteBuffers {
  ScratchBuffer logits;  // device F32[n, E]
  ScratchBuffer topk;    // device [weights F32[n, k] | ids I32[n, k]]
  ScratchBuffer host{ScratchBuffer::Where::kPinnedHost};  // copy of topk
  std::span<float> host_weights;                          // [n, k]
  std::span<int32_t> host_ids;                            // [n, k]
};

// Activations of one forward pass in device scratch (grown at the start of
// a step, reused across steps) plus the host-side tables that drive them.
struct MoeModel::Scratch {
  // Device.
  ScratchBuffer x, h, q, k, v, attn, proj, moe_out, expert_in, expert_out,
      expert_ws, shared_a, shared_b, shared_out, shared_gate, last, logits,
      meta, route_table;
  RouteBuffers route, predict;
  // Host: step metadata, uploaded once per step into `meta` as
  // [ids | positions | slots | query_start | last_rows | block_tables].
  std::vector<int32_t> ids, positions, slots, query_start, block_tables;
  std::vector<int32_t> last_rows, meta_host;
  ScratchBuffer meta_staging{ScratchBuffer::Where::kPinnedHost};
  int64_t off_positions = 0, off_slots = 0, off_query_start = 0,
          off_last_rows = 0, off_block_tables = 0;
  // Host: one layer's routing grouped by expert (counting sort), uploaded
  // once per layer into `route_table` as [perm | weights | pairs]: the
  // token of each routed pair, grouped by expert ascending; its router
  // weight (float bits); each token's pair positions ascending (-1 after
  // the last), the order CombineExpertRows sums in.
  ScratchBuffer route_staging{ScratchBuffer::Where::kPinnedHost};
  int64_t route_staging_elems = 0;  // of the layer in progress
  std::vector<int32_t> expert_begin, fill;
  // The experts acquired and not yet computed (ExpertFfnGrouped's groups).
  std::vector<kernels::ExpertGroup> groups;
  std::vector<int> held;
  // The layer's experts computed on the host (ExpertProvider::
  // ComputesOnHost; engine/host_experts.h), ascending, held from their
  // Acquire until the host is done; and each one's seconds.
  std::vector<kernels::ExpertGroup> host_groups;
  std::vector<int> host_held;
  std::vector<double> host_seconds;
  // Host: a split step's micro-batches' query_start, each from 0.
  std::array<std::vector<int32_t>, 2> micro_query_start;
  int64_t num_seqs = 0;
  // Of the Forward() in progress, or of its micro-batch in progress.
  int64_t num_tokens = 0;
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

MoeModel::~MoeModel() {
  if (!graph_pointers_.empty()) {
    // No recorded graph may be in flight when it is destroyed.
    stream_->Synchronize().IgnoreError();
    backend_->DropGraphs(this);
  }
}

absl::StatusOr<std::unique_ptr<MoeModel>> MoeModel::Create(
    const ModelWeights* weights, kernels::Backend* backend,
    ExpertProvider* experts) {
  const ModelConfig& c = weights->config();
  const ExpertBlob& blob = weights->expert({0, 0});
  if (weights->expert_format() == quant::ExpertFormat::kBf16 &&
      (blob.up_offset != blob.gate_bytes ||
       blob.down_offset != 2 * blob.gate_bytes)) {
    return absl::UnimplementedError(absl::StrCat(
        "expert matrices of ", c.expert_intermediate_size, "x", c.hidden_size,
        " are not contiguous in the packed blob (bf16 size ", blob.gate_bytes,
        " is not a multiple of 64 bytes)"));
  }
  if (experts->device() != backend->device()) {
    return absl::FailedPreconditionError(
        absl::StrCat("backend ", backend->name(), " computes on ",
                     kernels::DeviceName(backend->device()),
                     " but the expert provider hands out blobs in ",
                     kernels::DeviceName(experts->device()),
                     " memory (use an offload stack on the backend's device)"));
  }
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            backend->CreateStream());
  auto model = std::unique_ptr<MoeModel>(
      new MoeModel(weights, backend, experts, std::move(stream)));
  MOESERVE_RETURN_IF_ERROR(model->ResolveWeights());
  if (backend->device() != kernels::Device::kCpu) {
    MOESERVE_RETURN_IF_ERROR(model->UploadWeights());
  }
  MOESERVE_RETURN_IF_ERROR(
      experts->AttachCompute(backend, model->stream_.get()));
  experts->AttachRouterProbe(model.get());
  return model;
}

absl::Status MoeModel::EnableHostAttention(
    kernels::Backend* host, const HostAttentionOptions& options) {
  if (options.split_min_attended < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host attention split_min_attended ",
                     options.split_min_attended, " < 0"));
  }
  MOESERVE_ASSIGN_OR_RETURN(host_attention_,
                            HostAttention::Create(host, backend_));
  host_options_ = options;
  return absl::OkStatus();
}

absl::Status MoeModel::UploadWeights() {
  // Every distinct weight tensor (tied embeddings appear twice).
  std::vector<Tensor*> all = {&embedding_, &final_norm_, &lm_head_};
  for (LayerWeights& lw : layers_) {
    for (Tensor* t : {&lw.input_norm, &lw.post_norm, &lw.q, &lw.k, &lw.v, &lw.o,
                      &lw.q_bias, &lw.k_bias, &lw.v_bias, &lw.q_norm,
                      &lw.k_norm, &lw.router, &lw.shared_gate_proj,
                      &lw.shared_up, &lw.shared_down, &lw.shared_gate}) {
      if (t->valid()) all.push_back(t);
    }
  }
  // Each distinct host tensor once: its offset in the device copy.
  absl::flat_hash_map<const void*, int64_t> offset_of;
  std::vector<const Tensor*> distinct;
  int64_t total = 0;
  for (const Tensor* t : all) {
    if (offset_of.try_emplace(t->raw(), total).second) {
      distinct.push_back(t);
      total += Align256(t->nbytes());
    }
  }
  MOESERVE_ASSIGN_OR_RETURN(device_weights_, backend_->Allocate(total));
  std::byte* base = static_cast<std::byte*>(device_weights_->data());
  for (const Tensor* t : distinct) {
    MOESERVE_RETURN_IF_ERROR(backend_->CopyToDevice(
        *stream_, base + offset_of[t->raw()], t->raw(), t->nbytes()));
  }
  for (Tensor* t : all) {
    std::byte* dst = base + offset_of[t->raw()];
    int64_t shape[Tensor::kMaxDims];
    for (int i = 0; i < t->rank(); ++i) shape[i] = t->dim(i);
    MOESERVE_ASSIGN_OR_RETURN(*t, Tensor::Make(dst, t->dtype(), shape,
                                               t->rank(), backend_->device()));
  }
  return stream_->Synchronize();
}

absl::Status MoeModel::ResolveWeights() {
  const ModelWeights& w = *weights_;
  const ModelConfig& c = w.config();
  const Architecture& arch = *c.architecture;
  MOESERVE_ASSIGN_OR_RETURN(embedding_, WeightTensor(w, arch.EmbeddingName()));
  MOESERVE_ASSIGN_OR_RETURN(final_norm_, WeightTensor(w, arch.FinalNormName()));
  if (c.tie_word_embeddings) {
    lm_head_ = embedding_;
  } else {
    MOESERVE_ASSIGN_OR_RETURN(lm_head_, WeightTensor(w, arch.LmHeadName()));
  }
  layers_.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    LayerWeights& lw = layers_[l];
    const AttentionTensorNames a = arch.AttentionNames(l);
    MOESERVE_ASSIGN_OR_RETURN(lw.input_norm,
                              WeightTensor(w, arch.InputNormName(l)));
    MOESERVE_ASSIGN_OR_RETURN(lw.post_norm,
                              WeightTensor(w, arch.PostAttentionNormName(l)));
    MOESERVE_ASSIGN_OR_RETURN(lw.q, WeightTensor(w, a.q));
    MOESERVE_ASSIGN_OR_RETURN(lw.k, WeightTensor(w, a.k));
    MOESERVE_ASSIGN_OR_RETURN(lw.v, WeightTensor(w, a.v));
    MOESERVE_ASSIGN_OR_RETURN(lw.o, WeightTensor(w, a.o));
    if (c.attention_bias) {
      MOESERVE_ASSIGN_OR_RETURN(lw.q_bias, WeightTensor(w, a.q_bias));
      MOESERVE_ASSIGN_OR_RETURN(lw.k_bias, WeightTensor(w, a.k_bias));
      MOESERVE_ASSIGN_OR_RETURN(lw.v_bias, WeightTensor(w, a.v_bias));
    }
    if (c.qk_norm != QkNorm::kNone) {
      MOESERVE_ASSIGN_OR_RETURN(lw.q_norm, WeightTensor(w, a.q_norm));
      MOESERVE_ASSIGN_OR_RETURN(lw.k_norm, WeightTensor(w, a.k_norm));
    }
    MOESERVE_ASSIGN_OR_RETURN(lw.router, WeightTensor(w, arch.RouterName(l)));
    if (std::optional<SharedExpertTensorNames> s = arch.SharedExpertNames(l);
        s.has_value() && c.shared_expert_intermediate_size > 0) {
      MOESERVE_ASSIGN_OR_RETURN(lw.shared_gate_proj,
                                WeightTensor(w, s->mlp.gate));
      MOESERVE_ASSIGN_OR_RETURN(lw.shared_up, WeightTensor(w, s->mlp.up));
      MOESERVE_ASSIGN_OR_RETURN(lw.shared_down, WeightTensor(w, s->mlp.down));
      MOESERVE_ASSIGN_OR_RETURN(lw.shared_gate, WeightTensor(w, s->gate));
    }
  }
  return absl::OkStatus();
}

absl::Status MoeModel::ReserveScratch(int64_t n, int64_t num_seqs, int64_t rows,
                                      int64_t max_blocks) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Backend& b = *backend_;
  const int64_t d = c.hidden_size, hd = c.head_dim, E = c.num_experts;
  const int64_t qd = c.num_attention_heads * hd;
  const int64_t kvd = c.num_key_value_heads * hd;
  const int64_t k = c.num_experts_per_tok;
  const int64_t f = 4;  // sizeof(float) == sizeof(int32_t)
  for (ScratchBuffer* buf :
       {&s.x, &s.h, &s.proj, &s.moe_out, &s.expert_in, &s.shared_out}) {
    MOESERVE_RETURN_IF_ERROR(buf->Reserve(b, n * d * f));
  }
  // One row per routed (token, expert) pair.
  const int64_t pairs = n * k;
  MOESERVE_RETURN_IF_ERROR(s.expert_out.Reserve(b, pairs * d * f));
  MOESERVE_RETURN_IF_ERROR(s.q.Reserve(b, n * qd * f));
  MOESERVE_RETURN_IF_ERROR(s.attn.Reserve(b, n * qd * f));
  MOESERVE_RETURN_IF_ERROR(s.k.Reserve(b, n * kvd * f));
  MOESERVE_RETURN_IF_ERROR(s.v.Reserve(b, n * kvd * f));
  MOESERVE_RETURN_IF_ERROR(
      s.expert_ws.Reserve(b, kernels::GroupedExpertWorkspaceElems(
                                 pairs, c.expert_intermediate_size, d) *
                                 f));
  const int64_t sf = std::max<int64_t>(1, c.shared_expert_intermediate_size);
  MOESERVE_RETURN_IF_ERROR(s.shared_a.Reserve(b, n * sf * f));
  MOESERVE_RETURN_IF_ERROR(s.shared_b.Reserve(b, n * sf * f));
  MOESERVE_RETURN_IF_ERROR(s.shared_gate.Reserve(b, n * f));
  MOESERVE_RETURN_IF_ERROR(s.last.Reserve(b, rows * d * f));
  MOESERVE_RETURN_IF_ERROR(s.logits.Reserve(b, rows * c.vocab_size * f));
  MOESERVE_RETURN_IF_ERROR(s.route_table.Reserve(b, 3 * pairs * f));
  MOESERVE_RETURN_IF_ERROR(s.route_staging.Reserve(b, 3 * pairs * f));
  s.expert_begin.reserve(E + 1);
  s.fill.reserve(E);
  s.groups.reserve(E);
  s.held.reserve(E);
  if (host_attention_ != nullptr) {
    MOESERVE_RETURN_IF_ERROR(host_attention_->Reserve(
        n, c.num_attention_heads, c.num_key_value_heads, hd));
  }
  if (HostExperts* host = experts_->host_compute(); host != nullptr) {
    MOESERVE_RETURN_IF_ERROR(
        host->Reserve(n, pairs, d, c.expert_intermediate_size));
    s.host_groups.reserve(E);
    s.host_held.reserve(E);
    s.host_seconds.reserve(E);
  }
  // The prediction probe may ask for up to E experts a row.
  for (RouteBuffers* r : {&s.route, &s.predict}) {
    MOESERVE_RETURN_IF_ERROR(r->logits.Reserve(b, n * E * f));
    MOESERVE_RETURN_IF_ERROR(r->topk.Reserve(b, 2 * n * E * f));
    MOESERVE_RETURN_IF_ERROR(r->host.Reserve(b, 2 * n * E * f));
  }
  const int64_t meta = 3 * n + num_seqs + rows + 1 + num_seqs * max_blocks;
  MOESERVE_RETURN_IF_ERROR(s.meta_staging.Reserve(b, meta * f));
  return s.meta.Reserve(b, meta * f);
}

absl::Status MoeModel::Forward(std::span<const SequenceChunk> batch,
                               KvCache* cache, std::vector<float>* logits,
                               const ForwardOptions& options) {
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
    if (seq.num_logits < 1 ||
        seq.num_logits > static_cast<int64_t>(seq.tokens.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_logits ", seq.num_logits, " outside [1, ",
                       seq.tokens.size(), "]"));
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
    for (int j = seq.num_logits; j >= 1; --j) {
      s.last_rows.push_back(static_cast<int32_t>(s.ids.size() - j));
    }
    s.max_blocks = std::max<int64_t>(s.max_blocks, seq.block_table->size());
  }
  const int64_t n = static_cast<int64_t>(s.ids.size());
  const int64_t rows = static_cast<int64_t>(s.last_rows.size());
  // Graphs (internal/dense_graphs.h): decode and verify steps, keyed by
  // their shape, with the block-table stride padded to its bucket. Not
  // with host attention: its host round trip is inside the dense segment.
  const std::optional<std::array<int64_t, 4>> graph_shape =
      backend_->graphs_enabled() && host_attention_ == nullptr
          ? DenseGraphShape(n, s.num_seqs, rows, s.max_blocks)
          : std::nullopt;
  graph_step_ = graph_shape.has_value();
  if (graph_step_) graph_shape_ = *graph_shape;
  router_ready_ = -1;
  s.max_blocks = BlockTableStride(graph_step_, s.max_blocks);
  s.block_tables.assign(s.num_seqs * s.max_blocks, 0);
  for (int64_t i = 0; i < s.num_seqs; ++i) {
    std::copy(batch[i].block_table->begin(), batch[i].block_table->end(),
              s.block_tables.begin() + i * s.max_blocks);
  }
  s.num_tokens = n;
  // Host attention over two micro-batches (header comment): the sequence
  // boundary nearest half the tokens, so that both halves carry about the
  // same device work.
  split_step_ = false;
  if (host_attention_ != nullptr && host_options_.split_min_attended > 0 &&
      s.num_seqs >= 2 && c.num_hidden_layers > 0) {
    int64_t attended = 0;  // keys the step's queries read
    for (int32_t pos : s.positions) attended += pos + 1;
    split_step_ = attended >= host_options_.split_min_attended;
  }
  row0_ = 0;
  if (split_step_) {
    int64_t cut = 1;
    for (int64_t i = 2; i < s.num_seqs; ++i) {
      if (std::abs(2 * s.query_start[i] - n) <
          std::abs(2 * s.query_start[cut] - n)) {
        cut = i;
      }
    }
    micro_[0] = {0, cut, 0, s.query_start[cut]};
    micro_[1] = {cut, s.num_seqs - cut, s.query_start[cut],
                 n - s.query_start[cut]};
    for (int m = 0; m < 2; ++m) {
      std::vector<int32_t>& qs = s.micro_query_start[m];
      qs.assign(s.query_start.begin() + micro_[m].seq0,
                s.query_start.begin() + micro_[m].seq0 + micro_[m].seqs + 1);
      for (int32_t& q : qs) q -= static_cast<int32_t>(micro_[m].row0);
    }
  }
  const int64_t d = c.hidden_size;
  kernels::Stream& st = *stream_;
  MOESERVE_RETURN_IF_ERROR(ReserveScratch(n, s.num_seqs, rows, s.max_blocks));
  if (graph_step_) MOESERVE_RETURN_IF_ERROR(CheckGraphPointers(cache));

  // One upload of the step's metadata.
  s.meta_host.clear();
  // Appends `part` and returns where it starts.
  auto append = [&s](const std::vector<int32_t>& part) {
    const int64_t at = static_cast<int64_t>(s.meta_host.size());
    s.meta_host.insert(s.meta_host.end(), part.begin(), part.end());
    return at;
  };
  append(s.ids);  // at 0
  s.off_positions = append(s.positions);
  s.off_slots = append(s.slots);
  s.off_query_start = append(s.query_start);
  s.off_last_rows = append(s.last_rows);
  s.off_block_tables = append(s.block_tables);
  // Through pinned memory: the previous step's upload has completed (the
  // step ended with a Synchronize).
  const int64_t meta_bytes =
      static_cast<int64_t>(s.meta_host.size() * sizeof(int32_t));
  std::memcpy(s.meta_staging.data(), s.meta_host.data(), meta_bytes);
  MOESERVE_RETURN_IF_ERROR(backend_->CopyToDevice(
      st, s.meta.data(), s.meta_staging.data(), meta_bytes));

  StepInfo info;
  info.step = step_++;
  info.num_seqs = static_cast<int>(s.num_seqs);
  info.num_tokens = static_cast<int>(n);
  for (const SequenceChunk& seq : batch) {
    if (seq.num_logits > 1) {
      info.num_verify_tokens += seq.tokens.size();
    } else if (seq.tokens.size() > 1) {
      info.num_prefill_tokens += seq.tokens.size();
    }
  }
  cache_ = cache;
  active_experts_ = options.experts != nullptr ? options.experts : experts_;
  routing_ = options.routing;
  active_experts_->BeginStep(info);
  absl::Status status = split_step_ ? RunLayersSplit(n) : RunLayers(n);
  active_experts_->EndStep();
  MOESERVE_RETURN_IF_ERROR(status);
  Tensor x = F32(s.x, {n, d});
  Tensor last = F32(s.last, {rows, d});
  Tensor out = F32(s.logits, {rows, c.vocab_size});
  // The last dense segment: the last layer's tail, then the final norm and
  // lm_head on the rows that want logits only.
  const int layers = c.num_hidden_layers;
  MOESERVE_RETURN_IF_ERROR(Dense(layers, [&]() -> absl::Status {
    if (layers > 0) {
      // A split step ran each micro-batch's tail already.
      if (!split_step_) MOESERVE_RETURN_IF_ERROR(LayerTail(layers - 1, n));
    } else {
      MOESERVE_RETURN_IF_ERROR(
          backend_->Embedding(st, I32(s.meta, 0, {n}), embedding_, x));
    }
    MOESERVE_RETURN_IF_ERROR(backend_->GatherRows(
        st, x, I32(s.meta, s.off_last_rows, {rows}), last));
    MOESERVE_RETURN_IF_ERROR(
        backend_->RmsNorm(st, last, final_norm_, c.rms_norm_eps, last));
    return backend_->MatMul(st, last, lm_head_, {}, out);
  }));
  logits->resize(rows * c.vocab_size);
  MOESERVE_RETURN_IF_ERROR(
      backend_->CopyToHost(st, logits->data(), out.raw(), out.nbytes()));
  return st.Synchronize();
}

Tensor MoeModel::F32(const ScratchBuffer& buf,
                     std::initializer_list<int64_t> shape,
                     int64_t offset) const {
  return Tensor(static_cast<float*>(buf.data()) + offset, KDType::kF32, shape,
                backend_->device());
}

Tensor MoeModel::I32(const ScratchBuffer& buf, int64_t offset,
                     std::initializer_list<int64_t> shape) const {
  return Tensor(static_cast<int32_t*>(buf.data()) + offset, KDType::kI32, shape,
                backend_->device());
}

absl::Status MoeModel::Attention(int layer, int64_t n, KvCache* cache) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t hd = c.head_dim;
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads;
  MOESERVE_RETURN_IF_ERROR(AttentionInputs(layer, n));
  if (host_attention_ != nullptr) {
    MOESERVE_RETURN_IF_ERROR(AttendOnHost(layer, n));
  } else {
    const kernels::PagedKvCache pages = cache->layer(layer);
    MOESERVE_RETURN_IF_ERROR(
        backend_->KvWrite(st, F32(s.k, {n, kv, hd}), F32(s.v, {n, kv, hd}),
                          I32(s.meta, s.off_slots, {n}), pages));
    const kernels::AttentionBatch batch{
        I32(s.meta, s.off_query_start, {s.num_seqs + 1}),
        I32(s.meta, s.off_positions, {n}),
        I32(s.meta, s.off_block_tables, {s.num_seqs, s.max_blocks})};
    MOESERVE_RETURN_IF_ERROR(backend_->Attention(st, F32(s.q, {n, heads, hd}),
                                                 pages, batch,
                                                 F32(s.attn, {n, heads * hd})));
  }
  return AttentionOutput(layer, n);
}

absl::Status MoeModel::AttentionInputs(int layer, int64_t n) {
  const ModelConfig& c = config();
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size, hd = c.head_dim;
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads;
  const int64_t r = row0_;
  Tensor x = F32(s.x, {n, d}, r * d);
  Tensor h = F32(s.h, {n, d}, r * d);
  MOESERVE_RETURN_IF_ERROR(
      backend_->RmsNorm(st, x, lw.input_norm, c.rms_norm_eps, h));
  Tensor q = F32(s.q, {n, heads * hd}, r * heads * hd);
  Tensor k = F32(s.k, {n, kv * hd}, r * kv * hd);
  Tensor v = F32(s.v, {n, kv * hd}, r * kv * hd);
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.q, lw.q_bias, q));
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.k, lw.k_bias, k));
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.v, lw.v_bias, v));
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (c.qk_norm == QkNorm::kWholeProjection) {
    MOESERVE_RETURN_IF_ERROR(backend_->RmsNorm(st, q, lw.q_norm, eps, q));
    MOESERVE_RETURN_IF_ERROR(backend_->RmsNorm(st, k, lw.k_norm, eps, k));
  } else if (c.qk_norm == QkNorm::kPerHead) {
    Tensor qh = F32(s.q, {n * heads, hd}, r * heads * hd);
    Tensor kh = F32(s.k, {n * kv, hd}, r * kv * hd);
    MOESERVE_RETURN_IF_ERROR(backend_->RmsNorm(st, qh, lw.q_norm, eps, qh));
    MOESERVE_RETURN_IF_ERROR(backend_->RmsNorm(st, kh, lw.k_norm, eps, kh));
  }
  Tensor q3 = F32(s.q, {n, heads, hd}, r * heads * hd);
  Tensor k3 = F32(s.k, {n, kv, hd}, r * kv * hd);
  Tensor positions = I32(s.meta, s.off_positions + r, {n});
  const float theta = static_cast<float>(c.rope_theta);
  MOESERVE_RETURN_IF_ERROR(backend_->RopeRotateHalf(st, q3, positions, theta));
  return backend_->RopeRotateHalf(st, k3, positions, theta);
}

absl::Status MoeModel::AttentionOutput(int layer, int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size, qd = c.num_attention_heads * c.head_dim;
  const int64_t r = row0_;
  Tensor x = F32(s.x, {n, d}, r * d);
  Tensor proj = F32(s.proj, {n, d}, r * d);
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, F32(s.attn, {n, qd}, r * qd),
                                            layers_[layer].o, {}, proj));
  return backend_->Add(st, x, proj, x);
}

absl::Status MoeModel::CopyRowsDown(int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  HostAttention& host = *host_attention_;
  const int64_t qd = c.num_attention_heads * c.head_dim;
  const int64_t kvd = c.num_key_value_heads * c.head_dim;
  const int64_t r = row0_;
  // Three copies, one wait: the host needs them now.
  MOESERVE_RETURN_IF_ERROR(backend_->CopyToHost(
      st, host.q() + r * qd, static_cast<float*>(s.q.data()) + r * qd,
      n * qd * 4));
  MOESERVE_RETURN_IF_ERROR(backend_->CopyToHost(
      st, host.k() + r * kvd, static_cast<float*>(s.k.data()) + r * kvd,
      n * kvd * 4));
  MOESERVE_RETURN_IF_ERROR(backend_->CopyToHost(
      st, host.v() + r * kvd, static_cast<float*>(s.v.data()) + r * kvd,
      n * kvd * 4));
  return st.Synchronize();
}

absl::Status MoeModel::CopyRowsUp(int64_t n) {
  const int64_t qd = config().num_attention_heads * config().head_dim;
  const int64_t r = row0_;
  // The output projection follows on the stream; the host writes these rows
  // of out() again only after the next CopyRowsDown's wait, which comes
  // after this copy on the same stream.
  return backend_->CopyToDevice(
      *stream_, static_cast<float*>(scratch_->attn.data()) + r * qd,
      host_attention_->out() + r * qd, n * qd * 4);
}

absl::Status MoeModel::AttendOnHost(int layer, int64_t n) {
  Scratch& s = *scratch_;
  MOESERVE_RETURN_IF_ERROR(CopyRowsDown(n));
  // The whole step: every sequence, query_start as Forward built it.
  MOESERVE_RETURN_IF_ERROR(host_attention_->Run(
      HostJob(layer, {.seq0 = 0, .seqs = s.num_seqs, .row0 = 0, .rows = n},
              s.query_start)));
  return CopyRowsUp(n);
}

HostAttention::Job MoeModel::HostJob(int layer, const MicroBatch& mb,
                                     std::vector<int32_t>& query_start) const {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  const kernels::Device cpu = kernels::Device::kCpu;
  // The step's metadata, host side (what Forward uploaded into meta).
  return HostAttention::Job{
      .row0 = mb.row0,
      .n = mb.rows,
      .heads = c.num_attention_heads,
      .kv_heads = c.num_key_value_heads,
      .head_dim = c.head_dim,
      .slots = Tensor(s.slots.data() + mb.row0, KDType::kI32, {mb.rows}, cpu),
      .cache = cache_->layer(layer),
      .batch = {
          Tensor(query_start.data(), KDType::kI32, {mb.seqs + 1}, cpu),
          Tensor(s.positions.data() + mb.row0, KDType::kI32, {mb.rows}, cpu),
          Tensor(s.block_tables.data() + mb.seq0 * s.max_blocks, KDType::kI32,
                 {mb.seqs, s.max_blocks}, cpu)}};
}

void MoeModel::UseRows(int micro) {
  row0_ = micro_[micro].row0;
  scratch_->num_tokens = micro_[micro].rows;
}

void MoeModel::UseAllRows() {
  row0_ = 0;
  scratch_->num_tokens = static_cast<int64_t>(scratch_->ids.size());
}

absl::Status MoeModel::MicroMoe(int layer, int micro) {
  UseRows(micro);
  const int64_t m = micro_[micro].rows;
  MOESERVE_RETURN_IF_ERROR(RouterInputs(layer, m));
  router_ready_ = layer;
  MOESERVE_RETURN_IF_ERROR(RoutedExperts(layer, m));
  return LayerTail(layer, m);
}

// Figure 5 of seed 002, pipelined across layers: the host attends A(l)
// while the device runs B's MoE block of layer l-1 and B's Other1, and
// attends B(l) while the device runs A's Other2 and MoE block of layer l.
// The device waits for the host only in layer 0 (for A) and where the
// host is the slower side. The expert provider sees A(l), B(l), A(l+1),
// B(l+1), ...: each layer twice in a row.
absl::Status MoeModel::RunLayersSplit(int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  HostAttention& host = *host_attention_;
  int in_flight = 0;
  auto start = [&](int layer, int micro) -> absl::Status {
    UseRows(micro);
    MOESERVE_RETURN_IF_ERROR(AttentionInputs(layer, micro_[micro].rows));
    MOESERVE_RETURN_IF_ERROR(CopyRowsDown(micro_[micro].rows));
    host.Start(HostJob(layer, micro_[micro], s.micro_query_start[micro]));
    ++in_flight;
    return absl::OkStatus();
  };
  auto finish = [&](int layer, int micro) -> absl::Status {
    --in_flight;
    MOESERVE_RETURN_IF_ERROR(host.Wait());
    UseRows(micro);
    MOESERVE_RETURN_IF_ERROR(CopyRowsUp(micro_[micro].rows));
    return AttentionOutput(layer, micro_[micro].rows);
  };
  absl::Status status = [&]() -> absl::Status {
    UseAllRows();
    MOESERVE_RETURN_IF_ERROR(backend_->Embedding(*stream_, I32(s.meta, 0, {n}),
                                                 embedding_,
                                                 F32(s.x, {n, c.hidden_size})));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      MOESERVE_RETURN_IF_ERROR(start(l, 0));
      if (l > 0) MOESERVE_RETURN_IF_ERROR(MicroMoe(l - 1, 1));
      MOESERVE_RETURN_IF_ERROR(start(l, 1));
      MOESERVE_RETURN_IF_ERROR(finish(l, 0));
      MOESERVE_RETURN_IF_ERROR(MicroMoe(l, 0));
      MOESERVE_RETURN_IF_ERROR(finish(l, 1));
    }
    return MicroMoe(c.num_hidden_layers - 1, 1);
  }();
  // The worker must be done with the buffers before anything reuses them.
  while (in_flight > 0) {
    --in_flight;
    host.Wait().IgnoreError();
  }
  UseAllRows();
  return status;
}

absl::Status MoeModel::RouterInputs(int layer, int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size;
  Tensor x = F32(s.x, {n, d}, row0_ * d);
  Tensor h = F32(s.h, {n, d}, row0_ * d);
  MOESERVE_RETURN_IF_ERROR(
      backend_->RmsNorm(st, x, layers_[layer].post_norm, c.rms_norm_eps, h));
  Tensor moe_out = F32(s.moe_out, {n, d}, row0_ * d);
  MOESERVE_RETURN_IF_ERROR(backend_->Zero(st, moe_out.raw(), moe_out.nbytes()));
  return EnqueueRouter(layer, h, static_cast<int>(c.num_experts_per_tok),
                       c.norm_topk_prob, s.route);
}

absl::Status MoeModel::LayerTail(int layer, int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  const int64_t d = c.hidden_size;
  if (layers_[layer].shared_up.valid()) {
    MOESERVE_RETURN_IF_ERROR(SharedExpert(layer, n));
  }
  Tensor x = F32(s.x, {n, d}, row0_ * d);
  return backend_->Add(*stream_, x, F32(s.moe_out, {n, d}, row0_ * d), x);
}

// Per layer: one dense segment up to the router's top-k (the previous
// layer's tail, attention, the router's inputs), then the routed experts,
// which read the routing on the host (Route copies the top-k RouterInputs
// left in scratch and waits: the layer's one sync).
absl::Status MoeModel::RunLayers(int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    MOESERVE_RETURN_IF_ERROR(Dense(l, [&]() -> absl::Status {
      if (l == 0) {
        MOESERVE_RETURN_IF_ERROR(
            backend_->Embedding(*stream_, I32(s.meta, 0, {n}), embedding_,
                                F32(s.x, {n, c.hidden_size})));
      } else {
        MOESERVE_RETURN_IF_ERROR(LayerTail(l - 1, n));
      }
      MOESERVE_RETURN_IF_ERROR(Attention(l, n, cache_));
      return RouterInputs(l, n);
    }));
    // Set here, not in the body: a replayed graph does not call it.
    router_ready_ = l;
    MOESERVE_RETURN_IF_ERROR(RoutedExperts(l, n));
  }
  return absl::OkStatus();
}

absl::Status MoeModel::Dense(int64_t segment,
                             absl::FunctionRef<absl::Status()> body) {
  if (!graph_step_) return body();
  return backend_
      ->RunGraph(*stream_, kernels::GraphKey{this, segment, graph_shape_}, body)
      .status();
}

absl::Status MoeModel::CheckGraphPointers(KvCache* cache) {
  Scratch& s = *scratch_;
  // Reused: no host allocation in a warm step.
  std::vector<const void*>& now = graph_pointers_now_;
  now.clear();
  for (const ScratchBuffer* buf :
       {&s.x, &s.h, &s.q, &s.k, &s.v, &s.attn, &s.proj, &s.moe_out, &s.shared_a,
        &s.shared_b, &s.shared_out, &s.shared_gate, &s.last, &s.logits, &s.meta,
        &s.route.logits, &s.route.topk}) {
    now.push_back(buf->data());
  }
  now.push_back(cache);
  for (int l = 0; l < config().num_hidden_layers; ++l) {
    const kernels::PagedKvCache pages = cache->layer(l);
    now.push_back(pages.k_pool.raw());
    now.push_back(pages.v_pool.raw());
  }
  if (now == graph_pointers_) return absl::OkStatus();
  if (!graph_pointers_.empty()) {
    // Recorded against buffers that have moved: none may be in flight when
    // they go (the previous step normally ended with a wait already).
    MOESERVE_RETURN_IF_ERROR(stream_->Synchronize());
    backend_->DropGraphs(this);
  }
  graph_pointers_.swap(now);
  return absl::OkStatus();
}

std::vector<int> MoeModel::PredictExperts(int layer, const float* hidden,
                                          int64_t n, int k) {
  const ModelConfig& c = config();
  const int64_t E = c.num_experts;
  k = std::clamp<int>(k, 1, static_cast<int>(E));
  Scratch& s = *scratch_;
  std::vector<int> experts;
  if (hidden == nullptr || n <= 0 || layer < 0 ||
      layer >= c.num_hidden_layers) {
    return experts;
  }
  Tensor h(const_cast<float*>(hidden), KDType::kF32, {n, c.hidden_size},
           backend_->device());
  // Own buffers: this runs inside RoutedExperts, whose routing is in use.
  if (!Route(layer, h, k, /*normalize=*/false, s.predict).ok()) {
    return experts;  // a failed prediction only costs prefetching
  }
  std::vector<bool> chosen(E, false);
  for (int32_t e : s.predict.host_ids) chosen[e] = true;
  for (int e = 0; e < E; ++e) {
    if (chosen[e]) experts.push_back(e);
  }
  return experts;
}

absl::Status MoeModel::EnqueueRouter(int layer, const Tensor& h, int k,
                                     bool normalize, RouteBuffers& r) {
  const int64_t n = h.dim(0), E = config().num_experts;
  if (r.logits.bytes() < n * E * 4 || r.topk.bytes() < 2 * n * k * 4 ||
      r.host.bytes() < 2 * n * k * 4) {
    return absl::InternalError("router scratch not reserved");
  }
  return ApplyRouter(*stream_, layer, h, k, normalize, F32(r.logits, {n, E}),
                     F32(r.topk, {n, k}), I32(r.topk, n * k, {n, k}));
}

absl::Status MoeModel::ApplyRouter(kernels::Stream& stream, int layer,
                                   const Tensor& h, int k, bool normalize,
                                   const Tensor& logits, const Tensor& weights,
                                   const Tensor& ids) {
  MOESERVE_RETURN_IF_ERROR(
      backend_->MatMul(stream, h, layers_[layer].router, {}, logits));
  return backend_->RouterTopK(stream, logits, k, normalize, weights, ids);
}

absl::Status MoeModel::Route(int layer, const Tensor& h, int k, bool normalize,
                             RouteBuffers& r) {
  const int64_t n = h.dim(0);
  kernels::Stream& st = *stream_;
  if (&r == &scratch_->route && router_ready_ == layer) {
    // RouterInputs enqueued this layer's router (in its dense segment).
    router_ready_ = -1;
  } else {
    MOESERVE_RETURN_IF_ERROR(EnqueueRouter(layer, h, k, normalize, r));
  }
  // Routing is read on the host: it decides which experts to fetch. One
  // copy of weights and ids (adjacent) into pinned memory, and the layer's
  // one wait.
  MOESERVE_RETURN_IF_ERROR(
      backend_->CopyToHost(st, r.host.data(), r.topk.data(), 2 * n * k * 4));
  r.host_weights = std::span<float>(static_cast<float*>(r.host.data()), n * k);
  r.host_ids =
      std::span<int32_t>(static_cast<int32_t*>(r.host.data()) + n * k, n * k);
  return st.Synchronize();
}

// Router, top-k, then every selected expert once on all of its tokens, the
// experts ready in the fast tier together in one grouped op, and one
// combine in ascending expert order per token.
absl::Status MoeModel::RoutedExperts(int layer, int64_t n) {
  const ModelConfig& c = config();
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size, E = c.num_experts;
  const int64_t k = c.num_experts_per_tok;
  Tensor h = F32(s.h, {n, d}, row0_ * d);
  MOESERVE_RETURN_IF_ERROR(
      Route(layer, h, static_cast<int>(k), c.norm_topk_prob, s.route));
  if (routing_ != nullptr) {
    routing_->Filter(layer, n, static_cast<int>(k), s.route.host_ids,
                     s.route.host_weights);
  }
  for (int32_t e : s.route.host_ids) {
    if (e < -1 || e >= E || (e == -1 && routing_ == nullptr)) {
      return absl::InternalError(
          absl::StrCat("router of layer ", layer, " picked expert ", e));
    }
  }
  const int64_t routed = GroupRouting(n, k);
  std::vector<int> selected, counts;
  for (int e = 0; e < E; ++e) {
    const int count = s.expert_begin[e + 1] - s.expert_begin[e];
    if (count == 0) continue;
    selected.push_back(e);
    counts.push_back(count);
  }
  active_experts_->BeginLayer(layer, selected, counts,
                              static_cast<float*>(s.h.data()) + row0_ * d, n);
  // A routing filter may have dropped every choice of the layer.
  if (routed > 0) {
    // The previous layer's upload from the same pinned buffer has
    // completed: this layer's Route synchronized the stream.
    MOESERVE_RETURN_IF_ERROR(backend_->CopyToDevice(
        st, s.route_table.data(), s.route_staging.data(),
        s.route_staging_elems * static_cast<int64_t>(sizeof(int32_t))));
  }
  // Hybrid execution: the experts computed on the host start first, so that
  // the host works while the device computes the others.
  absl::Status status = StartHostExperts(layer, n, routed, selected);
  for (int e : selected) {
    if (!s.host_held.empty() &&
        std::binary_search(s.host_held.begin(), s.host_held.end(), e)) {
      continue;
    }
    if (!status.ok()) break;
    // An expert that needs a load (or is computed where it lives) runs on
    // its own, as before grouping: what is held meanwhile cannot be evicted,
    // and its Acquire-to-Release time stays its own. The ready ones gather
    // into one ExpertFfnGrouped.
    const bool ready = active_experts_->IsReadyForCompute({layer, e});
    if (!ready) status = ComputeHeld(layer, routed);
    if (!status.ok()) break;
    absl::StatusOr<const std::byte*> blob =
        active_experts_->Acquire({layer, e});
    if (!blob.ok()) {
      status = blob.status();
      break;
    }
    s.held.push_back(e);
    s.groups.push_back(
        {*blob, s.expert_begin[e], s.expert_begin[e + 1] - s.expert_begin[e]});
    if (!ready) status = ComputeHeld(layer, routed);
    if (!status.ok()) break;
  }
  // Computes what is left, or releases it after an error.
  absl::Status last = ComputeHeld(layer, routed);
  if (status.ok()) status = last;
  // Waits for the host's experts and puts their rows beside the device's
  // (or only releases them after an error).
  last = FinishHostExperts(layer, routed, status.ok());
  if (status.ok()) status = last;
  MOESERVE_RETURN_IF_ERROR(status);
  if (routed > 0) {
    MOESERVE_RETURN_IF_ERROR(
        backend_->CombineExpertRows(st, F32(s.expert_out, {routed, d}),
                                    F32(s.route_table, {routed}, routed),
                                    I32(s.route_table, 2 * routed, {n, k}),
                                    F32(s.moe_out, {n, d}, row0_ * d)));
  }
  active_experts_->EndLayer(layer);
  return absl::OkStatus();
}

int64_t MoeModel::GroupRouting(int64_t n, int64_t k) {
  Scratch& s = *scratch_;
  const int64_t E = config().num_experts;
  const std::span<const int32_t> ids = s.route.host_ids;
  const std::span<const float> weights = s.route.host_weights;
  // Counting sort of the (token, weight) pairs by expert, experts ascending
  // and tokens in order within each. Choices a routing filter dropped (-1)
  // are left out.
  s.expert_begin.assign(E + 1, 0);
  for (int32_t e : ids) {
    if (e >= 0) ++s.expert_begin[e + 1];
  }
  for (int64_t e = 0; e < E; ++e) s.expert_begin[e + 1] += s.expert_begin[e];
  const int64_t routed = s.expert_begin[E];
  s.fill.assign(s.expert_begin.begin(), s.expert_begin.end() - 1);
  s.route_staging_elems = 2 * routed + n * k;
  int32_t* perm = static_cast<int32_t*>(s.route_staging.data());
  std::fill(perm, perm + s.route_staging_elems, -1);
  int32_t* weight_bits = perm + routed;
  int32_t* pairs = weight_bits + routed;
  for (int64_t t = 0; t < n; ++t) {
    int32_t* token_pairs = pairs + t * k;
    int64_t used = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      if (e < 0) continue;
      const int32_t at = s.fill[e]++;
      perm[at] = static_cast<int32_t>(t);
      std::memcpy(&weight_bits[at], &weights[t * k + j], sizeof(float));
      token_pairs[used++] = at;
    }
    // Ascending positions are ascending experts: the order of the sum.
    std::sort(token_pairs, token_pairs + used);
  }
  return routed;
}

absl::Status MoeModel::ComputeHeld(int layer, int64_t routed) {
  Scratch& s = *scratch_;
  if (s.groups.empty()) return absl::OkStatus();
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size;
  kernels::GroupedExperts call;
  call.x = F32(s.h, {s.num_tokens, d}, row0_ * d);
  call.rows = I32(s.route_table, 0, {routed});
  call.groups = s.groups;
  call.ffn = c.expert_intermediate_size;
  // An int4 draft's experts run the int4 kernel.
  call.int4 = active_experts_->int4_layout();
  // An FP8 checkpoint's experts run the fp8 kernel.
  call.fp8 = active_experts_->fp8_layout();
  absl::Status status = backend_->ExpertFfnGrouped(
      *stream_, call,
      F32(s.expert_ws,
          {kernels::GroupedExpertWorkspaceElems(routed, call.ffn, d)}),
      F32(s.expert_out, {routed, d}));
  // No wait here: a blob stays valid until the stream has passed the op
  // (ExpertProvider::Acquire, expert_provider.h; the offloaded fast tier
  // fences the slot at Release, SlotMemory::MarkReleased).
  for (int e : s.held) active_experts_->Release({layer, e});
  s.held.clear();
  s.groups.clear();
  return status;
}

absl::Status MoeModel::StartHostExperts(int layer, int64_t n, int64_t routed,
                                        std::span<const int> selected) {
  Scratch& s = *scratch_;
  s.host_groups.clear();
  s.host_held.clear();
  HostExperts* host = active_experts_->host_compute();
  if (host == nullptr || routed == 0) return absl::OkStatus();
  for (int e : selected) {
    if (active_experts_->ComputesOnHost({layer, e})) s.host_held.push_back(e);
  }
  if (s.host_held.empty()) return absl::OkStatus();
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size;
  kernels::Stream& st = *stream_;
  // The layer's tokens, down to pinned host memory: the stream has done
  // everything before the router (Route waited), so this is the one copy
  // and a short wait, in layers that have host experts only.
  MOESERVE_RETURN_IF_ERROR(backend_->CopyToHost(
      st, host->hidden(), static_cast<float*>(s.h.data()) + row0_ * d,
      n * d * 4));
  MOESERVE_RETURN_IF_ERROR(st.Synchronize());
  for (size_t i = 0; i < s.host_held.size(); ++i) {
    const int e = s.host_held[i];
    absl::StatusOr<const std::byte*> blob =
        active_experts_->Acquire({layer, e});
    if (!blob.ok()) {
      // Nothing started: release what was acquired.
      for (size_t j = 0; j < i; ++j) {
        active_experts_->Release({layer, s.host_held[j]});
      }
      s.host_held.clear();
      s.host_groups.clear();
      return blob.status();
    }
    s.host_groups.push_back(
        {*blob, s.expert_begin[e], s.expert_begin[e + 1] - s.expert_begin[e]});
  }
  // As ComputeHeld's call, in host memory: the tokens copied down above
  // and the layer's routing table, host side (GroupRouting's perm).
  const kernels::Device cpu = kernels::Device::kCpu;
  kernels::GroupedExperts call;
  call.x = Tensor(host->hidden(), KDType::kF32, {n, d}, cpu);
  call.rows = Tensor(s.route_staging.data(), KDType::kI32, {routed}, cpu);
  call.groups = s.host_groups;
  call.ffn = c.expert_intermediate_size;
  call.int4 = active_experts_->int4_layout();
  call.fp8 = active_experts_->fp8_layout();
  host->Start(call);
  return absl::OkStatus();
}

absl::Status MoeModel::FinishHostExperts(int layer, int64_t routed,
                                         bool upload) {
  Scratch& s = *scratch_;
  if (s.host_held.empty()) return absl::OkStatus();
  HostExperts* host = active_experts_->host_compute();
  absl::Status status = host->Wait(&s.host_seconds);
  const int64_t d = config().hidden_size;
  for (size_t i = 0; i < s.host_groups.size(); ++i) {
    const kernels::ExpertGroup& g = s.host_groups[i];
    if (status.ok() && i < s.host_seconds.size()) {
      active_experts_->RecordHostCompute({layer, s.host_held[i]}, g.count,
                                         s.host_seconds[i]);
    }
    if (status.ok() && upload && g.count > 0 && g.begin + g.count <= routed) {
      // Each expert's rows go where the device's own expert rows would be:
      // CombineExpertRows sums them in the same order either way.
      status = backend_->CopyToDevice(
          *stream_, static_cast<float*>(s.expert_out.data()) + g.begin * d,
          host->out() + g.begin * d, g.count * d * 4);
    }
  }
  // The host has read the blobs (Wait returned): they may go.
  for (int e : s.host_held) active_experts_->Release({layer, e});
  s.host_held.clear();
  s.host_groups.clear();
  return status;
}

// qwen2_moe: out += sigmoid(h Wg^T) * down(silu(gate(h)) * up(h)).
absl::Status MoeModel::SharedExpert(int layer, int64_t n) {
  const ModelConfig& c = config();
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  kernels::Stream& st = *stream_;
  const int64_t d = c.hidden_size, f = c.shared_expert_intermediate_size;
  Tensor h = F32(s.h, {n, d}, row0_ * d);
  Tensor a = F32(s.shared_a, {n, f});
  Tensor b = F32(s.shared_b, {n, f});
  Tensor out = F32(s.shared_out, {n, d});
  Tensor gate = F32(s.shared_gate, {n, 1});
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.shared_gate_proj, {}, a));
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.shared_up, {}, b));
  MOESERVE_RETURN_IF_ERROR(backend_->SiluMul(st, a, b, a));
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, a, lw.shared_down, {}, out));
  MOESERVE_RETURN_IF_ERROR(backend_->MatMul(st, h, lw.shared_gate, {}, gate));
  return backend_->SigmoidGatedAdd(st, out, gate,
                                   F32(s.moe_out, {n, d}, row0_ * d));
}

}  // namespace moeserve::engine
