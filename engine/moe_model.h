// MoeModel: the forward pass of a decoder-only MoE transformer (mixtral,
// qwen2_moe, qwen3_moe, olmoe) over a batch of sequences, on a kernels
// Backend, with a paged KV cache and experts obtained through an
// ExpertProvider.
//
// One Forward() call runs every new token of every sequence in the batch
// (prefill chunks, decode tokens and speculative verify chunks mixed)
// through all layers, writes their keys and values into the KV cache, and
// returns the next-token logits of each sequence's last `num_logits` new
// tokens (1 for prefill and decode; k+1 when verifying k draft tokens).
//
// Every row is computed independently of the others in the batch, and each
// token's expert outputs are summed in ascending expert order whatever order
// the experts are fetched in, so a token's logits do not depend on what
// shares its batch or on the offload policy (the greedy-invariance tests
// rely on this).
//
// Device: everything runs on the backend's device. On a device other than
// the CPU, Create() copies the non-expert weights into device memory, and the
// activations, routing tables and step metadata live in device scratch; the
// host reads back only each layer's routing (to drive the expert provider)
// and the logits. The expert provider must hand out blobs in the same
// device's memory (ExpertProvider::device()).
//
// Graphs (issue 30 item 3): when the backend has graphs on
// (Backend::SetGraphs, --cuda_graphs), a decode or verify step of at most
// kMaxGraphTokens tokens runs each dense run between two host waits (the
// previous layer's shared expert and residual, attention, norm, router
// matmul and top-k; internal/dense_graphs.h) as one recorded graph per
// (segment, shape), replayed in later steps of the same shape; the routed
// experts run eagerly between them. Same ops, same arguments: the logits are
// bit for bit those of the eager pass. Prefill runs eagerly. A no-op on
// backends without graphs.
//
// Host attention (EnableHostAttention, seed 002 §4.2; engine/
// host_attention.h): the KV cache lives in host memory and a CPU backend
// computes attention over it; per layer the device computes norm, q/k/v
// and RoPE, copies the rows down, the host writes the KV and attends, and
// the output rows come back up for the output projection. Such a step runs
// eagerly (no graphs: the host round trip sits inside the dense segment).
// A step of at least 2 sequences whose attention reads at least
// HostAttentionOptions::split_min_attended keys runs as two micro-batches (seed
// 002 §4, Figure 5): the sequences split at the boundary nearest half the
// tokens, and the device's work on one overlaps the host's attention of the
// other:
//   layer l:  Other1(A,l) -> host attends A(l) | device: MoE(B,l-1) +
//                                               tail, Other1(B,l)
//             -> host attends B(l)             | device: Other2(A,l),
//                                               MoE(A,l) + tail
//             -> Other2(B,l); MoE(B,l) runs while the host attends A(l+1).
// (Other1: norm, q/k/v, RoPE; Other2: o_proj and the residual; MoE: the
// post-attention norm, router, experts and the layer's tail.) The routed
// experts then run once per micro-batch: the expert provider sees each
// layer twice in a row, A's tokens then B's (expert_provider.h,
// offload_policy.h). Every op is per row or per sequence, so on kernels
// whose rows do not depend on the row count (the CPU backend's) the logits
// are bit for bit those of the unsplit step.
//
// Ownership: borrows the weights, backend and expert provider (all must
// outlive the model); owns its compute stream, its HostAttention, the device
// copy of the weights and its scratch buffers. Thread-safety: Forward() is not
// reentrant (one caller at a time: the scheduler's step loop).
#ifndef MOESERVE_ENGINE_MOE_MODEL_H_
#define MOESERVE_ENGINE_MOE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/expert_provider.h"
#include "engine/host_attention.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/router_probe.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class ScratchBuffer;

// How a model with host attention runs its steps (EnableHostAttention).
struct HostAttentionOptions {
  // Steps of at least 2 sequences whose attention reads at least this many
  // keys (summed over the query rows: position + 1 each) run as two
  // micro-batches whose host attention overlaps the device's work; 0 never
  // splits. Splitting costs a second routing pass per layer (each expert
  // both micro-batches route to is read and computed twice), so it pays only
  // where attention is a large part of the layer. On the CPU-standing-in
  // bench (engine/README.md, "Host attention") steps of ~400-1,300 keys
  // lost 12% or broke even and steps of ~4,000 gained 16-24%.
  int64_t split_min_attended = 2048;
};

// The new tokens of one sequence for one forward pass.
struct SequenceChunk {
  std::span<const int32_t> tokens;  // non-empty
  int64_t start_position = 0;       // absolute position of tokens[0]
  // Covers positions [0, start_position + tokens.size()) (KvCache::Grow).
  const BlockTable* block_table = nullptr;
  // Logits rows wanted: for the last num_logits tokens, in position order.
  // 1 <= num_logits <= tokens.size().
  int num_logits = 1;
};

