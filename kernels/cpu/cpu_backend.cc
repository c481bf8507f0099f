#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/host_memory.h"
#include "kernels/cpu/matmul_fp8.h"
#include "kernels/cpu/matmul_int4.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels::cpu {
namespace {

// Ops run at enqueue time, so there is never anything to wait for.
class CpuStream final : public Stream {
 public:
  explicit CpuStream(const CpuBackend* owner) : owner_(owner) {}
  Device device() const override { return Device::kCpu; }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  const CpuBackend* owner() const { return owner_; }

 private:
  const CpuBackend* owner_;
};

// OK iff every ids[i] is in [lo, hi).
absl::Status CheckIndices(const char* op, const char* name, const Tensor& ids,
                          int64_t lo, int64_t hi) {
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (p[i] < lo || p[i] >= hi) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, "[", i,
                                                     "] = ", p[i], " not in [",
                                                     lo, ", ", hi, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status TooLarge(const char* op, const char* what, int64_t value,
                      int64_t limit) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", what, " ", value, " exceeds the CPU limit ", limit));
}

// The value checks of Attention: well-formed query_start, positions within
// the block tables, and every block a query can reach inside the pool.
absl::Status CheckAttentionValues(const Tensor& q, const PagedKvCache& cache,
                                  const AttentionBatch& batch) {
  const char* kOp = "Attention";
  const int32_t* qs = batch.query_start.data<int32_t>();
  const int64_t num_seqs = batch.query_start.dim(0) - 1;
  const int64_t block_size = cache.k_pool.dim(1);
  const int64_t max_blocks = batch.block_tables.dim(1);
  const int32_t* pos = batch.positions.data<int32_t>();
  const int32_t* tables = batch.block_tables.data<int32_t>();
  if (qs[0] != 0 || qs[num_seqs] != q.dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": query_start must run from 0 to n_q = ", q.dim(0)));
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    if (qs[s + 1] < qs[s]) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": query_start decreases at ", s));
    }
    int64_t max_pos = -1;
    for (int64_t r = qs[s]; r < qs[s + 1]; ++r) {
      if (pos[r] < 0 || pos[r] >= max_blocks * block_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOp, ": positions[", r, "] = ", pos[r], " outside the ",
            max_blocks * block_size, " slots of its block table"));
      }
      max_pos = std::max<int64_t>(max_pos, pos[r]);
    }
    for (int64_t blk = 0; blk <= max_pos / block_size && max_pos >= 0; ++blk) {
      const int32_t id = tables[s * max_blocks + blk];
      if (id < 0 || id >= cache.k_pool.dim(0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kOp, ": block_tables[", s, ", ", blk, "] = ", id,
                         " not in [0, ", cache.k_pool.dim(0), ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<Isa> IsaFromEnvironment() {
  static const std::optional<Isa> isa = []() -> std::optional<Isa> {
    const char* value = std::getenv("MOESERVE_CPU_KERNELS");
    if (value == nullptr || *value == '\0') return std::nullopt;
    const std::optional<Isa> want = ParseIsa(value);
    if (!want.has_value()) {
      std::fprintf(stderr,
                   "MOESERVE_CPU_KERNELS=%s not understood (scalar, avx2, "
                   "avx512, avx512bf16, amxbf16); using %s\n",
                   value, IsaName(BestIsa()));
      return std::nullopt;
    }
    const Isa got = ClampIsa(*want);
    if (got != *want) {
      std::fprintf(stderr,
                   "MOESERVE_CPU_KERNELS=%s: this CPU lacks it; using %s\n",
                   value, IsaName(got));
    }
    return got;
  }();
  return isa;
}

namespace {

// The variant asked for by the options or else the environment, if any.
std::optional<Isa> RequestedIsa(const CpuBackendOptions& options) {
  if (options.isa.has_value()) return options.isa;
  return IsaFromEnvironment();
}

// The bf16 kernels' variant (see the header).
Isa ChooseIsa(const CpuBackendOptions& options) {
  if (!options.use_simd) return Isa::kScalar;
  return ClampIsa(RequestedIsa(options).value_or(BestIsa()));
}

// The int4 kernels' variant: the best one, capped by a requested variant and
// by use_avx512.
Isa ChooseInt4Isa(const CpuBackendOptions& options) {
  if (!options.use_simd) return Isa::kScalar;
  Isa isa = BestInt4Isa();
  // A variant asked for by name runs when this CPU has it (avx512bf16: the
  // int4 kernel with x rounded to bf16, as the bf16 kernels' avx512bf16;
  // amxbf16 has no int4 kernel of its own and takes that one).
  if (auto want = RequestedIsa(options)) isa = ClampInt4Isa(*want);
  if (!options.use_avx512) isa = std::min(isa, Isa::kAvx2);
  return isa;
}

// The fp8 kernels' variant: as the int4 ones, from BestFp8Isa.
Isa ChooseFp8Isa(const CpuBackendOptions& options) {
  if (!options.use_simd) return Isa::kScalar;
  Isa isa = BestFp8Isa();
  if (auto want = RequestedIsa(options)) isa = std::min(isa, *want);
  if (!options.use_avx512) isa = std::min(isa, Isa::kAvx2);
  return isa;
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : pool_(options.num_threads),
      isa_(ChooseIsa(options)),
      int4_isa_(ChooseInt4Isa(options)),
      fp8_isa_(ChooseFp8Isa(options)) {}

std::string CpuBackend::name() const {
  return absl::StrCat("cpu-", IsaName(isa_), "-", pool_.num_threads(), "t");
}

absl::StatusOr<std::unique_ptr<Stream>> CpuBackend::CreateStream() {
  return std::make_unique<CpuStream>(this);
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBackend::Allocate(int64_t bytes) {
  return AllocateAligned(bytes, 256);
}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBackend::AllocateHost(
    int64_t bytes) {
  return AllocateAligned(bytes, 4096);
}

absl::Status CpuBackend::CopyToDevice(Stream& s, void* dst, const void* src,
                                      int64_t bytes) {
  return CopyOnDevice(s, dst, src, bytes);
}

absl::Status CpuBackend::CopyToHost(Stream& s, void* dst, const void* src,
                                    int64_t bytes) {
  return CopyOnDevice(s, dst, src, bytes);
}

absl::Status CpuBackend::CopyOnDevice(Stream& s, void* dst, const void* src,
                                      int64_t bytes) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  if (bytes < 0) return absl::InvalidArgumentError("copy of negative size");
  if (bytes > 0) std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::Zero(Stream& s, void* dst, int64_t bytes) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  if (bytes < 0) return absl::InvalidArgumentError("zero of negative size");
  if (bytes > 0) std::memset(dst, 0, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Event>> CpuBackend::CreateEvent() {
  return std::make_unique<TimeEvent>();
}

absl::Status CpuBackend::RecordEvent(Stream& s, Event& e) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  auto* event = dynamic_cast<TimeEvent*>(&e);
  if (event == nullptr) {
    return absl::InvalidArgumentError("event does not belong to this backend");
  }
  event->Record();  // Every earlier op has already run.
  return absl::OkStatus();
}

absl::Status CpuBackend::WaitEvent(Stream& s, Event& e) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  if (dynamic_cast<TimeEvent*>(&e) == nullptr) {
    return absl::InvalidArgumentError("event does not belong to this backend");
  }
  return absl::OkStatus();  // Recorded work has finished already.
}

absl::Status CpuBackend::CheckStream(const Stream& s) const {
  const auto* cpu = dynamic_cast<const CpuStream*>(&s);
  if (cpu == nullptr || cpu->owner() != this) {
    return absl::InvalidArgumentError("stream does not belong to this backend");
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Embedding(Stream& s, const Tensor& ids,
                                   const Tensor& table, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckEmbedding(Device::kCpu, ids, table, out));
  MOESERVE_RETURN_IF_ERROR(
      CheckIndices("Embedding", "ids", ids, 0, table.dim(0)));
  EmbeddingRows(pool_, ids.data<int32_t>(), ids.dim(0), table.data<bf16>(),
                table.dim(1), out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::RmsNorm(Stream& s, const Tensor& x, const Tensor& w,
                                 float eps, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckRmsNorm(Device::kCpu, x, w, eps, out));
  RmsNormRows(pool_, x.data<float>(), x.dim(0), x.dim(1), w.data<bf16>(), eps,
              out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::MatMul(Stream& s, const Tensor& x, const Tensor& w,
                                const Tensor& bias, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckMatMul(Device::kCpu, x, w, bias, out));
  MatMulBf16(pool_, isa_, x.data<float>(), x.dim(0), x.dim(1), w.data<bf16>(),
             w.dim(0), bias.valid() ? bias.data<bf16>() : nullptr,
             out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::RopeRotateHalf(Stream& s, const Tensor& x,
                                        const Tensor& positions, float theta) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckRope(Device::kCpu, x, positions, theta));
  if (x.dim(2) > kMaxHeadDim) {
    return TooLarge("RopeRotateHalf", "head_dim", x.dim(2), kMaxHeadDim);
  }
  MOESERVE_RETURN_IF_ERROR(CheckIndices("RopeRotateHalf", "positions",
                                        positions, 0, int64_t{1} << 31));
  RopeRotateHalfRows(pool_, x.data<float>(), x.dim(0), x.dim(1), x.dim(2),
                     positions.data<int32_t>(), theta);
  return absl::OkStatus();
}

absl::Status CpuBackend::KvWrite(Stream& s, const Tensor& k, const Tensor& v,
                                 const Tensor& slot_mapping,
                                 const PagedKvCache& cache) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckKvWrite(Device::kCpu, k, v, slot_mapping, cache));
  const int64_t slots = cache.k_pool.dim(0) * cache.k_pool.dim(1);
  MOESERVE_RETURN_IF_ERROR(
      CheckIndices("KvWrite", "slot_mapping", slot_mapping, INT32_MIN, slots));
  KvWriteRows(pool_, k, v, slot_mapping.data<int32_t>(), cache);
  return absl::OkStatus();
}

absl::Status CpuBackend::Attention(Stream& s, const Tensor& q,
                                   const PagedKvCache& cache,
                                   const AttentionBatch& batch,
                                   const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckAttention(Device::kCpu, q, cache, batch, out));
  if (q.dim(2) > kMaxHeadDim) {
    return TooLarge("Attention", "head_dim", q.dim(2), kMaxHeadDim);
  }
  if (cache.k_pool.dim(1) > kMaxBlockSize) {
    return TooLarge("Attention", "block_size", cache.k_pool.dim(1),
                    kMaxBlockSize);
  }
  MOESERVE_RETURN_IF_ERROR(CheckAttentionValues(q, cache, batch));
  PagedAttention(pool_, isa_, q, cache, batch, out);
  return absl::OkStatus();
}

absl::Status CpuBackend::RouterTopK(Stream& s, const Tensor& logits, int k,
                                    bool normalize, const Tensor& weights,
                                    const Tensor& ids) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckRouterTopK(Device::kCpu, logits, k, weights, ids));
  if (logits.dim(1) > kMaxExperts) {
    return TooLarge("RouterTopK", "experts", logits.dim(1), kMaxExperts);
  }
  RouterTopKRows(pool_, logits.data<float>(), logits.dim(0), logits.dim(1), k,
                 normalize, weights.data<float>(), ids.data<int32_t>());
  return absl::OkStatus();
}

absl::Status CpuBackend::SiluMul(Stream& s, const Tensor& gate,
                                 const Tensor& up, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckSameShapeF32(Device::kCpu, gate, up, out));
  const int64_t f = gate.dim(1);
  SiluMulRows(pool_, gate.data<float>(), f, up.data<float>(), f, gate.dim(0), f,
              out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::Add(Stream& s, const Tensor& a, const Tensor& b,
                             const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckSameShapeF32(Device::kCpu, a, b, out));
  AddElems(pool_, a.data<float>(), b.data<float>(), a.numel(),
           out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherRows(Stream& s, const Tensor& x,
                                    const Tensor& rows, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckGatherRows(Device::kCpu, x, rows, out));
  MOESERVE_RETURN_IF_ERROR(
      CheckIndices("GatherRows", "rows", rows, 0, x.dim(0)));
  GatherRowsF32(pool_, x.data<float>(), x.dim(1), rows.data<int32_t>(),
                rows.dim(0), out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::ScaleAddRows(Stream& s, const Tensor& x,
                                      const Tensor& rows, const Tensor& weights,
                                      const Tensor& y) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckScaleAddRows(Device::kCpu, x, rows, weights, y));
  if (rows.valid()) {
    MOESERVE_RETURN_IF_ERROR(
        CheckIndices("ScaleAddRows", "rows", rows, 0, y.dim(0)));
  }
  ScaleAddRowsF32(pool_, x.data<float>(), x.dim(0), x.dim(1),
                  rows.valid() ? rows.data<int32_t>() : nullptr,
                  weights.data<float>(), y.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::SigmoidGatedAdd(Stream& s, const Tensor& x,
                                         const Tensor& gate, const Tensor& y) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckSigmoidGatedAdd(Device::kCpu, x, gate, y));
  SigmoidGatedAddRows(pool_, x.data<float>(), x.dim(0), x.dim(1),
                      gate.data<float>(), y.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::ExpertFfn(Stream& s, const Tensor& x,
                                   const Tensor& blob, int64_t ffn,
                                   const Tensor& workspace, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfn(Device::kCpu, x, blob, ffn, workspace, out));
  const int64_t m = x.dim(0), hidden = x.dim(1);
  const bf16* w = blob.data<bf16>();
  float* gate_up = workspace.data<float>();  // [m, 2 * ffn]
  float* act = gate_up + m * 2 * ffn;        // [m, ffn]
  // Gate and up are adjacent in the blob: one [2*ffn, hidden] weight, so one
  // pass over the weights and one thread split for both.
  MatMulBf16(pool_, isa_, x.data<float>(), m, hidden, w, 2 * ffn, nullptr,
             gate_up);
  SiluMulRows(pool_, gate_up, 2 * ffn, gate_up + ffn, 2 * ffn, m, ffn, act);
  MatMulBf16(pool_, isa_, act, m, ffn, w + 2 * ffn * hidden, hidden, nullptr,
             out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::ExpertFfnInt4(Stream& s, const Tensor& x,
                                       const Tensor& blob,
                                       const Int4ExpertLayout& layout,
                                       const Tensor& workspace,
                                       const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfnInt4(Device::kCpu, x, blob, layout, workspace, out));
  const int64_t m = x.dim(0), ffn = layout.ffn;
  const auto* expert = static_cast<const std::byte*>(blob.raw());
  const Int4Matrix gate = Int4ExpertPart(expert, layout, Int4Part::kGate);
  const Int4Matrix up = Int4ExpertPart(expert, layout, Int4Part::kUp);
  const Int4Matrix down = Int4ExpertPart(expert, layout, Int4Part::kDown);
  float* gate_up = workspace.data<float>();  // [m, 2 * ffn]
  float* act = gate_up + m * 2 * ffn;        // [m, ffn]
  // Gate and up stacked as one [2*ffn, hidden] weight: one pass, one split.
  MatMulInt4(pool_, int4_isa_, x.data<float>(), m, gate, &up, gate_up);
  SiluMulRows(pool_, gate_up, 2 * ffn, gate_up + ffn, 2 * ffn, m, ffn, act);
  MatMulInt4(pool_, int4_isa_, act, m, down, nullptr, out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::ExpertFfnFp8(Stream& s, const Tensor& x,
                                      const Tensor& blob,
                                      const Fp8ExpertLayout& layout,
                                      const Tensor& workspace,
                                      const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfnFp8(Device::kCpu, x, blob, layout, workspace, out));
  const int64_t m = x.dim(0), ffn = layout.ffn;
  const auto* expert = static_cast<const std::byte*>(blob.raw());
  const Fp8Matrix gate = Fp8ExpertPart(expert, layout, Fp8Part::kGate);
  const Fp8Matrix up = Fp8ExpertPart(expert, layout, Fp8Part::kUp);
  const Fp8Matrix down = Fp8ExpertPart(expert, layout, Fp8Part::kDown);
  float* gate_up = workspace.data<float>();  // [m, 2 * ffn]
  float* act = gate_up + m * 2 * ffn;        // [m, ffn]
  // Gate and up stacked as one [2*ffn, hidden] weight: one pass, one split.
  MatMulFp8(pool_, fp8_isa_, x.data<float>(), m, gate, &up, gate_up);
  SiluMulRows(pool_, gate_up, 2 * ffn, gate_up + ffn, 2 * ffn, m, ffn, act);
  MatMulFp8(pool_, fp8_isa_, act, m, down, nullptr, out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::CombineExpertRows(Stream& s, const Tensor& x,
                                           const Tensor& weights,
                                           const Tensor& pairs,
                                           const Tensor& y) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckCombineExpertRows(Device::kCpu, x, weights, pairs, y));
  MOESERVE_RETURN_IF_ERROR(
      CheckIndices("CombineExpertRows", "pairs", pairs, -1, x.dim(0)));
  CombineRowsF32(pool_, x.data<float>(), x.dim(1), weights.data<float>(),
                 pairs.data<int32_t>(), pairs.dim(0), pairs.dim(1),
                 y.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::Softmax(Stream& s, const Tensor& x,
                                 const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckSoftmax(Device::kCpu, x, out));
  SoftmaxRows(pool_, x.data<float>(), x.dim(0), x.dim(1), out.data<float>());
  return absl::OkStatus();
}

absl::Status CpuBackend::Argmax(Stream& s, const Tensor& x, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckArgmax(Device::kCpu, x, out));
  ArgmaxRows(pool_, x.data<float>(), x.dim(0), x.dim(1), out.data<int32_t>());
  return absl::OkStatus();
}

}  // namespace moeserve::kernels::cpu
