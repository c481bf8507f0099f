// LtGemm: the cuBLASLt path of CudaBackend::MatMul for m >= 16 rows (prefill,
// big decode batches, an expert with many tokens), where tensor cores beat the
// warp-per-column GEMV of kernels.cu.
//
// Our activations are F32 and weights BF16, and cuBLASLt has no bf16 x fp32
// mix. So x is split exactly enough into two bf16 matrices,
//   hi = bf16(x),  lo = bf16(x - hi),   x - (hi + lo) = O(2^-17 |x|),
// and out = hi W^T + lo W^T is two bf16 GEMMs with fp32 compute, fp32 scale
// and fp32 C/D (the second accumulates into the first with beta = 1). Each
// bf16 x bf16 product is exact in fp32, so the result stays within ~1e-5
// relative of the fp32-activation reference (kernels/cpu/reference_ops) and
// greedy decoding on CUDA matches the CPU backend. The price is reading W
// twice (the second read is mostly an L2 hit for expert-sized W).
//
// Layout: row-major out[m, n] = x[m, k] W[n, k]^T is, column-major,
//   D (n x m, ld n) = op_T(A: W as k x n, ld k) * B (hi or lo as k x m, ld k),
// i.e. CUBLASLT_MATMUL_DESC_TRANSA = CUBLAS_OP_T, no copy of W.
//
// One LtGemm per CudaBackend owns the cublasLtHandle_t and a cache of plans
// (descriptors + the algorithm cublasLtMatmulAlgoGetHeuristic picked) keyed by
// (m, n, k, pointer alignments, workspace size). The device scratch (cuBLASLt
// workspace and the hi/lo buffers) belongs to each CudaStream and comes in as
// LtScratch: ops never allocate. When x does not fit the hi/lo buffers, rows
// are processed in chunks.
//
// Like launchers.h this header uses std types only (host C++ cannot include
// the CUDA headers, see runtime_shim.h); the implementation is
// cublaslt_gemm.cu, compiled by nvcc.
//
// Thread safety: Run() may be called from several threads (the plan cache is
// locked; cuBLASLt handles are safe to share when each call has its own
// stream and workspace, which each CudaStream provides).
#ifndef MOESERVE_KERNELS_CUDA_CUBLASLT_GEMM_H_
#define MOESERVE_KERNELS_CUDA_CUBLASLT_GEMM_H_

#include <cstdint>
#include <memory>

#include "kernels/cuda/runtime_shim.h"

namespace moeserve::kernels::cuda {

// Error codes of LtGemm: 0 = success; 1..kCublasErrorBase-1 = a cudaError_t;
// kCublasErrorBase + s = the cublasStatus_t s.
inline constexpr int kCublasErrorBase = 1 << 20;
// cuBLASLt has no algorithm for this shape / alignment / workspace (or the
// rows of x do not fit the split buffers): nothing was enqueued; the caller
// falls back to the GEMV.
inline constexpr int kLtNotSupported = kCublasErrorBase + 15;

// "cudaErrorX" or "CUBLAS_STATUS_X" for an LtGemm error code.
const char* LtErrorName(int code);

// Device scratch of one stream (see CudaStream).
struct LtScratch {
  void* workspace = nullptr;  // cuBLASLt workspace, 256-byte aligned.
  int64_t workspace_bytes = 0;
  uint16_t* split = nullptr;  // hi then lo: 2 * split_elems bf16.
  int64_t split_elems = 0;    // Elements of each half (rows * k per chunk).
};

class LtGemm {
 public:
  // Creates the cuBLASLt handle for the current device. Returns an error code.
  static int Create(std::unique_ptr<LtGemm>* out);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Enqueues out[m, n] = x[m, k] * w[n, k]^T (+ bias[n]) on `stream`.
  // x, out F32; w, bias BF16 bits (bias may be null). REQUIRES: m, n, k > 0,
  // arguments validated by the caller. Returns kLtNotSupported (nothing
  // enqueued) when no cuBLASLt algorithm fits.
  int Run(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n,
          const uint16_t* bias, float* out, const LtScratch& scratch,
          Strm stream);

  // Plans in the cache (for tests).
  int64_t cached_plans() const;

 private:
  struct Impl;
  explicit LtGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_CUBLASLT_GEMM_H_