// Rewrites one layer's routing before any expert is fetched: a draft
// forward that may only use some experts (the self drafter, which keeps to
// the experts resident in the fast tier) remaps or drops choices here.
class RoutingFilter {
 public:
  virtual ~RoutingFilter() = default;
  // ids and weights are [n, k], row-major (the router's top-k). The filter
  // may replace an id by another expert of the layer, or set it to -1 to
  // drop that choice (its weight is then ignored).
  virtual void Filter(int layer, int64_t n, int k, std::span<int32_t> ids,
                      std::span<float> weights) = 0;
};

// How one Forward() differs from a plain target pass.
struct ForwardOptions {
  // Where the experts come from; null: the provider given to Create.
  ExpertProvider* experts = nullptr;
  // Applied to every layer's routing; null: none.
  RoutingFilter* routing = nullptr;
};

class MoeModel final : public RouterProbe {
 public:
  static absl::StatusOr<std::unique_ptr<MoeModel>> Create(
      const ModelWeights* weights, kernels::Backend* backend,
      ExpertProvider* experts);
  ~MoeModel();

  // Runs the batch and fills `logits` with F32[rows, vocab], rows = the sum
  // of num_logits: batch[0]'s rows first, each sequence's in position order
  // (row j of a chunk: the logits after tokens[size - num_logits + j]).
  absl::Status Forward(std::span<const SequenceChunk> batch, KvCache* cache,
                       std::vector<float>* logits,
                       const ForwardOptions& options = {});

  const ModelConfig& config() const { return weights_->config(); }

  // From now on every Forward() computes attention on `host` (a CPU backend,
  // borrowed: must outlive the model) over a cache whose pools are in host
  // memory (KvCache::Create with a host backend); FAILED_PRECONDITION from
  // Forward otherwise. INVALID_ARGUMENT when `host` is not a CPU backend.
  absl::Status EnableHostAttention(kernels::Backend* host,
                                   const HostAttentionOptions& options = {});
  bool host_attention() const { return host_attention_ != nullptr; }

  // RouterProbe (router_probe.h): `layer`'s router applied ahead of time,
  // from inside a Forward() (the expert provider's hooks), same thread.
  std::vector<int> PredictExperts(int layer, const float* hidden, int64_t n,
                                  int k) override;

  // Enqueues `layer`'s router on `h` (F32 [n, hidden_size], backend memory)
  // on `stream`, without a wait: `logits` F32 [n, num_experts], then each
  // row's top `k` (`normalize`: weights summing to 1) into `weights` F32
  // [n, k] and `ids` I32 [n, k]. What the model's own routing runs; public
  // for a drafter that applies the target's routers on its own stream (the
  // external drafter's cross-model prediction,
  // engine/spec_decode/cross_model_predictor.h).
  // REQUIRES: 0 <= layer < config().num_hidden_layers.
  absl::Status ApplyRouter(kernels::Stream& stream, int layer,
                           const kernels::Tensor& h, int k, bool normalize,
                           const kernels::Tensor& logits,
                           const kernels::Tensor& weights,
                           const kernels::Tensor& ids);

 private:
  struct LayerWeights;
  struct Scratch;

