// cuBLASLt GEMM with the bf16 hi/lo split of F32 activations (see
// cublaslt_gemm.h for the why and the layout).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/cublaslt_gemm.h"

namespace moeserve::kernels::cuda {
namespace {

constexpr int kBlock = 256;
// Plans are small (a few hundred bytes of descriptors); the cache is cleared
// when it grows past this many, e.g. after a server saw every prefill length.
constexpr size_t kMaxPlans = 4096;

int Grid(int64_t count) {
  const int64_t b = (count + kBlock - 1) / kBlock;
  return static_cast<int>(std::clamp<int64_t>(b, 1, 65535 * 32));
}

// hi = bf16(x) (round to nearest even), lo = bf16(x - hi). x - hi is exact in
// fp32 (hi is x rounded to 8 significant bits), so x - (hi + lo) is only lo's
// own rounding: at most 2^-9 |lo| <= 2^-18 |x| (plus ulp effects).
__global__ void SplitBf16Kernel(const float* x, int64_t count, uint16_t* hi,
                                uint16_t* lo) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    const __nv_bfloat16 l = __float2bfloat16_rn(v - __bfloat162float(h));
    hi[i] = __bfloat16_as_ushort(h);
    lo[i] = __bfloat16_as_ushort(l);
  }
}

// out[i, :] = bias, so both GEMMs can accumulate (beta = 1) on top of it.
__global__ void BiasRowsKernel(float* out, int64_t rows, int64_t n,
                               const uint16_t* bias) {
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __uint_as_float(static_cast<uint32_t>(bias[i % n]) << 16);
  }
}

// Largest power of two <= 256 that divides the address (cuBLASLt's heuristic
// assumes 256-byte aligned pointers unless told otherwise).
uint32_t Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

int FromCublas(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? 0
                                    : kCublasErrorBase + static_cast<int>(s);
}

struct PlanKey {
  int64_t m, n, k;
  uint32_t align_a, align_b, align_c;
  int64_t workspace_bytes;
  bool operator<(const PlanKey& o) const {
    return std::tie(m, n, k, align_a, align_b, align_c, workspace_bytes) <
           std::tie(o.m, o.n, o.k, o.align_a, o.align_b, o.align_c,
                    o.workspace_bytes);
  }
};

// Descriptors and the chosen algorithm for one PlanKey; `supported` false
// records that cuBLASLt has nothing for it (so the heuristic is asked once).
struct Plan {
  bool supported = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

}  // namespace

struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  // std::mutex, not base::Mutex: nvcc builds this file (no Abseil, no clang
  // analysis), so an annotation here would be a comment either way.
  mutable std::mutex mu;
  std::map<PlanKey, std::shared_ptr<const Plan>> plans;  // Guarded by mu.

  ~Impl() {
    plans.clear();
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  // Fills `p` for `key`: kLtNotSupported if no algorithm fits. Each step
  // runs only while every earlier one succeeded (plain code: this file is
  // built by nvcc without Abseil, so base/status_macros.h is not available).
  int MakePlan(const PlanKey& key, Plan* p) const {
    cublasStatus_t st =
        cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    auto ok = [&st] { return st == CUBLAS_STATUS_SUCCESS; };
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    if (ok()) {
      st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                          &trans_a, sizeof(trans_a));
    }
    if (ok()) {
      st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                          &trans_b, sizeof(trans_b));
    }
    // Column-major views of the row-major operands (see the header).
    if (ok()) {
      st = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, key.k, key.n, key.k);
    }
    if (ok()) {
      st = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, key.k, key.m, key.k);
    }
    if (ok()) {
      st = cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, key.n, key.m, key.n);
    }

    cublasLtMatmulPreference_t pref = nullptr;
    if (ok()) st = cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t ws = static_cast<uint64_t>(key.workspace_bytes);
    if (ok()) {
      st = cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    }
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
    for (const auto& [attr, value] : aligns) {
      if (ok()) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value,
                                                  sizeof(value));
      }
    }
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    if (ok()) {
      st = cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->a, p->b, p->c,
                                          p->c, pref, 1, &result, &returned);
    }
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (ok() && returned == 0)) {
      return kLtNotSupported;
    }
    if (!ok()) return FromCublas(st);
    p->algo = result.algo;
    p->supported = true;
    return 0;
  }

  // The cached plan for `key`, made on first use. Errors other than
  // kLtNotSupported are not cached.
  int GetPlan(const PlanKey& key, std::shared_ptr<const Plan>* out) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = plans.find(key);
      if (it != plans.end()) {
        *out = it->second;
        return 0;
      }
    }
    // Made unlocked: the heuristic takes tens of microseconds. A racing
    // thread may make the same plan; the first one inserted wins.
    auto plan = std::make_shared<Plan>();
    const int err = MakePlan(key, plan.get());
    if (err != 0 && err != kLtNotSupported) return err;
    std::lock_guard<std::mutex> lock(mu);
    if (plans.size() >= kMaxPlans) plans.clear();
    *out = plans.emplace(key, std::move(plan)).first->second;
    return 0;
  }
};

