// HostExperts: the host side of hybrid execution (issue 32). Experts whose
// weights stay in the slow tier's host memory (computed in place: a policy's
// ComputeInPlace, or every expert of a --cpu_moe_layers layer) are computed
// by a CPU backend next to their weights while the model's device computes
// the resident ones, as llama.cpp's --n-cpu-moe, Fiddler, KTransformers and
// MoE-SpAc (seed 004) do. At batch 1 an expert's weights are read once
// either way, and host memory plus AVX-512/AMX compute can beat a 25-55 GB/s
// link.
//
// One layer at a time, driven by MoeModel::RoutedExperts:
//   1. hidden(): the layer's input rows [n, hidden] in pinned host memory
//      (the model copies them down from the device);
//   2. Start(): the experts' blobs (host memory), their row ranges in the
//      layer's routing table (`perm`, host) are computed on the worker
//      thread, each expert alone so that its seconds are its own, into
//      out() rows [begin, begin + count);
//   3. meanwhile the device computes the resident experts;
//   4. Wait(): the worker is done; each expert's seconds; the model copies
//      the rows up and combines them with the device's in the fixed
//      ascending-expert order (same sums, same rounding: greedy output does
//      not depend on which side computed an expert when both run the same
//      kernels, as the CPU backend standing in for the device does in tests).
//
// Ownership: borrows the host backend (a CPU backend with its own thread
// pool, sized apart from the scheduler and gRPC threads: --host_expert_threads)
// and the device backend (for pinned memory); owns its worker thread, its
// host stream and its pinned buffers. Thread safety: one driver thread (the
// model's step thread) calls everything; the worker runs between Start and
// Wait only.
#ifndef MOESERVE_ENGINE_HOST_EXPERTS_H_
#define MOESERVE_ENGINE_HOST_EXPERTS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/internal/host_worker.h"
#include "engine/internal/scratch_buffer.h"
#include "kernels/backend.h"

namespace moeserve::engine {

class HostExperts {
 public:
  // `host` must be a CPU-device backend; both must outlive this object.
  static absl::StatusOr<std::unique_ptr<HostExperts>> Create(
      kernels::Backend* host, kernels::Backend* device);
  ~HostExperts() = default;  // REQUIRES: no Start without its Wait.

  // Pinned buffers for n tokens, `routed` (token, expert) pairs of
  // `hidden`-wide rows and the expert's intermediate size `ffn`.
  absl::Status Reserve(int64_t n, int64_t routed, int64_t hidden, int64_t ffn);

  // [n, hidden] F32, pinned: the layer's tokens, filled by the caller
  // before Start.
  float* hidden() const { return static_cast<float*>(hidden_.data()); }
  // [routed, hidden] F32, pinned: row p is pair p's expert output, for the
  // pairs of the groups of the last Start, once Wait returned OK.
  const float* out() const { return static_cast<const float*>(out_.data()); }

  // Starts computing `call` on the worker thread; returns at once. As
  // Backend::ExpertFfnGrouped's call, in host memory: call.x is hidden()
  // viewed as F32 [n, hidden], call.rows the layer's routing table (pair p's
  // token), the groups' blobs the slow tier's host bytes; all must stay valid
  // until Wait returns. Each group's rows land in out() rows [begin, begin +
  // count).
  void Start(const kernels::GroupedExperts& call);
  // Blocks until the worker is done; the first error of the layer, if any
  // (FAILED_PRECONDITION without a Start). `seconds` gets each group's
  // compute seconds, in the groups' order.
  absl::Status Wait(std::vector<double>* seconds);

  // Host compute seconds of one expert blob on `rows` tokens (the fastest of
  // `repeats` runs), for the measured costs at start (no worker thread:
  // REQUIRES no Start in flight).
  absl::StatusOr<double> TimeExpert(const std::byte* blob, int64_t rows,
                                    int64_t hidden_size, int64_t ffn,
                                    const kernels::Int4ExpertLayout* int4,
                                    const kernels::Fp8ExpertLayout* fp8,
                                    int repeats);

 private:
  HostExperts(kernels::Backend* host, kernels::Backend* device,
              std::unique_ptr<kernels::Stream> stream);
  // Runs `call`'s groups one at a time (worker thread), appending each
  // one's seconds.
  absl::Status Run(const kernels::GroupedExperts& call,
                   std::vector<double>* seconds);
  // One group of `call` on the host stream, into out() and the workspace.
  absl::Status RunGroup(const kernels::GroupedExperts& call,
                        const kernels::ExpertGroup& group);

  kernels::Backend* const host_;
  kernels::Backend* const device_;
  std::unique_ptr<kernels::Stream> stream_;  // on host_
  ScratchBuffer hidden_{ScratchBuffer::Where::kPinnedHost};
  ScratchBuffer out_{ScratchBuffer::Where::kPinnedHost};
  // Host memory (host_ is a CPU backend: its Allocate is host RAM).
  ScratchBuffer workspace_;

  // Each group's seconds of the last Start: written by its job on the
  // worker, read by Wait after the worker's Wait (which orders the two).
  std::vector<double> seconds_;
  // Runs the Started jobs; last member, so that its thread stops (joined)
  // before what it writes goes.
  HostWorker worker_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_HOST_EXPERTS_H_
