// CudaBackend: the Backend (kernels/backend.h) for Device::kCuda tensors.
// Ops validate with kernels/op_checks.h on the host (InvalidArgument, as the
// CPU backend), then enqueue the launchers of launchers.h on the stream's
// cudaStream_t; outputs are ready after Stream::Synchronize(). Index values
// live on the device and are guarded inside the kernels (see launchers.h)
// rather than range-checked on the host.
//
// MatMul (and the two GEMMs of ExpertFfn) has two paths: a warp-per-column
// GEMV that reads each weight once for decode (m < lt_min_m), and cuBLASLt
// bf16 tensor-core GEMMs on a hi/lo split of the F32 activations for
// m >= lt_min_m (cublaslt_gemm.h; within ~1e-5 relative of the fp32
// reference). If cuBLASLt has no algorithm for a shape, the GEMV runs.
//
// Graph regions (Backend::RunGraph, issue 30 item 3; off unless
// CudaBackendOptions::graphs or SetGraphs(true)): stream capture in
// thread-local mode, one cudaGraphInstantiate per key, cudaGraphLaunch
// after (cuda_backend_graphs.cc). A region whose capture fails (an op the
// capture does not support) runs eagerly from then on, with one line on
// stderr. cuBLASLt GEMMs recorded in a graph count in lt_gemm_count() when
// recorded, not when replayed.
//
// Owns: the cuBLASLt handle and plan cache (one per backend), and the
// recorded graphs (keyed by GraphKey, freed by DropGraphs or with the
// backend). Each stream it creates owns its cuBLASLt scratch (CudaStream).
//
// Thread safety: as Backend. A CudaBackend is bound to the device that was
// current when Create() ran.
#ifndef MOESERVE_KERNELS_CUDA_CUDA_BACKEND_H_
#define MOESERVE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cuda {

class CudaStream;
// The recorded graphs (cuda_backend_graphs.cc).
class CudaGraphCache;
std::shared_ptr<CudaGraphCache> NewCudaGraphCache();

struct CudaBackendOptions {
  // MatMul uses cuBLASLt when it has m >= lt_min_m rows, the GEMV below.
  // 0 = never cuBLASLt (no handle, no per-stream scratch); 1 = always.
  int64_t lt_min_m = 16;
  // Per-stream device scratch of the cuBLASLt path: the workspace cuBLASLt
  // may use, and the bf16 elements of each of the hi and lo buffers (x is
  // split in chunks of lt_split_elems / k rows). Defaults: 32 MiB + 2 x 16
  // MiB a stream.
  int64_t lt_workspace_bytes = int64_t{32} << 20;
  int64_t lt_split_elems = int64_t{8} << 20;
  // Graph regions recorded and replayed (Backend::RunGraph); SetGraphs
  // changes it later. Off: every region runs eagerly, as before.
  bool graphs = false;
  // At most this many recorded graphs (all owners); past it new keys run
  // eagerly. <= 0: no limit.
  int64_t max_graphs = 8192;
};

class CudaBackend final : public Backend {
 public:
  // UNAVAILABLE ("no CUDA device") when the runtime reports no device (or no
  // driver); never crashes.
  // InvalidArgument for a bad device number or options.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      int device = 0, const CudaBackendOptions& options = {});
  ~CudaBackend() override;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  // Without the per-stream cuBLASLt scratch (link copy streams).
  absl::StatusOr<std::unique_ptr<Stream>> CreateCopyStream() override;
  int device_id() const { return device_id_; }
  const CudaBackendOptions& options() const { return options_; }

  // MatMul calls (ExpertFfn counts two) served by cuBLASLt, and those that
  // asked for it but fell back to the GEMV (no algorithm for the shape).
  int64_t lt_gemm_count() const { return lt_gemms_.load(); }
  int64_t lt_fallback_count() const { return lt_fallbacks_.load(); }