LtGemm::LtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LtGemm::~LtGemm() = default;

int LtGemm::Create(std::unique_ptr<LtGemm>* out) {
  auto impl = std::make_unique<Impl>();
  if (const int e = FromCublas(cublasLtCreate(&impl->handle)); e != 0) {
    return e;
  }
  out->reset(new LtGemm(std::move(impl)));
  return 0;
}

int64_t LtGemm::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->plans.size());
}

int LtGemm::Run(const float* x, int64_t m, int64_t k, const uint16_t* w,
                int64_t n, const uint16_t* bias, float* out,
                const LtScratch& scratch, Strm stream) {
  if (m <= 0 || n <= 0 || k <= 0 || scratch.split == nullptr ||
      (scratch.workspace == nullptr && scratch.workspace_bytes > 0)) {
    return kLtNotSupported;
  }
  const int64_t chunk = std::min(m, scratch.split_elems / k);
  if (chunk <= 0) return kLtNotSupported;
  uint16_t* hi = scratch.split;
  uint16_t* lo = scratch.split + scratch.split_elems;

  // Plan every chunk before enqueuing anything, so that kLtNotSupported
  // leaves the stream untouched and the caller can fall back cleanly.
  std::vector<std::shared_ptr<const Plan>> plans;
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = std::min(chunk, m - r0);
    const PlanKey key{rows,
                      n,
                      k,
                      Alignment(w),
                      std::min(Alignment(hi), Alignment(lo)),
                      Alignment(out + r0 * n),
                      scratch.workspace_bytes};
    std::shared_ptr<const Plan> plan;
    if (const int err = impl_->GetPlan(key, &plan); err != 0) return err;
    if (!plan->supported) return kLtNotSupported;
    plans.push_back(std::move(plan));
  }

  const float one = 1.0f;
  for (size_t c = 0; c < plans.size(); ++c) {
    const Plan& p = *plans[c];
    const int64_t r0 = static_cast<int64_t>(c) * chunk;
    const int64_t rows = std::min(chunk, m - r0);
    float* d = out + r0 * n;
    SplitBf16Kernel<<<Grid(rows * k), kBlock, 0, stream>>>(x + r0 * k, rows * k,
                                                           hi, lo);
    float beta_hi = 0.0f;
    if (bias != nullptr) {
      BiasRowsKernel<<<Grid(rows * n), kBlock, 0, stream>>>(d, rows, n, bias);
      beta_hi = 1.0f;
    }
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    // D = W^T hi (+ bias), then D += W^T lo. C and D are the same matrix
    // with the same layout (in place, allowed by cublasLtMatmul).
    const size_t ws = static_cast<size_t>(scratch.workspace_bytes);
    cublasStatus_t st =
        cublasLtMatmul(impl_->handle, p.desc, &one, w, p.a, hi, p.b, &beta_hi,
                       d, p.c, d, p.c, &p.algo, scratch.workspace, ws, stream);
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmul(impl_->handle, p.desc, &one, w, p.a, lo, p.b, &one, d,
                          p.c, d, p.c, &p.algo, scratch.workspace, ws, stream);
    }
    if (st != CUBLAS_STATUS_SUCCESS) return FromCublas(st);
  }
  return 0;
}

const char* LtErrorName(int code) {
  if (code >= kCublasErrorBase) {
    return cublasLtGetStatusName(
        static_cast<cublasStatus_t>(code - kCublasErrorBase));
  }
  return cudaGetErrorName(static_cast<cudaError_t>(code));
}

}  // namespace moeserve::kernels::cuda
