#include "kernels/op_checks.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace moeserve::kernels {
namespace {

absl::Status Invalid(const char* op, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what));
}

}  // namespace

absl::Status CheckTensor(const Tensor& t, const char* name, Device device,
                         DType dtype, std::initializer_list<int64_t> dims) {
  if (!t.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is missing"));
  }
  auto expected = [&] {
    std::string s = absl::StrCat(DTypeName(dtype), "[");
    bool first = true;
    for (int64_t d : dims) {
      absl::StrAppend(&s, first ? "" : ",",
                      d == kAnyDim ? "*" : absl::StrCat(d));
      first = false;
    }
    return absl::StrCat(s, "]@", DeviceName(device));
  };
  bool ok = t.device() == device && t.dtype() == dtype &&
            t.rank() == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    if (!ok) break;
    ok = d == kAnyDim || t.dim(i) == d;
    ++i;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", t.DebugString(), ", expected ", expected()));
  }
  if (t.numel() > 0 && t.raw() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, " has null data"));
  }
  return absl::OkStatus();
}

absl::Status CheckOperand(const char* op, const Tensor& t, const char* name,
                          Device device, DType dtype,
                          std::initializer_list<int64_t> dims) {
  absl::Status st = CheckTensor(t, name, device, dtype, dims);
  if (st.ok()) return st;
  return Invalid(op, std::string(st.message()));
}

bool Overlaps(const Tensor& a, const Tensor& b) {
  if (!a.valid() || !b.valid() || a.nbytes() == 0 || b.nbytes() == 0) {
    return false;
  }
  const auto a0 = reinterpret_cast<uintptr_t>(a.raw());
  const auto b0 = reinterpret_cast<uintptr_t>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

absl::Status CheckEmbedding(Device d, const Tensor& ids, const Tensor& table,
                            const Tensor& out) {
  constexpr char kOp[] = "Embedding";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, ids, "ids", d, DType::kI32, {kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, table, "table", d, DType::kBF16, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, out, "out", d, DType::kF32,
                                        {ids.dim(0), table.dim(1)}));
  return absl::OkStatus();
}

absl::Status CheckRmsNorm(Device d, const Tensor& x, const Tensor& w, float eps,
                          const Tensor& out) {
  constexpr char kOp[] = "RmsNorm";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, w, "w", d, DType::kBF16, {x.dim(1)}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {x.dim(0), x.dim(1)}));
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    return Invalid(kOp, absl::StrCat("eps must be finite and >= 0, got ", eps));
  }
  if (x.dim(1) == 0) return Invalid(kOp, "d must be > 0");
  if (Overlaps(x, out) && x.raw() != out.raw()) {
    return Invalid(kOp, "out partially overlaps x");
  }
  return absl::OkStatus();
}

absl::Status CheckMatMul(Device d, const Tensor& x, const Tensor& w,
                         const Tensor& bias, const Tensor& out) {
  constexpr char kOp[] = "MatMul";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, w, "w", d, DType::kBF16, {kAnyDim, x.dim(1)}));
  if (bias.valid()) {
    MOESERVE_RETURN_IF_ERROR(
        CheckOperand(kOp, bias, "bias", d, DType::kBF16, {w.dim(0)}));
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {x.dim(0), w.dim(0)}));
  if (Overlaps(out, x) || Overlaps(out, w) || Overlaps(out, bias)) {
    return Invalid(kOp, "out overlaps an input");
  }
  return absl::OkStatus();
}

absl::Status CheckRope(Device d, const Tensor& x, const Tensor& positions,
                       float theta) {
  constexpr char kOp[] = "RopeRotateHalf";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, positions, "positions", d, DType::kI32, {x.dim(0)}));
  if (x.dim(2) % 2 != 0) return Invalid(kOp, "head_dim must be even");
  if (!(theta > 0.0f) || !std::isfinite(theta)) {
    return Invalid(kOp, "theta must be finite and > 0");
  }
  return absl::OkStatus();
}

