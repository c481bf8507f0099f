// Backend: the device-neutral interface of the compute kernels for the forward
// pass of a Mixtral-style MoE decoder. bf16 weights, fp32 activations and fp32
// accumulation. The CPU backend lives in kernels/cpu/, CUDA in kernels/cuda/.
//
// Conventions for every op:
//  * Tensors are views (see tensor.h); outputs are caller-allocated views of
//    the exact shape documented, on the backend's device. Ops never allocate
//    device memory; scratch comes in as an explicit `workspace` tensor.
//  * Every op first checks (CUTLASS-style can_implement, see op_checks.h) the
//    device, dtype and shape of each argument and returns InvalidArgument on a
//    mismatch before touching memory; it never crashes on a bad shape. Index
//    inputs (token ids, slots, block tables) are also range-checked where they
//    live in host-visible memory (the CPU backend always).
//  * Ops are enqueued on a Stream and run in order. Outputs may be read only
//    after Stream::Synchronize() (the CPU backend runs each op at enqueue time,
//    so the data is ready on return, but portable callers synchronise).
//  * Unless an op says "may alias", outputs must not overlap inputs.
//
// Memory and ordering (Allocate, copies, events) follow the CUDA model so the
// engine is written once: device memory comes from Allocate; host memory the
// device copies from asynchronously comes from AllocateHost or RegisterHost;
// copies are enqueued on a Stream like ops; an Event marks a point in a
// stream that another stream (WaitEvent) or the host (Synchronize) can wait
// for. On the CPU "device" memory is host memory, copies are memcpy at
// enqueue time and events only timestamp.
//
// Thread safety: a Backend may be shared by threads; a Stream must be used by
// one thread at a time.
#ifndef MOESERVE_KERNELS_BACKEND_H_
#define MOESERVE_KERNELS_BACKEND_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"

namespace moeserve::kernels {

// An in-order queue of ops on one device (a CUDA stream; on the CPU a handle
// that runs each op synchronously on the backend's thread pool).
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // Blocks until every op enqueued so far has finished; returns the first
  // asynchronous error, if any.
  virtual absl::Status Synchronize() = 0;
};

// Memory from a backend (device or page-locked host); freed on destruction.
// The backend must outlive it.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;
  virtual int64_t bytes() const = 0;
};

// A marker in a stream (a cudaEvent_t; on the CPU a timestamp taken when it
// is recorded). Used by one thread at a time.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks until the work enqueued before the last RecordEvent has finished
  // (OK at once if never recorded).
  virtual absl::Status Synchronize() = 0;
  // Seconds from `start`'s last recording to this one's. REQUIRES: both
  // recorded and completed (Synchronize()d), same backend.
  virtual absl::StatusOr<double> SecondsSince(const Event& start) const = 0;
};

// Paged KV cache of one layer (vLLM layout). A token at absolute position p of
// a sequence lives in block block_table[p / block_size], row p % block_size;
// its "slot" is block * block_size + p % block_size.
//   k_pool, v_pool: F32[num_blocks, block_size, kv_heads, head_dim]
// Owned by the caller (the engine's KV cache manager).
struct PagedKvCache {
  Tensor k_pool;
  Tensor v_pool;
};

// Describes a batch of sequences for Attention. Query rows of sequence s are
// [query_start[s], query_start[s+1]); a query at absolute position p attends
// to cache positions 0..p of its sequence (causal), which must already have
// been written with KvWrite.
//   query_start:  I32[num_seqs + 1], query_start[0] = 0, non-decreasing,
//                 query_start[num_seqs] = n_q
//   positions:    I32[n_q], absolute position of each query token
//   block_tables: I32[num_seqs, max_blocks_per_seq], ids into the pools
struct AttentionBatch {
  Tensor query_start;
  Tensor positions;
  Tensor block_tables;
};

// Elements of the F32 workspace that ExpertFfn needs for m tokens.
inline int64_t ExpertFfnWorkspaceElems(int64_t m, int64_t ffn) {
  return 3 * m * ffn;
}

