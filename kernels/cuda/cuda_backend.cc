#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/int4_checks.h"
#include "kernels/cuda/launchers.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels::cuda {
namespace {

absl::Status TooLarge(const char* op, const char* what, int64_t value,
                      int64_t limit) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", what, " ", value, " exceeds the CUDA limit ", limit));
}

const uint16_t* Bf16Ptr(const Tensor& t) {
  return static_cast<const uint16_t*>(t.raw());
}

// The quantized GEMVs of one int4 / fp8 expert as offsets into its blob:
// gate and up as one [2 ffn, hidden] matrix (rows [0, ffn) gate, then up),
// and down. Shared by the per-expert and the grouped ops, so both launch the
// same kernel on the same operands.
Int4GemvSpec Int4GateUpSpec(const Int4ExpertLayout& l) {
  Int4GemvSpec p;
  p.k = l.hidden;
  p.n = 2 * l.ffn;
  p.split = l.ffn;
  p.group = l.group_in;
  p.f16_scales = l.scale_type == Int4ScaleType::kF16;
  p.zeros = l.has_zeros;
  p.a = {l.gate_q, l.gate_scales, l.gate_zeros};
  p.b = {l.up_q, l.up_scales, l.up_zeros};
  return p;
}

Int4GemvSpec Int4DownSpec(const Int4ExpertLayout& l) {
  Int4GemvSpec p;
  p.k = l.ffn;
  p.n = l.hidden;
  p.split = l.hidden;
  p.group = l.group_out;
  p.f16_scales = l.scale_type == Int4ScaleType::kF16;
  p.zeros = l.has_zeros;
  p.a = {l.down_q, l.down_scales, l.down_zeros};
  return p;
}

// Fp8ExpertPart's tiles: the requested tile clamped to the part's shape.
Fp8GemvSpec Fp8GateUpSpec(const Fp8ExpertLayout& l) {
  Fp8GemvSpec p;
  p.k = l.hidden;
  p.n = 2 * l.ffn;
  p.split = l.ffn;
  const int64_t tr = std::min(l.block_rows, l.ffn);
  const int64_t tc = std::min(l.block_cols, l.hidden);
  p.a = {l.gate_q, l.gate_scales, tr, tc};
  p.b = {l.up_q, l.up_scales, tr, tc};
  return p;
}

Fp8GemvSpec Fp8DownSpec(const Fp8ExpertLayout& l) {
  Fp8GemvSpec p;
  p.k = l.ffn;
  p.n = l.hidden;
  p.split = l.hidden;
  p.a = {l.down_q, l.down_scales, std::min(l.block_rows, l.hidden),
         std::min(l.block_cols, l.ffn)};
  return p;
}