absl::Status CheckKvWrite(Device d, const Tensor& k, const Tensor& v,
                          const Tensor& slot_mapping,
                          const PagedKvCache& cache) {
  constexpr char kOp[] = "KvWrite";
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, cache.k_pool, "k_pool", d,
                                        DType::kF32,
                                        {kAnyDim, kAnyDim, kAnyDim, kAnyDim}));
  const Tensor& p = cache.k_pool;
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, cache.v_pool, "v_pool", d, DType::kF32,
                   {p.dim(0), p.dim(1), p.dim(2), p.dim(3)}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, k, "k", d, DType::kF32, {kAnyDim, p.dim(2), p.dim(3)}));
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, v, "v", d, DType::kF32,
                                        {k.dim(0), p.dim(2), p.dim(3)}));
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, slot_mapping, "slot_mapping", d,
                                        DType::kI32, {k.dim(0)}));
  if (Overlaps(cache.k_pool, cache.v_pool)) {
    return Invalid(kOp, "k_pool and v_pool overlap");
  }
  return absl::OkStatus();
}

absl::Status CheckAttention(Device d, const Tensor& q,
                            const PagedKvCache& cache,
                            const AttentionBatch& batch, const Tensor& out) {
  constexpr char kOp[] = "Attention";
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, cache.k_pool, "k_pool", d,
                                        DType::kF32,
                                        {kAnyDim, kAnyDim, kAnyDim, kAnyDim}));
  const Tensor& p = cache.k_pool;
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, cache.v_pool, "v_pool", d, DType::kF32,
                   {p.dim(0), p.dim(1), p.dim(2), p.dim(3)}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, q, "q", d, DType::kF32, {kAnyDim, kAnyDim, p.dim(3)}));
  const int64_t heads = q.dim(1), kv_heads = p.dim(2);
  if (kv_heads == 0 || heads == 0 || heads % kv_heads != 0) {
    return Invalid(kOp, absl::StrCat("heads ", heads,
                                     " is not a positive multiple of kv_heads ",
                                     kv_heads));
  }
  if (p.dim(1) == 0) return Invalid(kOp, "block_size must be > 0");
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, out, "out", d, DType::kF32,
                                        {q.dim(0), heads * p.dim(3)}));
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, batch.query_start, "query_start",
                                        d, DType::kI32, {kAnyDim}));
  if (batch.query_start.dim(0) < 1) return Invalid(kOp, "query_start is empty");
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, batch.positions, "positions", d,
                                        DType::kI32, {q.dim(0)}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, batch.block_tables, "block_tables", d, DType::kI32,
                   {batch.query_start.dim(0) - 1, kAnyDim}));
  if (Overlaps(out, q) || Overlaps(out, cache.k_pool) ||
      Overlaps(out, cache.v_pool)) {
    return Invalid(kOp, "out overlaps an input");
  }
  return absl::OkStatus();
}

absl::Status CheckRouterTopK(Device d, const Tensor& logits, int k,
                             const Tensor& weights, const Tensor& ids) {
  constexpr char kOp[] = "RouterTopK";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, logits, "logits", d, DType::kF32, {kAnyDim, kAnyDim}));
  if (k < 1 || k > logits.dim(1)) {
    return Invalid(kOp,
                   absl::StrCat("k=", k, " not in [1, ", logits.dim(1), "]"));
  }
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, weights, "weights", d, DType::kF32,
                                        {logits.dim(0), k}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, ids, "ids", d, DType::kI32, {logits.dim(0), k}));
  if (Overlaps(weights, logits) || Overlaps(ids, logits) ||
      Overlaps(weights, ids)) {
    return Invalid(kOp, "outputs overlap");
  }
  return absl::OkStatus();
}