// One expert of an ExpertFfnGrouped call: its blob (packed bf16, or int4 in
// the call's layout) in device memory and its rows [begin, begin + count)
// of the call's `rows`.
struct ExpertGroup {
  const void* blob = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
};

// Several experts of one MoE layer for ExpertFfnGrouped. `rows` lists the
// token of each routed (token, expert) pair, grouped by expert; `groups`
// (host memory, read during the call only) gives each expert its range of
// pairs: ranges ascending and disjoint, within [0, R).
struct GroupedExperts {
  Tensor x;     // F32[n, hidden], the layer's tokens
  Tensor rows;  // I32[R], values in [0, n)
  std::span<const ExpertGroup> groups;
  int64_t ffn = 0;  // bf16 experts: the intermediate size
  // Non-null: the blobs are int4 experts in this layout (as ExpertFfnInt4;
  // ffn is then layout->ffn and hidden layout->hidden).
  const Int4ExpertLayout* int4 = nullptr;
  // Non-null: the blobs are fp8 experts in this layout (as ExpertFfnFp8;
  // ffn is then layout->ffn and hidden layout->hidden). At most one of int4
  // and fp8.
  const Fp8ExpertLayout* fp8 = nullptr;
};

// The intermediate size of `call`'s experts: their int4 or fp8 layout's,
// else call.ffn (bf16).
inline int64_t GroupedExpertsFfn(const GroupedExperts& call) {
  return call.int4 != nullptr  ? call.int4->ffn
         : call.fp8 != nullptr ? call.fp8->ffn
                               : call.ffn;
}

// Elements of the F32 workspace ExpertFfnGrouped needs for R pairs (any
// grouping): the gathered tokens and the gate/up/activation rows.
inline int64_t GroupedExpertWorkspaceElems(int64_t pairs, int64_t ffn,
                                           int64_t hidden) {
  return pairs * (3 * ffn + hidden);
}

// ---- Graphs of ops (issue 30 item 3: CUDA graphs for the dense sub-steps).
//
// A graph region is a fixed sequence of ops, enqueued by a `body` callback on
// one stream, that a backend may record once and replay as one launch
// (CUDA: stream capture into a cudaGraph_t, cudaGraphInstantiate once per
// key, cudaGraphLaunch after). The key names the region and everything the
// recorded ops bake in: the caller guarantees that two calls with equal keys
// enqueue the same ops with the same by-value arguments and the same device
// pointers (values that change from call to call, e.g. positions and KV
// slots, must be read by the kernels from device memory that an earlier op
// on the stream refreshes).
struct GraphKey {
  const void* owner = nullptr;  // whose graph (DropGraphs(owner) frees them)
  int64_t segment = 0;          // which region of the owner's
  std::array<int64_t, 4> shape = {};  // the shape it was recorded at

  friend bool operator==(const GraphKey&, const GraphKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const GraphKey& k) {
    return H::combine(std::move(h), k.owner, k.segment, k.shape);
  }
};

// What Backend::RunGraph did with the body.
enum class GraphRun {
  kEager,     // ran the body's ops as ordinary launches (graphs off)
  kCaptured,  // recorded the body (its ops did not run), then launched it
  kReplayed,  // launched the recorded graph; the body was not called
};