// gate_up [m, 2 ffn] -> act [m, ffn], then down, for the int4 or fp8 GEMV
// (Launch: LaunchGemvInt4 or LaunchGemvFp8) over `groups` (rows of x and
// of out; gate_up and act rows alike). The SiLU covers rows [lo, hi).
template <typename Spec, typename Launch>
absl::Status QuantExpertFfn(Launch launch, const Spec& gate_up_spec,
                            const Spec& down_spec, const float* x,
                            const QuantGroup* groups, int64_t num_groups,
                            int64_t lo, int64_t hi, float* gate_up, float* act,
                            float* out, Strm st, const char* op) {
  const int64_t ffn = gate_up_spec.split;
  // The names are made only for an error: this runs for every expert.
  auto fail = [op](int e, const char* step) {
    return FromCuda(e, absl::StrCat(op, " ", step).c_str());
  };
  if (const int e = launch(x, gate_up_spec, groups, num_groups, gate_up, st);
      e != 0) {
    return fail(e, "gate_up");
  }
  if (const int e = LaunchSiluMul(gate_up + lo * 2 * ffn, 2 * ffn,
                                  gate_up + lo * 2 * ffn + ffn, 2 * ffn,
                                  hi - lo, ffn, act + lo * ffn, st);
      e != 0) {
    return fail(e, "silu");
  }
  if (const int e = launch(act, down_spec, groups, num_groups, out, st);
      e != 0) {
    return fail(e, "down");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    int device, const CudaBackendOptions& options) {
  if (options.lt_min_m < 0 || options.lt_workspace_bytes < 0 ||
      (options.lt_min_m > 0 && options.lt_split_elems <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackendOptions: lt_min_m ", options.lt_min_m,
                     ", lt_workspace_bytes ", options.lt_workspace_bytes,
                     ", lt_split_elems ", options.lt_split_elems,
                     " (need >= 0, >= 0, > 0 when lt_min_m > 0)"));
  }
  int count = 0;
  const int err = RtDeviceCount(&count);
  if (err != 0 || count == 0) {
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device",
        err != 0 ? absl::StrCat(" (", RtErrorName(err), ")") : std::string()));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " not in [0, ", count, ")"));
  }
  MOESERVE_RETURN_IF_ERROR(FromCuda(RtEnsureDevice(device), "cudaSetDevice"));
  char name[256];
  MOESERVE_RETURN_IF_ERROR(FromCuda(RtDeviceName(device, name, sizeof(name)),
                                    "cudaGetDeviceProperties"));
  std::unique_ptr<LtGemm> lt;
  if (options.lt_min_m > 0) {
    if (const int e = LtGemm::Create(&lt); e != 0) {
      return absl::InternalError(
          absl::StrCat("cublasLtCreate: ", LtErrorName(e)));
    }
  }
  CudaBackendOptions opts = options;
  // A multiple of 128 keeps the lo half 256-byte aligned like the hi half.
  opts.lt_split_elems = (opts.lt_split_elems + 127) / 128 * 128;
  return std::unique_ptr<CudaBackend>(new CudaBackend(
      device, absl::StrCat("cuda-", device, "-", name), opts, std::move(lt)));
}

CudaBackend::CudaBackend(int device, std::string name,
                         const CudaBackendOptions& options,
                         std::unique_ptr<LtGemm> lt)
    : device_id_(device),
      name_(std::move(name)),
      options_(options),
      lt_(std::move(lt)) {}

CudaBackend::~CudaBackend() = default;

absl::StatusOr<std::unique_ptr<Stream>> CudaBackend::CreateStream() {
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtEnsureDevice(device_id_), "cudaSetDevice"));
  // The cuBLASLt scratch first, so a failure leaves nothing behind.
  LtScratch scratch;
  if (lt_ != nullptr) {
    void *ws = nullptr, *split = nullptr;
    const int64_t split_bytes = 2 * options_.lt_split_elems * 2;
    int e = options_.lt_workspace_bytes > 0
                ? RtMalloc(&ws, options_.lt_workspace_bytes)
                : 0;
    if (e == 0) e = RtMalloc(&split, split_bytes);
    if (e != 0) {
      RtGetLastError();  // Reported here; not the next launch's error.
      if (ws != nullptr) RtFree(ws);
      return absl::ResourceExhaustedError(absl::StrCat(
          "CreateStream: cuBLASLt scratch of ", options_.lt_workspace_bytes,
          " + ", split_bytes, " bytes: ", RtErrorName(e)));
    }
    scratch = {ws, options_.lt_workspace_bytes, static_cast<uint16_t*>(split),
               options_.lt_split_elems};
  }
  Strm stream = nullptr;
  if (absl::Status st = FromCuda(RtStreamCreate(&stream), "cudaStreamCreate");
      !st.ok()) {
    if (scratch.workspace != nullptr) RtFree(scratch.workspace);
    if (scratch.split != nullptr) RtFree(scratch.split);
    return st;
  }
  return std::make_unique<CudaStream>(this, device_id_, stream, scratch);
}

absl::StatusOr<std::unique_ptr<Stream>> CudaBackend::CreateCopyStream() {
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtEnsureDevice(device_id_), "cudaSetDevice"));
  Strm stream = nullptr;
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtStreamCreate(&stream), "cudaStreamCreate"));
  return std::make_unique<CudaStream>(this, device_id_, stream, LtScratch{});
}