absl::Status CheckSameShapeF32(Device d, const Tensor& a, const Tensor& b,
                               const Tensor& out) {
  constexpr char kOp[] = "elementwise";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, a, "a", d, DType::kF32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, b, "b", d, DType::kF32, {a.dim(0), a.dim(1)}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {a.dim(0), a.dim(1)}));
  // Exact aliasing is fine (elementwise); partial overlap is not.
  for (const Tensor* in : {&a, &b}) {
    if (Overlaps(*in, out) && in->raw() != out.raw()) {
      return Invalid(kOp, "out partially overlaps an input");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGatherRows(Device d, const Tensor& x, const Tensor& rows,
                             const Tensor& out) {
  constexpr char kOp[] = "GatherRows";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, rows, "rows", d, DType::kI32, {kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {rows.dim(0), x.dim(1)}));
  if (Overlaps(out, x)) return Invalid(kOp, "out overlaps x");
  return absl::OkStatus();
}

absl::Status CheckScaleAddRows(Device d, const Tensor& x, const Tensor& rows,
                               const Tensor& weights, const Tensor& y) {
  constexpr char kOp[] = "ScaleAddRows";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  if (rows.valid()) {
    MOESERVE_RETURN_IF_ERROR(
        CheckOperand(kOp, rows, "rows", d, DType::kI32, {x.dim(0)}));
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, weights, "weights", d, DType::kF32, {x.dim(0)}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, y, "y", d, DType::kF32, {kAnyDim, x.dim(1)}));
  if (!rows.valid() && y.dim(0) != x.dim(0)) {
    return Invalid(kOp, "without rows, y must have as many rows as x");
  }
  if (Overlaps(y, x) || Overlaps(y, weights) || Overlaps(y, rows)) {
    return Invalid(kOp, "y overlaps an input");
  }
  return absl::OkStatus();
}

absl::Status CheckSigmoidGatedAdd(Device d, const Tensor& x, const Tensor& gate,
                                  const Tensor& y) {
  constexpr char kOp[] = "SigmoidGatedAdd";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, y, "y", d, DType::kF32, {x.dim(0), x.dim(1)}));
  if (gate.valid() && gate.rank() == 2) {
    MOESERVE_RETURN_IF_ERROR(
        CheckOperand(kOp, gate, "gate", d, DType::kF32, {x.dim(0), 1}));
  } else {
    MOESERVE_RETURN_IF_ERROR(
        CheckOperand(kOp, gate, "gate", d, DType::kF32, {x.dim(0)}));
  }
  if (Overlaps(y, x) || Overlaps(y, gate)) {
    return Invalid(kOp, "y overlaps an input");
  }
  return absl::OkStatus();
}

namespace {

// What both expert FFN checks end with: the F32 workspace for m tokens of
// an ffn-wide expert, and no overlap between out, workspace and inputs.
absl::Status CheckExpertWorkspace(const char* op, Device d, const Tensor& x,
                                  const Tensor& blob, const Tensor& workspace,
                                  const Tensor& out, int64_t m, int64_t ffn) {
  if (!workspace.valid() || workspace.dtype() != DType::kF32 ||
      workspace.device() != d ||
      workspace.numel() < ExpertFfnWorkspaceElems(m, ffn) ||
      (workspace.numel() > 0 && workspace.raw() == nullptr)) {
    return Invalid(op, absl::StrCat("workspace ", workspace.DebugString(),
                                    " needs F32 with at least ",
                                    ExpertFfnWorkspaceElems(m, ffn),
                                    " elements on ", DeviceName(d)));
  }
  if (Overlaps(out, x) || Overlaps(out, blob) || Overlaps(out, workspace) ||
      Overlaps(workspace, x) || Overlaps(workspace, blob)) {
    return Invalid(op, "out, workspace and inputs must not overlap");
  }
  return absl::OkStatus();
}

// The layout is what Int4ExpertLayoutWithOptions gives for its shape,
// groups, scale type and zero points (so the offsets, e.g. of the zeros,
// cannot disagree with the kernels' reading of them).
absl::Status CheckInt4Layout(const char* op, const Int4ExpertLayout& layout) {
  absl::StatusOr<Int4ExpertLayout> canonical =
      Int4ExpertLayoutWithOptions(layout.hidden, layout.ffn, layout.group_in,
                                  layout.group_out, layout.options());
  if (!canonical.ok()) {
    return Invalid(op,
                   absl::StrCat("int4 layout: ", canonical.status().message()));
  }
  if (!(*canonical == layout)) {
    return Invalid(op,
                   "int4 layout offsets are not those of its shape, groups, "
                   "scale type and zero points (use MakeInt4ExpertLayout or "
                   "Int4ExpertLayoutWithOptions)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckExpertFfn(Device d, const Tensor& x, const Tensor& blob,
                            int64_t ffn, const Tensor& workspace,
                            const Tensor& out) {
  constexpr char kOp[] = "ExpertFfn";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  const int64_t m = x.dim(0), hidden = x.dim(1);
  if (ffn <= 0 || hidden <= 0) {
    return Invalid(kOp, "ffn and hidden must be > 0");
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, blob, "blob", d, DType::kBF16, {3 * ffn * hidden}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {m, hidden}));
  return CheckExpertWorkspace(kOp, d, x, blob, workspace, out, m, ffn);
}

absl::Status CheckExpertFfnInt4(Device d, const Tensor& x, const Tensor& blob,
                                const Int4ExpertLayout& layout,
                                const Tensor& workspace, const Tensor& out) {
  constexpr char kOp[] = "ExpertFfnInt4";
  MOESERVE_RETURN_IF_ERROR(CheckInt4Layout(kOp, layout));
  const int64_t hidden = layout.hidden, ffn = layout.ffn;
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, hidden}));
  const int64_t m = x.dim(0);
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, blob, "blob", d, DType::kU8, {layout.bytes}));
  if (reinterpret_cast<uintptr_t>(blob.raw()) % 16 != 0) {
    return Invalid(kOp, "blob must be 16-byte aligned");
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {m, hidden}));
  return CheckExpertWorkspace(kOp, d, x, blob, workspace, out, m, ffn);
}

