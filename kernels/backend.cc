#include "kernels/backend.h"

#include "base/status_macros.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels {

// Per group: gather its tokens, run the expert, write its rows of `out`.
// Workspace: gathered tokens [R, hidden] first, then the expert's scratch.
absl::Status Backend::ExpertFfnGrouped(Stream& s, const GroupedExperts& call,
                                       const Tensor& workspace,
                                       const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(
      CheckExpertFfnGrouped(device(), call, workspace, out));
  const int64_t hidden = out.dim(1);
  const int64_t ffn = GroupedExpertsFfn(call);
  const int64_t pairs = call.rows.dim(0);
  float* gathered = workspace.data<float>();
  float* scratch = gathered + pairs * hidden;
  for (const ExpertGroup& g : call.groups) {
    if (g.count == 0) continue;
    const int64_t m = g.count;
    Tensor rows(call.rows.data<int32_t>() + g.begin, DType::kI32, {m},
                device());
    Tensor in(gathered + g.begin * hidden, DType::kF32, {m, hidden}, device());
    Tensor ws(scratch, DType::kF32, {ExpertFfnWorkspaceElems(m, ffn)},
              device());
    Tensor rows_out(out.data<float>() + g.begin * hidden, DType::kF32,
                    {m, hidden}, device());
    MOESERVE_RETURN_IF_ERROR(GatherRows(s, call.x, rows, in));
    void* blob = const_cast<void*>(g.blob);
    if (call.int4 != nullptr) {
      Tensor b(blob, DType::kU8, {call.int4->bytes}, device());
      MOESERVE_RETURN_IF_ERROR(
          ExpertFfnInt4(s, in, b, *call.int4, ws, rows_out));
    } else if (call.fp8 != nullptr) {
      Tensor b(blob, DType::kU8, {call.fp8->bytes}, device());
      MOESERVE_RETURN_IF_ERROR(ExpertFfnFp8(s, in, b, *call.fp8, ws, rows_out));
    } else {
      Tensor b(blob, DType::kBF16, {3 * ffn * hidden}, device());
      MOESERVE_RETURN_IF_ERROR(ExpertFfn(s, in, b, ffn, ws, rows_out));
    }
  }
  return absl::OkStatus();
}

int64_t GraphBucket(int64_t v) {
  int64_t b = 1;
  while (b < v) b *= 2;
  return b;
}

absl::StatusOr<GraphRun> Backend::RunGraph(
    Stream& s, const GraphKey& key, absl::FunctionRef<absl::Status()> body) {
  (void)s;
  (void)key;
  MOESERVE_RETURN_IF_ERROR(body());
  return GraphRun::kEager;
}

}  // namespace moeserve::kernels