  // Memory API (cuda_memory.cc): cudaMalloc, cudaHostAlloc /
  // cudaHostRegister, cudaMemcpyAsync / cudaMemsetAsync on the stream, and
  // timing cudaEvents.
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(int64_t bytes) override;
  absl::Status RegisterHost(void* p, int64_t bytes) override;
  void UnregisterHost(void* p) override;
  absl::Status CopyToDevice(Stream& s, void* dst, const void* src,
                            int64_t bytes) override;
  absl::Status CopyToHost(Stream& s, void* dst, const void* src,
                          int64_t bytes) override;
  absl::Status CopyOnDevice(Stream& s, void* dst, const void* src,
                            int64_t bytes) override;
  absl::Status Zero(Stream& s, void* dst, int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  absl::Status RecordEvent(Stream& s, Event& e) override;
  absl::Status WaitEvent(Stream& s, Event& e) override;

  absl::Status Embedding(Stream& s, const Tensor& ids, const Tensor& table,
                         const Tensor& out) override;
  absl::Status RmsNorm(Stream& s, const Tensor& x, const Tensor& w, float eps,
                       const Tensor& out) override;
  absl::Status MatMul(Stream& s, const Tensor& x, const Tensor& w,
                      const Tensor& bias, const Tensor& out) override;
  absl::Status RopeRotateHalf(Stream& s, const Tensor& x,
                              const Tensor& positions, float theta) override;
  absl::Status KvWrite(Stream& s, const Tensor& k, const Tensor& v,
                       const Tensor& slot_mapping,
                       const PagedKvCache& cache) override;
  absl::Status Attention(Stream& s, const Tensor& q, const PagedKvCache& cache,
                         const AttentionBatch& batch,
                         const Tensor& out) override;
  absl::Status RouterTopK(Stream& s, const Tensor& logits, int k,
                          bool normalize, const Tensor& weights,
                          const Tensor& ids) override;
  absl::Status SiluMul(Stream& s, const Tensor& gate, const Tensor& up,
                       const Tensor& out) override;
  absl::Status Add(Stream& s, const Tensor& a, const Tensor& b,
                   const Tensor& out) override;
  absl::Status GatherRows(Stream& s, const Tensor& x, const Tensor& rows,
                          const Tensor& out) override;
  absl::Status ScaleAddRows(Stream& s, const Tensor& x, const Tensor& rows,
                            const Tensor& weights, const Tensor& y) override;
  absl::Status SigmoidGatedAdd(Stream& s, const Tensor& x, const Tensor& gate,
                               const Tensor& y) override;
  absl::Status ExpertFfn(Stream& s, const Tensor& x, const Tensor& blob,
                         int64_t ffn, const Tensor& workspace,
                         const Tensor& out) override;
  // gate and up in one int4 GEMV launch (LaunchGemvInt4 over both
  // matrices) into the workspace, then SiluMul, then the down GEMV; any
  // layout (bf16 or fp16 scales, zero points or not) and any even group (the
  // vector path needs 32 | group and 16-byte aligned bases, else the scalar
  // path runs). The grouped op runs a layer's int4 experts on the same
  // kernels (bit for bit).
  absl::Status ExpertFfnInt4(Stream& s, const Tensor& x, const Tensor& blob,
                             const Int4ExpertLayout& layout,
                             const Tensor& workspace,
                             const Tensor& out) override;
  // gate and up in one fp8 GEMV launch (LaunchGemvFp8) into the
  // workspace, then SiluMul, then the down GEMV; any tile. cuBLASLt's FP8 GEMM
  // is not used (it would also need x in FP8): large m runs the same GEMV, 8
  // rows of x per pass over the weights.
  absl::Status ExpertFfnFp8(Stream& s, const Tensor& x, const Tensor& blob,
                            const Fp8ExpertLayout& layout,
                            const Tensor& workspace,
                            const Tensor& out) override;
  // int4 and fp8 experts go through Backend::ExpertFfnGrouped (per expert).
  absl::Status ExpertFfnGrouped(Stream& s, const GroupedExperts& call,
                                const Tensor& workspace,
                                const Tensor& out) override;
  absl::Status CombineExpertRows(Stream& s, const Tensor& x,
                                 const Tensor& weights, const Tensor& pairs,
                                 const Tensor& y) override;
  absl::Status Softmax(Stream& s, const Tensor& x, const Tensor& out) override;
  absl::Status Argmax(Stream& s, const Tensor& x, const Tensor& out) override;

  // Graph regions (cuda_backend_graphs.cc).
  bool SetGraphs(bool on) override;
  bool graphs_enabled() const override;
  absl::StatusOr<GraphRun> RunGraph(
      Stream& s, const GraphKey& key,
      absl::FunctionRef<absl::Status()> body) override;
  void DropGraphs(const void* owner) override;
  // Graphs recorded and held now (all owners).
  int64_t graph_count() const;

  // ---- Not in the Backend interface (ExpertFfnInt4 is; it runs on this
  // op's launcher). CPU side: the scalar reference
  // kernels/cpu/reference_ops.h QuantizeInt4 / MatMulInt4Reference.
  // out = x * dequant(wq)^T with signed symmetric int4 weights, two a byte
  // (low nibble = even column), value = (q - 8) * scale, one bf16 scale per
  // `group` columns of each output row:
  //   x F32[m, k], wq I4[n, k] (n rows of k/2 bytes), scales BF16[n, k/group],
  //   group 64 or 128 with k % group == 0, out F32[m, n].
  // InvalidArgument naming the argument on a bad call.
  absl::Status MatMulInt4(Stream& s, const Tensor& x, const Tensor& wq,
                          const Tensor& scales, int64_t group,
                          const Tensor& out);

 private:
  CudaBackend(int device, std::string name, const CudaBackendOptions& options,
              std::unique_ptr<LtGemm> lt);

  // out[m, n] = x[m, k] w[n, k]^T (+ bias) on the GEMV or cuBLASLt path.
  absl::Status Gemm(const CudaStream& cs, const float* x, int64_t m, int64_t k,
                    const uint16_t* w, int64_t n, const uint16_t* bias,
                    float* out, const char* what);

  const int device_id_;
  const std::string name_;
  const CudaBackendOptions options_;
  const std::unique_ptr<LtGemm> lt_;  // Null when options_.lt_min_m == 0.
  std::atomic<int64_t> lt_gemms_{0};
  std::atomic<int64_t> lt_fallbacks_{0};
  std::atomic<bool> graphs_on_{options_.graphs};
  // Declared last: its graphs are destroyed first.
  const std::shared_ptr<CudaGraphCache> graphs_ = NewCudaGraphCache();
};

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_CUDA_BACKEND_H_