absl::Status CudaBackend::Gemm(const CudaStream& cs, const float* x, int64_t m,
                               int64_t k, const uint16_t* w, int64_t n,
                               const uint16_t* bias, float* out,
                               const char* what) {
  // A copy stream has no scratch: the GEMV serves it.
  if (lt_ != nullptr && cs.scratch().split != nullptr &&
      m >= options_.lt_min_m && m > 0 && n > 0 && k > 0) {
    const int e = lt_->Run(x, m, k, w, n, bias, out, cs.scratch(), cs.get());
    if (e == 0) {
      lt_gemms_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    if (e != kLtNotSupported) {
      return absl::InternalError(
          absl::StrCat(what, " (cuBLASLt): ", LtErrorName(e)));
    }
    // Nothing was enqueued; the GEMV computes the same product.
    lt_fallbacks_.fetch_add(1, std::memory_order_relaxed);
  }
  return FromCuda(LaunchMatMulBf16(x, m, k, w, n, bias, out, cs.get()), what);
}

absl::Status CudaBackend::Embedding(Stream& s, const Tensor& ids,
                                    const Tensor& table, const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckEmbedding(Device::kCuda, ids, table, out));
  return FromCuda(
      LaunchEmbedding(ids.data<int32_t>(), ids.dim(0), Bf16Ptr(table),
                      table.dim(0), table.dim(1), out.data<float>(), st),
      "Embedding");
}

absl::Status CudaBackend::RmsNorm(Stream& s, const Tensor& x, const Tensor& w,
                                  float eps, const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckRmsNorm(Device::kCuda, x, w, eps, out));
  return FromCuda(LaunchRmsNorm(x.data<float>(), x.dim(0), x.dim(1), Bf16Ptr(w),
                                eps, out.data<float>(), st),
                  "RmsNorm");
}

absl::Status CudaBackend::MatMul(Stream& s, const Tensor& x, const Tensor& w,
                                 const Tensor& bias, const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(CudaStream * cs, OwnStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckMatMul(Device::kCuda, x, w, bias, out));
  return Gemm(*cs, x.data<float>(), x.dim(0), x.dim(1), Bf16Ptr(w), w.dim(0),
              bias.valid() ? Bf16Ptr(bias) : nullptr, out.data<float>(),
              "MatMul");
}

absl::Status CudaBackend::MatMulInt4(Stream& s, const Tensor& x,
                                     const Tensor& wq, const Tensor& scales,
                                     int64_t group, const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckMatMulInt4(Device::kCuda, x, wq, scales, group, out));
  return FromCuda(
      LaunchMatMulInt4(x.data<float>(), x.dim(0), x.dim(1),
                       static_cast<const uint8_t*>(wq.raw()), Bf16Ptr(scales),
                       /*f16_scales=*/false, /*zeros=*/nullptr, group,
                       wq.dim(0), out.data<float>(), st),
      "MatMulInt4");
}

absl::Status CudaBackend::RopeRotateHalf(Stream& s, const Tensor& x,
                                         const Tensor& positions, float theta) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckRope(Device::kCuda, x, positions, theta));
  return FromCuda(
      LaunchRopeRotateHalf(x.data<float>(), x.dim(0), x.dim(1), x.dim(2),
                           positions.data<int32_t>(), theta, st),
      "RopeRotateHalf");
}

absl::Status CudaBackend::KvWrite(Stream& s, const Tensor& k, const Tensor& v,
                                  const Tensor& slot_mapping,
                                  const PagedKvCache& cache) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckKvWrite(Device::kCuda, k, v, slot_mapping, cache));
  const int64_t row = k.dim(1) * k.dim(2);
  const int64_t slots = cache.k_pool.dim(0) * cache.k_pool.dim(1);
  return FromCuda(
      LaunchKvWrite(k.data<float>(), v.data<float>(), k.dim(0), row,
                    slot_mapping.data<int32_t>(), slots,
                    cache.k_pool.data<float>(), cache.v_pool.data<float>(), st),
      "KvWrite");
}

absl::Status CudaBackend::Attention(Stream& s, const Tensor& q,
                                    const PagedKvCache& cache,
                                    const AttentionBatch& batch,
                                    const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckAttention(Device::kCuda, q, cache, batch, out));
  if (q.dim(2) > kMaxHeadDim) {
    return TooLarge("Attention", "head_dim", q.dim(2), kMaxHeadDim);
  }
  return FromCuda(
      LaunchPagedAttention(
          q.data<float>(), q.dim(0), q.dim(1), cache.k_pool.dim(2), q.dim(2),
          cache.k_pool.data<float>(), cache.v_pool.data<float>(),
          cache.k_pool.dim(0), cache.k_pool.dim(1),
          batch.query_start.data<int32_t>(), batch.query_start.dim(0) - 1,
          batch.positions.data<int32_t>(), batch.block_tables.data<int32_t>(),
          batch.block_tables.dim(1), out.data<float>(), st),
      "Attention");
}