  MoeModel(const ModelWeights* weights, kernels::Backend* backend,
           ExpertProvider* experts, std::unique_ptr<kernels::Stream> stream);
  struct RouteBuffers;
  absl::Status ResolveWeights();
  // Copies the non-expert weights into device memory (non-CPU backends).
  absl::Status UploadWeights();
  // Grows the scratch buffers for n tokens of num_seqs sequences, `rows` of
  // them wanting logits.
  absl::Status ReserveScratch(int64_t n, int64_t num_seqs, int64_t rows,
                              int64_t max_blocks);
  // The layers: per layer a dense segment (Dense), then the routed
  // experts. The last layer's tail is in Forward's final segment.
  absl::Status RunLayers(int64_t n);
  // Runs `body` (ops on stream_ only) as dense segment `segment` of this
  // step: a graph region in a graph step, else directly.
  absl::Status Dense(int64_t segment, absl::FunctionRef<absl::Status()> body);
  // In a graph step: drops the recorded graphs when a pointer they bake in
  // (scratch, KV pools) has changed since the last graph step.
  absl::Status CheckGraphPointers(KvCache* cache);
  // Views of scratch memory on the backend's device (offsets in elements).
  kernels::Tensor F32(const ScratchBuffer& buf,
                      std::initializer_list<int64_t> shape,
                      int64_t offset = 0) const;
  kernels::Tensor I32(const ScratchBuffer& buf, int64_t offset,
                      std::initializer_list<int64_t> shape) const;
  // `layer`'s router on h [n, d]: top-k weights and expert ids, copied to
  // the host vectors of `buffers` (resized to n * k).
  // Enqueues the router matmul and top-k into `buffers` (no copy, no wait).
  absl::Status EnqueueRouter(int layer, const kernels::Tensor& h, int k,
                             bool normalize, RouteBuffers& buffers);
  absl::Status Route(int layer, const kernels::Tensor& h, int k, bool normalize,
                     RouteBuffers& buffers);
  absl::Status Attention(int layer, int64_t n, KvCache* cache);
  // Attention in parts (the rows [row0_, row0_ + n)): Other1, the input
  // norm, q/k/v (and their norms) and RoPE into scratch q, k, v; Other2,
  // the output projection of scratch attn and the residual into x.
  absl::Status AttentionInputs(int layer, int64_t n);
  absl::Status AttentionOutput(int layer, int64_t n);
  // Attention's KV write and attention on the host (q, k, v roped in
  // scratch) for the whole step, into cache_: down, HostAttention::Run, up
  // into scratch attn.
  absl::Status AttendOnHost(int layer, int64_t n);
  // Host attention's copies: the rows' q, k, v down to its pinned buffers
  // (and the wait), and its output rows up into scratch attn.
  absl::Status CopyRowsDown(int64_t n);
  absl::Status CopyRowsUp(int64_t n);
  // One (micro-)batch of the step, for HostAttention (host tensors).
  struct MicroBatch {
    int64_t seq0 = 0, seqs = 0, row0 = 0, rows = 0;
  };
  // The host tensors of `mb` for layer `layer` of cache_; `query_start`
  // holds mb.seqs + 1 entries counted from mb's first row.
  HostAttention::Job HostJob(int layer, const MicroBatch& mb,
                             std::vector<int32_t>& query_start) const;
  // Split steps (host attention, two micro-batches; header comment).
  absl::Status RunLayersSplit(int64_t n);
  // Micro-batch `micro`'s MoE block of `layer`: router inputs, routed
  // experts, the layer's tail.
  absl::Status MicroMoe(int layer, int micro);
  // The per-row steps work on micro-batch `micro`'s rows from now on.
  void UseRows(int micro);
  void UseAllRows();
  // The dense head of a MoE block: post-attention norm into h, moe_out
  // zeroed, the router's matmul and top-k into scratch route (Route then
  // only copies them to the host).
  absl::Status RouterInputs(int layer, int64_t n);
  // The dense tail of a MoE block: the shared expert, then x += moe_out.
  absl::Status LayerTail(int layer, int64_t n);
  absl::Status RoutedExperts(int layer, int64_t n);
  // Groups the layer's routing (scratch route.host_ids/host_weights, n
  // tokens of k choices) by expert into scratch expert_begin and
  // route_host; returns the number of routed pairs.
  int64_t GroupRouting(int64_t n, int64_t k);
  // Runs the held experts (scratch groups) in one ExpertFfnGrouped into
  // their rows of expert_out, then releases them (also on error).
  absl::Status ComputeHeld(int layer, int64_t routed);
  // Hybrid execution (engine/host_experts.h): acquires the layer's experts
  // that the provider computes on the host and starts them there (after
  // copying the layer's tokens down); FinishHostExperts waits for them,
  // reports their seconds, copies their rows up into expert_out (when
  // `upload`) and releases them. No-ops without host experts.
  absl::Status StartHostExperts(int layer, int64_t n, int64_t routed,
                                std::span<const int> selected);
  absl::Status FinishHostExperts(int layer, int64_t routed, bool upload);
  absl::Status SharedExpert(int layer, int64_t n);

  const ModelWeights* const weights_;
  kernels::Backend* const backend_;
  ExpertProvider* const experts_;
  std::unique_ptr<kernels::Stream> stream_;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<kernels::Buffer> device_weights_;  // non-CPU backends
  kernels::Tensor embedding_, final_norm_, lm_head_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<HostAttention> host_attention_;  // null: on the device
  HostAttentionOptions host_options_;
  // Of the Forward() in progress: whether it runs as two micro-batches, and
  // them; the first row of the rows the per-row steps work on (0 and the
  // whole batch unless split).
  bool split_step_ = false;
  std::array<MicroBatch, 2> micro_ = {};
  int64_t row0_ = 0;
  KvCache* cache_ = nullptr;  // of the Forward() in progress
  // Of the Forward() in progress: its expert provider and routing filter.
  ExpertProvider* active_experts_ = nullptr;
  RoutingFilter* routing_ = nullptr;
  int64_t step_ = 0;
  // Graphs: whether the step in progress runs its dense segments as graphs,
  // and its key shape; the pointers the recorded graphs bake in (empty: no
  // graph recorded since the last drop); the layer whose router output
  // RouterInputs left in scratch route (-1: none).
  bool graph_step_ = false;
  std::array<int64_t, 4> graph_shape_ = {};
  std::vector<const void*> graph_pointers_, graph_pointers_now_;
  int router_ready_ = -1;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_MOE_MODEL_H_
