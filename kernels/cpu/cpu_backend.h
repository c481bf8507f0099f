// CpuBackend: the Backend (kernels/backend.h) on host memory. Each op checks
// its arguments (op_checks.h plus range checks of index values), then runs at
// once on the backend's thread pool: a CPU Stream is a handle whose ops have
// completed when the enqueueing call returns, and Synchronize() is a no-op
// that returns OK. Vectorised kernels are picked at runtime with a scalar
// fallback, so the binary needs no -march flag: the bf16 matmul (MatMul,
// ExpertFfn) has AVX2+FMA, AVX-512, AVX512_BF16 and AMX-BF16 variants
// (matmul.h), the int4 expert FFN AVX2+FMA and AVX-512F ones (matmul_int4.h),
// the fp8 expert FFN AVX2+F16C and AVX-512BW ones (matmul_fp8.h).
//
// Kernel variant: CpuBackendOptions::isa if set, else the environment
// variable MOESERVE_CPU_KERNELS (read once per process) if set, else
// BestIsa(): the best fp32 variant (avx512 on an AVX-512 CPU, else avx2).
// MOESERVE_CPU_KERNELS=scalar|avx2|avx512|avx512bf16|amxbf16 forces that
// variant for the bf16 kernels and the int4 ones (amxbf16 -> the int4
// kernels' avx512bf16; the fp8 ones are capped at avx512), clamped to what
// the CPU has (one line on stderr when
// clamped or not understood), so old and new kernels compare in one build.
// name() shows the bf16 variant: "cpu-avx512-2t".
//
// Extra CPU limits (InvalidArgument beyond them): head_dim <= 512, KV
// block_size <= 1024, router experts <= 1024.
//
// Ownership: the backend owns its thread pool; streams borrow the backend and
// must not outlive it. Thread safety: ops may be called from several threads;
// they then take turns on the pool.
#ifndef MOESERVE_KERNELS_CPU_CPU_BACKEND_H_
#define MOESERVE_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace moeserve::kernels::cpu {

struct CpuBackendOptions {
  // Threads that run kernels, counting the caller. Default: 1.
  int num_threads = 1;
  // Use the best SIMD kernels the CPU supports; false forces the scalar ones
  // (tests compare both). Default: true.
  bool use_simd = true;
  // With use_simd, let the int4 and fp8 kernels use AVX-512 where the CPU
  // has it; false caps them at AVX2 (tests compare both). Default: true.
  bool use_avx512 = true;
  // With use_simd, the bf16 kernels' variant (clamped to what the CPU has,
  // silently); it also picks the int4 kernels' (ClampInt4Isa) and caps
  // the fp8 ones. Default: unset
  // (MOESERVE_CPU_KERNELS, else BestIsa()).
  std::optional<Isa> isa;
};

// The variant MOESERVE_CPU_KERNELS asks for, clamped to this CPU; nullopt if
// unset or empty. Read and reported once per process.
std::optional<Isa> IsaFromEnvironment();

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);

  Device device() const override { return Device::kCpu; }
  std::string name() const override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  // The kernels' instruction set: isa() for the bf16 ones (MatMul,
  // ExpertFfn, ...), int4_isa() for ExpertFfnInt4, fp8_isa() for
  // ExpertFfnFp8.
  Isa isa() const { return isa_; }
  Isa int4_isa() const { return int4_isa_; }
  Isa fp8_isa() const { return fp8_isa_; }

  // Memory API: host memory, memcpy at enqueue time, timestamp events.
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(int64_t bytes) override;
  absl::Status RegisterHost(void*, int64_t) override {
    return absl::OkStatus();
  }
  void UnregisterHost(void*) override {}
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
  int num_threads() const { return pool_.num_threads(); }

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
  absl::Status ExpertFfnInt4(Stream& s, const Tensor& x, const Tensor& blob,
                             const Int4ExpertLayout& layout,
                             const Tensor& workspace,
                             const Tensor& out) override;
  absl::Status ExpertFfnFp8(Stream& s, const Tensor& x, const Tensor& blob,
                            const Fp8ExpertLayout& layout,
                            const Tensor& workspace,
                            const Tensor& out) override;
  absl::Status CombineExpertRows(Stream& s, const Tensor& x,
                                 const Tensor& weights, const Tensor& pairs,
                                 const Tensor& y) override;
  absl::Status Softmax(Stream& s, const Tensor& x, const Tensor& out) override;
  absl::Status Argmax(Stream& s, const Tensor& x, const Tensor& out) override;

 private:
  // OK iff s is a stream of this backend.
  absl::Status CheckStream(const Stream& s) const;

  ThreadPool pool_;
  Isa isa_;
  Isa int4_isa_;
  Isa fp8_isa_;
};

}  // namespace moeserve::kernels::cpu

#endif  // MOESERVE_KERNELS_CPU_CPU_BACKEND_H_