absl::Status CudaBackend::RouterTopK(Stream& s, const Tensor& logits, int k,
                                     bool normalize, const Tensor& weights,
                                     const Tensor& ids) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckRouterTopK(Device::kCuda, logits, k, weights, ids));
  if (k > kMaxTopK) return TooLarge("RouterTopK", "k", k, kMaxTopK);
  return FromCuda(
      LaunchRouterTopK(logits.data<float>(), logits.dim(0), logits.dim(1), k,
                       normalize, weights.data<float>(), ids.data<int32_t>(),
                       st),
      "RouterTopK");
}

absl::Status CudaBackend::SiluMul(Stream& s, const Tensor& gate,
                                  const Tensor& up, const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckSameShapeF32(Device::kCuda, gate, up, out));
  const int64_t f = gate.dim(gate.rank() - 1);
  const int64_t m = f == 0 ? 0 : gate.numel() / f;
  return FromCuda(LaunchSiluMul(gate.data<float>(), f, up.data<float>(), f, m,
                                f, out.data<float>(), st),
                  "SiluMul");
}

absl::Status CudaBackend::Add(Stream& s, const Tensor& a, const Tensor& b,
                              const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckSameShapeF32(Device::kCuda, a, b, out));
  return FromCuda(LaunchAdd(a.data<float>(), b.data<float>(), a.numel(),
                            out.data<float>(), st),
                  "Add");
}

absl::Status CudaBackend::GatherRows(Stream& s, const Tensor& x,
                                     const Tensor& rows, const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckGatherRows(Device::kCuda, x, rows, out));
  return FromCuda(LaunchGatherRows(x.data<float>(), x.dim(0), x.dim(1),
                                   rows.data<int32_t>(), rows.dim(0),
                                   out.data<float>(), st),
                  "GatherRows");
}

absl::Status CudaBackend::ScaleAddRows(Stream& s, const Tensor& x,
                                       const Tensor& rows,
                                       const Tensor& weights, const Tensor& y) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckScaleAddRows(Device::kCuda, x, rows, weights, y));
  return FromCuda(
      LaunchScaleAddRows(x.data<float>(), x.dim(0), x.dim(1),
                         rows.valid() ? rows.data<int32_t>() : nullptr,
                         weights.data<float>(), y.data<float>(), y.dim(0), st),
      "ScaleAddRows");
}

absl::Status CudaBackend::SigmoidGatedAdd(Stream& s, const Tensor& x,
                                          const Tensor& gate, const Tensor& y) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckSigmoidGatedAdd(Device::kCuda, x, gate, y));
  return FromCuda(
      LaunchSigmoidGatedAdd(x.data<float>(), x.dim(0), x.dim(1),
                            gate.data<float>(), y.data<float>(), st),
      "SigmoidGatedAdd");
}

absl::Status CudaBackend::ExpertFfn(Stream& s, const Tensor& x,
                                    const Tensor& blob, int64_t ffn,
                                    const Tensor& workspace,
                                    const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(CudaStream * cs, OwnStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfn(Device::kCuda, x, blob, ffn, workspace, out));
  const int64_t m = x.dim(0), hidden = x.dim(1);
  const uint16_t* w = Bf16Ptr(blob);
  float* gate_up = workspace.data<float>();  // [m, 2 * ffn]
  float* act = gate_up + m * 2 * ffn;        // [m, ffn]
  // Gate and up are adjacent in the blob: one [2*ffn, hidden] weight, so all
  // m tokens routed here take one GEMM (cuBLASLt for m >= lt_min_m).
  MOESERVE_RETURN_IF_ERROR(Gemm(*cs, x.data<float>(), m, hidden, w, 2 * ffn,
                                nullptr, gate_up, "ExpertFfn gate_up"));
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(LaunchSiluMul(gate_up, 2 * ffn, gate_up + ffn, 2 * ffn, m, ffn,
                             act, cs->get()),
               "ExpertFfn silu"));
  return Gemm(*cs, act, m, ffn, w + 2 * ffn * hidden, hidden, nullptr,
              out.data<float>(), "ExpertFfn down");
}

