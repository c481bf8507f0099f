#include "kernels/cuda/int4_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels::cuda {
namespace {

constexpr char kOp[] = "MatMulInt4";

}  // namespace

absl::Status CheckMatMulInt4(Device d, const Tensor& x, const Tensor& wq,
                             const Tensor& scales, int64_t group,
                             const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
  bool known_group = false;
  for (int64_t g : kInt4Groups) known_group |= g == group;
  if (!known_group) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": group must be 64 or 128, got ", group));
  }
  const int64_t k = x.dim(1);
  if (k % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": k (x.dim(1) = ", k, ") is not a multiple of group ", group));
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, wq, "wq", d, DType::kI4, {kAnyDim, k}));
  const int64_t n = wq.dim(0);
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, scales, "scales", d, DType::kBF16, {n, k / group}));
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, out, "out", d, DType::kF32, {x.dim(0), n}));
  if (Overlaps(out, x) || Overlaps(out, wq) || Overlaps(out, scales)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": out overlaps an input"));
  }
  return absl::OkStatus();
}

}  // namespace moeserve::kernels::cuda