// The smallest power of two >= v (1 for v <= 1): the bucket a graph-mode
// step pads a by-value extent to (MoeModel: the block-table stride), so
// that one recorded graph serves every value in the bucket.
int64_t GraphBucket(int64_t v);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  // A stream for copies and events only (a link's copy queue): no op
  // scratch is reserved for it (CUDA: no cuBLASLt workspace). Ops enqueued
  // on it still work, without the scratch-backed fast paths.
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateCopyStream() {
    return CreateStream();
  }

  // ---- Memory, copies and events.
  // `bytes` (> 0) of device memory, 256-byte aligned, contents undefined.
  // ResourceExhausted when the device has no room.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) = 0;
  // `bytes` (> 0) of host memory, 4096-byte aligned, that the device copies
  // to and from asynchronously (CUDA: page-locked, cudaHostAlloc).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(
      int64_t bytes) = 0;
  // Page-locks existing host memory [p, p + bytes) for asynchronous copies
  // until UnregisterHost(p) (CPU: nothing to do).
  virtual absl::Status RegisterHost(void* p, int64_t bytes) = 0;
  virtual void UnregisterHost(void* p) = 0;
  // Enqueues a copy of `bytes` bytes host->device, device->host or
  // device->device. Host memory must stay valid and unchanged (source) or
  // unread (destination) until the stream has passed the copy.
  virtual absl::Status CopyToDevice(Stream& s, void* dst, const void* src,
                                    int64_t bytes) = 0;
  virtual absl::Status CopyToHost(Stream& s, void* dst, const void* src,
                                  int64_t bytes) = 0;
  virtual absl::Status CopyOnDevice(Stream& s, void* dst, const void* src,
                                    int64_t bytes) = 0;
  // Sets `bytes` bytes of device memory at `dst` to zero.
  virtual absl::Status Zero(Stream& s, void* dst, int64_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;
  // Marks the current end of `s` in `e` (replacing an earlier marker).
  virtual absl::Status RecordEvent(Stream& s, Event& e) = 0;
  // Work enqueued on `s` after this call waits for `e`'s last marker
  // (nothing to wait for if `e` was never recorded).
  virtual absl::Status WaitEvent(Stream& s, Event& e) = 0;

  // out[i, :] = table[ids[i], :].  ids I32[n], table BF16[vocab, d],
  // out F32[n, d]. Ids outside [0, vocab) -> InvalidArgument.
  virtual absl::Status Embedding(Stream& s, const Tensor& ids,
                                 const Tensor& table, const Tensor& out) = 0;

  // out = x / sqrt(mean(x^2) + eps) * w.  x F32[n, d], w BF16[d],
  // out F32[n, d] (may alias x). Per-head q/k norm: pass the [n*heads, hd]
  // view.
  virtual absl::Status RmsNorm(Stream& s, const Tensor& x, const Tensor& w,
                               float eps, const Tensor& out) = 0;

  // out = x * W^T (+ bias): the Linear layer in Hugging Face layout.
  // x F32[m, k], w BF16[n, k], bias BF16[n] or empty, out F32[m, n].
  virtual absl::Status MatMul(Stream& s, const Tensor& x, const Tensor& w,
                              const Tensor& bias, const Tensor& out) = 0;

  // In-place rotate-half RoPE (HF LlamaRotaryEmbedding): for i < hd/2,
  // inv_freq_i = 1 / theta^(2i/hd) (fp32), angle = pos * inv_freq_i (fp32),
  // (x_i, x_{i+hd/2}) <- (x_i cos - x_{i+hd/2} sin, x_{i+hd/2} cos + x_i sin).
  // x F32[n, heads, hd] (hd even), positions I32[n] (>= 0).
  virtual absl::Status RopeRotateHalf(Stream& s, const Tensor& x,
                                      const Tensor& positions, float theta) = 0;

  // Writes k[i], v[i] into slot slot_mapping[i] of the pools; a negative slot
  // skips the row (padding). k, v F32[n, kv_heads, hd]; slot_mapping I32[n].
  virtual absl::Status KvWrite(Stream& s, const Tensor& k, const Tensor& v,
                               const Tensor& slot_mapping,
                               const PagedKvCache& cache) = 0;

  // Causal grouped-query attention over the paged cache: q head h reads kv
  // head h / (heads / kv_heads); scores scaled by 1/sqrt(hd); fp32 softmax
  // with max subtraction. q F32[n_q, heads, hd], out F32[n_q, heads * hd].
  virtual absl::Status Attention(Stream& s, const Tensor& q,
                                 const PagedKvCache& cache,
                                 const AttentionBatch& batch,
                                 const Tensor& out) = 0;

  // fp32 softmax over all E experts, then the k largest probabilities (ties:
  // lower expert index first), in descending order; with `normalize` the k
  // weights are divided by their sum. logits F32[n, E], weights F32[n, k],
  // ids I32[n, k], 1 <= k <= E.
  virtual absl::Status RouterTopK(Stream& s, const Tensor& logits, int k,
                                  bool normalize, const Tensor& weights,
                                  const Tensor& ids) = 0;

  // out = silu(gate) * up. All F32[m, f]; out may alias gate or up.
  virtual absl::Status SiluMul(Stream& s, const Tensor& gate, const Tensor& up,
                               const Tensor& out) = 0;

  // out = a + b (residual). All F32, same shape; out may alias a or b.
  virtual absl::Status Add(Stream& s, const Tensor& a, const Tensor& b,
                           const Tensor& out) = 0;

  // out[i, :] = x[rows[i], :]: gathers the tokens routed to one expert.
  // x F32[n, d], rows I32[m] in [0, n), out F32[m, d].
  virtual absl::Status GatherRows(Stream& s, const Tensor& x,
                                  const Tensor& rows, const Tensor& out) = 0;

  // y[rows[i], :] += weights[i] * x[i, :]: combines one expert's outputs into
  // the tokens' residual stream with their router weights. x F32[m, d],
  // rows I32[m] in [0, n) (empty tensor: rows[i] = i), weights F32[m],
  // y F32[n, d]. Repeated rows accumulate.
  virtual absl::Status ScaleAddRows(Stream& s, const Tensor& x,
                                    const Tensor& rows, const Tensor& weights,
                                    const Tensor& y) = 0;

  // y[i, :] += sigmoid(gate[i]) * x[i, :]: the gated shared expert of
  // qwen2_moe. x, y F32[n, d]; gate F32[n] or F32[n, 1].
  virtual absl::Status SigmoidGatedAdd(Stream& s, const Tensor& x,
                                       const Tensor& gate, const Tensor& y) = 0;

  // One SwiGLU expert on all m tokens routed to it:
  //   out = (silu(x Wg^T) * (x Wu^T)) Wd^T
  // blob BF16[3 * ffn * hidden] is the packed expert: Wg [ffn, hidden], then
  // Wu [ffn, hidden], then Wd [hidden, ffn], each row-major.
  // x F32[m, hidden], workspace F32 with >= ExpertFfnWorkspaceElems(m, ffn)
  // elements (any shape), out F32[m, hidden].
  virtual absl::Status ExpertFfn(Stream& s, const Tensor& x, const Tensor& blob,
                                 int64_t ffn, const Tensor& workspace,
                                 const Tensor& out) = 0;

  // ExpertFfn with an int4 expert (kernels/int4_expert.h, a quantized draft
  // model): out = (silu(x Wg^T) * (x Wu^T)) Wd^T with the dequantised int4
  // weights (q * bf16 scale, exact in fp32) and fp32 accumulation.
  // x F32[m, layout.hidden], blob U8[layout.bytes] (one expert in the
  // layout's byte layout, 16-byte aligned), workspace F32 with
  // >= ExpertFfnWorkspaceElems(m, layout.ffn) elements (any shape),
  // out F32[m, layout.hidden]. `layout` must be what
  // Int4ExpertLayoutWithGroups gives for its hidden, ffn and groups.
  virtual absl::Status ExpertFfnInt4(Stream& s, const Tensor& x,
                                     const Tensor& blob,
                                     const Int4ExpertLayout& layout,
                                     const Tensor& workspace,
                                     const Tensor& out) = 0;

  // ExpertFfn with an fp8 expert (kernels/fp8_expert.h, an FP8 checkpoint's
  // experts kept in FP8): out = (silu(x Wg^T) * (x Wu^T)) Wd^T with the
  // dequantised weights Fp8E4M3ToFloat(q) * scale (one fp32 product) and
  // fp32 accumulation. x F32[m, layout.hidden], blob U8[layout.bytes] (one
  // expert in the layout's byte layout, 16-byte aligned), workspace F32
  // with >= ExpertFfnWorkspaceElems(m, layout.ffn) elements (any shape),
  // out F32[m, layout.hidden]. `layout` must be what MakeFp8ExpertLayout
  // gives for its hidden, ffn and tile. Scales must be finite with
  // |scale| < 2^120 (the importer, engine/quant/fp8_import.h, refuses
  // others); a NaN weight code makes the outputs it reaches NaN.
  virtual absl::Status ExpertFfnFp8(Stream& s, const Tensor& x,
                                    const Tensor& blob,
                                    const Fp8ExpertLayout& layout,
                                    const Tensor& workspace,
                                    const Tensor& out) = 0;

  // A layer's experts in one op (issue 30: launches per MoE layer do not
  // grow with the experts routed): for every group g and every r in its
  // range, out[r, :] = expert_g(x[rows[r], :]) exactly as ExpertFfn (or
  // ExpertFfnInt4, ExpertFfnFp8) computes it on those rows; rows of `out`
  // outside every range are left as they are. out F32[R, hidden]; workspace F32
  // with >= GroupedExpertWorkspaceElems(R, ffn, hidden) elements. Each group's
  // blob must stay valid until the stream has passed the op.
  // The default runs GatherRows + ExpertFfn per group (any backend).
  virtual absl::Status ExpertFfnGrouped(Stream& s, const GroupedExperts& call,
                                        const Tensor& workspace,
                                        const Tensor& out);

  // Combines the experts' outputs into the tokens' residual stream in a
  // fixed order: for each token t, y[t, :] += weights[p] * x[p, :] for
  // p = pairs[t, 0], pairs[t, 1], ... up to the first negative entry, one
  // rounded product and one rounded add each, in that order (callers list
  // a token's pairs by ascending expert, so the sum does not depend on how
  // the experts were batched). x F32[R, d], weights F32[R], pairs I32[n, k]
  // (entries in [-1, R)), y F32[n, d], not overlapping x.
  virtual absl::Status CombineExpertRows(Stream& s, const Tensor& x,
                                         const Tensor& weights,
                                         const Tensor& pairs,
                                         const Tensor& y) = 0;

  // Row-wise softmax (sampler). x, out F32[n, V]; out may alias x.
  virtual absl::Status Softmax(Stream& s, const Tensor& x,
                               const Tensor& out) = 0;

  // Row-wise argmax, ties to the lower index (greedy sampling).
  // x F32[n, V] (V >= 1), out I32[n].
  virtual absl::Status Argmax(Stream& s, const Tensor& x,
                              const Tensor& out) = 0;

  // ---- Graph regions (see GraphKey). The defaults run every body eagerly:
  // the CPU and null devices have no launch cost to save.
  //
  // Turns recording on or off; returns whether graphs are now on (false on
  // a backend without them). Off by default (CUDA: --cuda_graphs,
  // BackendOptions::cuda_graphs).
  virtual bool SetGraphs(bool on) {
    (void)on;
    return false;
  }
  virtual bool graphs_enabled() const { return false; }

  // Runs `body` (which enqueues ops on `s` only, with no sync, no
  // allocation and no copy to or from host memory) as the graph `key`:
  // with graphs off, calls it and returns kEager; else the first call with
  // `key` records the body (calling it once; its ops do not run then) and
  // launches the recording (kCaptured), later calls launch the recording
  // without calling the body (kReplayed). The body's host-side effects
  // therefore happen only when it is called. A body that returns an error
  // leaves nothing recorded and RunGraph returns that error. A backend that
  // cannot record a body runs it eagerly (kEager) from then on for that key.
  // Not reentrant on one stream (no RunGraph inside a body).
  virtual absl::StatusOr<GraphRun> RunGraph(
      Stream& s, const GraphKey& key, absl::FunctionRef<absl::Status()> body);

  // Frees every graph recorded for `owner` (its buffers moved, or it is
  // being destroyed). REQUIRES: none of them is in flight (the owner's
  // stream synchronized).
  virtual void DropGraphs(const void* owner) { (void)owner; }
};

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_BACKEND_H_