// int4: one GEMV launch for gate and up (LaunchGemvInt4, the rows of both
// parts), the SiLU, one for down; the grouped op runs the same kernel.
absl::Status CudaBackend::ExpertFfnInt4(Stream& s, const Tensor& x,
                                        const Tensor& blob,
                                        const Int4ExpertLayout& layout,
                                        const Tensor& workspace,
                                        const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfnInt4(Device::kCuda, x, blob, layout, workspace, out));
  const int64_t m = x.dim(0);
  float* gate_up = workspace.data<float>();   // [m, 2 * ffn]
  float* act = gate_up + m * 2 * layout.ffn;  // [m, ffn]
  const QuantGroup one{blob.raw(), 0, m};
  return QuantExpertFfn(LaunchGemvInt4, Int4GateUpSpec(layout),
                        Int4DownSpec(layout), x.data<float>(), &one, 1, 0, m,
                        gate_up, act, out.data<float>(), st, "ExpertFfnInt4");
}

// fp8: as ExpertFfnInt4, on LaunchGemvFp8 (any m: no cuBLASLt FP8 path yet).
absl::Status CudaBackend::ExpertFfnFp8(Stream& s, const Tensor& x,
                                       const Tensor& blob,
                                       const Fp8ExpertLayout& layout,
                                       const Tensor& workspace,
                                       const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfnFp8(Device::kCuda, x, blob, layout, workspace, out));
  const int64_t m = x.dim(0);
  float* gate_up = workspace.data<float>();   // [m, 2 * ffn]
  float* act = gate_up + m * 2 * layout.ffn;  // [m, ffn]
  const QuantGroup one{blob.raw(), 0, m};
  return QuantExpertFfn(LaunchGemvFp8, Fp8GateUpSpec(layout),
                        Fp8DownSpec(layout), x.data<float>(), &one, 1, 0, m,
                        gate_up, act, out.data<float>(), st, "ExpertFfnFp8");
}

