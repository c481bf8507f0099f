// HostAttention: attention over a KV cache that lives in host memory,
// computed by the CPU while the device keeps the dense and expert work
// (SpecMoEOff, seed 002 §4.2 "Target model execution" and §5.3's memory
// placement; MoE-Lightning's CPU attention). For large batches the KV cache
// is the biggest thing in device memory; with it on the host that memory
// is free for the expert cache, and the host reads its own KV at host
// memory bandwidth instead of moving it over the link.
//
// One layer at a time, driven by MoeModel's attention, for the whole batch
// or for one micro-batch of it (a contiguous run of rows and sequences):
//   1. q(), k(), v(): the layer's roped query, key and value rows in pinned
//      host memory (the model copies them down from the device: one copy
//      each, one wait);
//   2. Run() (on the caller's thread) or Start() (on the worker thread,
//      returns at once) with a Job naming the rows: the host backend writes
//      the rows' keys and values into the host cache (their slots) and
//      computes causal attention over it (Backend::Attention: a verification
//      chunk's k+1 queries attend to the sequence's past and to the causal
//      part of the chunk, positions decide; no mask is materialised) into
//      the same rows of out();
//   3. after Run, or Wait() for that Start: the model copies the rows of
//      out() up and applies the output projection.
// Two micro-batches may be in flight (seed 002 §4, Figure 5: the host
// attends micro-batch B while the device runs micro-batch A's output
// projection and experts); the worker runs them in Start order and each
// Wait returns the oldest one's status. Micro-batches own disjoint rows of
// the buffers and disjoint sequences (KV slots), so nothing is shared but
// the read-only past.
// On a CPU device backend the same kernels run on both sides, so the
// logits are bit for bit those of device attention (the tests rely on it).
//
// Ownership: borrows the host backend (a CPU backend with its own thread
// pool, sized apart from the scheduler and gRPC threads; the engine owns it)
// and the device backend (for pinned memory); owns its worker thread, its
// host stream and its pinned buffers. Thread safety: one driver thread (the
// model's step thread) calls everything; the worker runs jobs between their
// Start and Wait only.
#ifndef MOESERVE_ENGINE_HOST_ATTENTION_H_
#define MOESERVE_ENGINE_HOST_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/internal/host_worker.h"
#include "engine/internal/scratch_buffer.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class HostAttention {
 public:
  // At most this many Start()s without their Wait().
  static constexpr int kMaxInFlight = 2;

  // One (micro-)batch: rows [row0, row0 + n) of q(), k(), v() and out().
  // `slots` I32[n] and `batch` (query_start from 0 at row0, positions, block
  // tables of the job's sequences) are host tensors; the cache's pools must
  // be on the CPU. All must stay valid until the job's Run or Wait returns.
  struct Job {
    int64_t row0 = 0, n = 0;
    int64_t heads = 0, kv_heads = 0, head_dim = 0;
    kernels::Tensor slots;
    kernels::PagedKvCache cache;
    kernels::AttentionBatch batch;
  };

  // `host` must be a CPU-device backend; both must outlive this object.
  static absl::StatusOr<std::unique_ptr<HostAttention>> Create(
      kernels::Backend* host, kernels::Backend* device);
  ~HostAttention() = default;  // REQUIRES: no Start without its Wait.

  kernels::Backend* host_backend() const { return host_; }

  // Pinned buffers for n tokens of `heads` query and `kv_heads` key/value
  // heads of `head_dim`.
  absl::Status Reserve(int64_t n, int64_t heads, int64_t kv_heads,
                       int64_t head_dim);

  // Pinned F32 rows, filled by the caller before Run: q [n, heads, hd],
  // k and v [n, kv_heads, hd].
  float* q() const { return static_cast<float*>(q_.data()); }
  float* k() const { return static_cast<float*>(k_.data()); }
  float* v() const { return static_cast<float*>(v_.data()); }
  // Pinned F32 [n, heads * hd]: the attention output of each job's rows,
  // once its Run or Wait returned OK.
  const float* out() const { return static_cast<const float*>(out_.data()); }

  // Writes k(), v() of the n tokens into `cache` (host memory) at `slots`
  // and computes attention of q() over it into out(). `slots` I32[n] and
  // `batch` (query_start, positions, block tables) are host tensors.
  // REQUIRES: Reserve(n, ...) with the same shape; the cache's pools on the
  // CPU.
  absl::Status Run(int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim,
                   const kernels::Tensor& slots,
                   const kernels::PagedKvCache& cache,
                   const kernels::AttentionBatch& batch);
  // `job` on the caller's thread. REQUIRES: no Start in flight.
  absl::Status Run(const Job& job);

  // Queues `job` for the worker thread and returns at once; jobs run one at
  // a time in Start order. REQUIRES: fewer than kMaxInFlight Starts without
  // their Wait; the job's rows of q(), k(), v() filled.
  void Start(const Job& job);
  // Blocks until the oldest Start not yet waited for has run; its status.
  // FAILED_PRECONDITION without one.
  absl::Status Wait();

 private:
  HostAttention(kernels::Backend* host, kernels::Backend* device,
                std::unique_ptr<kernels::Stream> stream);

  kernels::Backend* const host_;
  kernels::Backend* const device_;
  std::unique_ptr<kernels::Stream> stream_;  // on host_
  ScratchBuffer q_{ScratchBuffer::Where::kPinnedHost};
  ScratchBuffer k_{ScratchBuffer::Where::kPinnedHost};
  ScratchBuffer v_{ScratchBuffer::Where::kPinnedHost};
  ScratchBuffer out_{ScratchBuffer::Where::kPinnedHost};

  // Runs the Started jobs; last member, so that its thread stops (joined)
  // before the buffers it writes go.
  HostWorker worker_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_HOST_ATTENTION_H_