// The layout is what MakeFp8ExpertLayout gives for its shape and tile.
absl::Status CheckFp8Layout(const char* op, const Fp8ExpertLayout& layout) {
  absl::StatusOr<Fp8ExpertLayout> canonical = MakeFp8ExpertLayout(
      layout.hidden, layout.ffn, layout.block_rows, layout.block_cols);
  if (!canonical.ok()) {
    return Invalid(op,
                   absl::StrCat("fp8 layout: ", canonical.status().message()));
  }
  if (!(*canonical == layout)) {
    return Invalid(op,
                   "fp8 layout offsets are not those of its shape and tile "
                   "(use MakeFp8ExpertLayout)");
  }
  return absl::OkStatus();
}

absl::Status CheckExpertFfnFp8(Device d, const Tensor& x, const Tensor& blob,
                               const Fp8ExpertLayout& layout,
                               const Tensor& workspace, const Tensor& out) {
  constexpr char kOp[] = "ExpertFfnFp8";
  MOESERVE_RETURN_IF_ERROR(CheckFp8Layout(kOp, layout));
  const int64_t hidden = layout.hidden, ffn = layout.ffn;
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, hidden}));
  const int64_t m = x.dim(0);
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, blob, "blob", d, DType::kU8, {layout.bytes}));
  if (reinterpret_cast<uintptr_t>(blob.raw()) % 16 != 0) {
    return Invalid(kOp, "blob must be 16-byte aligned");
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {m, hidden}));
  return CheckExpertWorkspace(kOp, d, x, blob, workspace, out, m, ffn);
}