// Decode-sized experts (m < lt_min_m) take two grouped GEMV launches for
// the whole call (gate/up, down) around one gather and one SiLU; an expert
// with enough rows for cuBLASLt takes its own two GEMMs, as in ExpertFfn.
// Either way a row's result is what ExpertFfn computes for it.
absl::Status CudaBackend::ExpertFfnGrouped(Stream& s,
                                           const GroupedExperts& call,
                                           const Tensor& workspace,
                                           const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(CudaStream * cs, OwnStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfnGrouped(Device::kCuda, call, workspace, out));
  const int64_t pairs = call.rows.dim(0), hidden = out.dim(1);
  const int64_t ffn = GroupedExpertsFfn(call);
  if (pairs == 0 || call.groups.empty()) return absl::OkStatus();
  const Strm st = cs->get();
  float* gathered = workspace.data<float>();   // [R, hidden]
  float* gate_up = gathered + pairs * hidden;  // [R, 2 * ffn]
  float* act = gate_up + pairs * 2 * ffn;      // [R, ffn]
  // Only the rows of this call's groups (ascending ranges: the span from
  // the first to the end of the last): a miss computed alone gathers its
  // own rows, not every pair of the layer again.
  const int64_t lo = call.groups.front().begin;
  const int64_t hi = call.groups.back().begin + call.groups.back().count;
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(LaunchGatherRows(call.x.data<float>(), call.x.dim(0), hidden,
                                call.rows.data<int32_t>() + lo, hi - lo,
                                gathered + lo * hidden, st),
               "ExpertFfnGrouped gather"));
  if (call.int4 != nullptr || call.fp8 != nullptr) {
    // int4 / fp8 experts: every group (any row count) in the quantized GEMV
    // that ExpertFfnInt4 / ExpertFfnFp8 run, so each row is bit for bit
    // what the per-expert op gives it: two launches for the whole call
    // (128 groups a launch) around the SiLU.
    absl::InlinedVector<QuantGroup, 32> groups;
    for (const ExpertGroup& g : call.groups) {
      if (g.count > 0) groups.push_back({g.blob, g.begin, g.count});
    }
    if (call.int4 != nullptr) {
      return QuantExpertFfn(LaunchGemvInt4, Int4GateUpSpec(*call.int4),
                            Int4DownSpec(*call.int4), gathered, groups.data(),
                            groups.size(), lo, hi, gate_up, act,
                            out.data<float>(), st, "ExpertFfnGrouped int4");
    }
    return QuantExpertFfn(LaunchGemvFp8, Fp8GateUpSpec(*call.fp8),
                          Fp8DownSpec(*call.fp8), gathered, groups.data(),
                          groups.size(), lo, hi, gate_up, act,
                          out.data<float>(), st, "ExpertFfnGrouped fp8");
  }
  const bool lt_usable = lt_ != nullptr && cs->scratch().split != nullptr;
  absl::InlinedVector<GemvGroup, 32> small;
  for (const ExpertGroup& g : call.groups) {
    if (g.count == 0) continue;
    const auto* w = static_cast<const uint16_t*>(g.blob);
    if (lt_usable && g.count >= options_.lt_min_m) {
      MOESERVE_RETURN_IF_ERROR(Gemm(
          *cs, gathered + g.begin * hidden, g.count, hidden, w, 2 * ffn,
          nullptr, gate_up + g.begin * 2 * ffn, "ExpertFfnGrouped gate_up"));
    } else {
      small.push_back({w, g.begin, g.count});
    }
  }
  MOESERVE_RETURN_IF_ERROR(FromCuda(
      LaunchGroupedGemvBf16(gathered, hidden, small.data(), small.size(),
                            /*w_offset=*/0, 2 * ffn, gate_up, st),
      "ExpertFfnGrouped gate_up"));
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(LaunchSiluMul(gate_up + lo * 2 * ffn, 2 * ffn,
                             gate_up + lo * 2 * ffn + ffn, 2 * ffn, hi - lo,
                             ffn, act + lo * ffn, st),
               "ExpertFfnGrouped silu"));
  for (const ExpertGroup& g : call.groups) {
    if (g.count == 0 || !lt_usable || g.count < options_.lt_min_m) continue;
    const auto* w = static_cast<const uint16_t*>(g.blob);
    MOESERVE_RETURN_IF_ERROR(Gemm(*cs, act + g.begin * ffn, g.count, ffn,
                                  w + 2 * ffn * hidden, hidden, nullptr,
                                  out.data<float>() + g.begin * hidden,
                                  "ExpertFfnGrouped down"));
  }
  return FromCuda(LaunchGroupedGemvBf16(act, ffn, small.data(), small.size(),
                                        /*w_offset=*/2 * ffn * hidden, hidden,
                                        out.data<float>(), st),
                  "ExpertFfnGrouped down");
}

absl::Status CudaBackend::CombineExpertRows(Stream& s, const Tensor& x,
                                            const Tensor& weights,
                                            const Tensor& pairs,
                                            const Tensor& y) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(
      CheckCombineExpertRows(Device::kCuda, x, weights, pairs, y));
  return FromCuda(
      LaunchCombineExpertRows(x.data<float>(), x.dim(0), x.dim(1),
                              weights.data<float>(), pairs.data<int32_t>(),
                              pairs.dim(0), pairs.dim(1), y.data<float>(), st),
      "CombineExpertRows");
}

absl::Status CudaBackend::Softmax(Stream& s, const Tensor& x,
                                  const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckSoftmax(Device::kCuda, x, out));
  return FromCuda(
      LaunchSoftmax(x.data<float>(), x.dim(0), x.dim(1), out.data<float>(), st),
      "Softmax");
}

absl::Status CudaBackend::Argmax(Stream& s, const Tensor& x,
                                 const Tensor& out) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckArgmax(Device::kCuda, x, out));
  return FromCuda(LaunchArgmax(x.data<float>(), x.dim(0), x.dim(1),
                               out.data<int32_t>(), st),
                  "Argmax");
}

}  // namespace moeserve::kernels::cuda