absl::Status CheckExpertFfnGrouped(Device d, const GroupedExperts& call,
                                   const Tensor& workspace, const Tensor& out) {
  constexpr char kOp[] = "ExpertFfnGrouped";
  int64_t hidden = 0, ffn = call.ffn;
  if (call.int4 != nullptr && call.fp8 != nullptr) {
    return Invalid(kOp, "int4 and fp8 layouts both set");
  }
  if (call.fp8 != nullptr) {
    MOESERVE_RETURN_IF_ERROR(CheckFp8Layout(kOp, *call.fp8));
    hidden = call.fp8->hidden;
    ffn = call.fp8->ffn;
    MOESERVE_RETURN_IF_ERROR(
        CheckOperand(kOp, call.x, "x", d, DType::kF32, {kAnyDim, hidden}));
  } else if (call.int4 != nullptr) {
    const Int4ExpertLayout& layout = *call.int4;
    MOESERVE_RETURN_IF_ERROR(CheckInt4Layout(kOp, layout));
    hidden = layout.hidden;
    ffn = layout.ffn;
    MOESERVE_RETURN_IF_ERROR(
        CheckOperand(kOp, call.x, "x", d, DType::kF32, {kAnyDim, hidden}));
  } else {
    MOESERVE_RETURN_IF_ERROR(
        CheckOperand(kOp, call.x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
    hidden = call.x.dim(1);
  }
  if (ffn <= 0 || hidden <= 0) {
    return Invalid(kOp, "ffn and hidden must be > 0");
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, call.rows, "rows", d, DType::kI32, {kAnyDim}));
  const int64_t pairs = call.rows.dim(0);
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {pairs, hidden}));
  int64_t previous_end = 0;
  for (size_t g = 0; g < call.groups.size(); ++g) {
    const ExpertGroup& group = call.groups[g];
    if (group.blob == nullptr) {
      return Invalid(kOp, absl::StrCat("group ", g, " has no blob"));
    }
    if ((call.int4 != nullptr || call.fp8 != nullptr) &&
        reinterpret_cast<uintptr_t>(group.blob) % 16 != 0) {
      return Invalid(kOp, absl::StrCat("group ", g, ": an ",
                                       call.fp8 != nullptr ? "fp8" : "int4",
                                       " blob must be 16-byte aligned"));
    }
    if (group.count < 0 || group.begin < previous_end ||
        group.begin + group.count > pairs) {
      return Invalid(kOp, absl::StrCat("group ", g, " rows [", group.begin,
                                       ", ", group.begin + group.count,
                                       ") are not ascending, disjoint and "
                                       "within [0, ",
                                       pairs, ")"));
    }
    previous_end = group.begin + group.count;
  }
  const int64_t need = GroupedExpertWorkspaceElems(pairs, ffn, hidden);
  if (!workspace.valid() || workspace.dtype() != DType::kF32 ||
      workspace.device() != d || workspace.numel() < need ||
      (workspace.numel() > 0 && workspace.raw() == nullptr)) {
    return Invalid(kOp, absl::StrCat("workspace ", workspace.DebugString(),
                                     " needs F32 with at least ", need,
                                     " elements on ", DeviceName(d)));
  }
  if (Overlaps(out, call.x) || Overlaps(out, call.rows) ||
      Overlaps(out, workspace) || Overlaps(workspace, call.x) ||
      Overlaps(workspace, call.rows)) {
    return Invalid(kOp, "out, workspace and inputs must not overlap");
  }
  return absl::OkStatus();
}

absl::Status CheckCombineExpertRows(Device d, const Tensor& x,
                                    const Tensor& weights, const Tensor& pairs,
                                    const Tensor& y) {
  constexpr char kOp[] = "CombineExpertRows";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, weights, "weights", d, DType::kF32, {x.dim(0)}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, pairs, "pairs", d, DType::kI32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, y, "y", d, DType::kF32, {pairs.dim(0), x.dim(1)}));
  if (Overlaps(y, x) || Overlaps(y, weights) || Overlaps(y, pairs)) {
    return Invalid(kOp, "y overlaps an input");
  }
  return absl::OkStatus();
}

absl::Status CheckSoftmax(Device d, const Tensor& x, const Tensor& out) {
  constexpr char kOp[] = "Softmax";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {x.dim(0), x.dim(1)}));
  if (Overlaps(x, out) && x.raw() != out.raw()) {
    return Invalid(kOp, "out partially overlaps x");
  }
  return absl::OkStatus();
}

absl::Status CheckArgmax(Device d, const Tensor& x, const Tensor& out) {
  constexpr char kOp[] = "Argmax";
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  if (x.dim(1) < 1) return Invalid(kOp, "rows must have >= 1 element");
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kI32, {x.dim(0)}));
  return absl::OkStatus();
}

}  // namespace moeserve::kernels
