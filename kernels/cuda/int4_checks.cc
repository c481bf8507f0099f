#include "kernels/cuda/int4_checks.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels::cuda {
namespace {

constexpr char kOp[] = "MatMulInt4";

absl::Status Prefixed(const absl::Status& st) {
  if (st.ok()) return st;
  return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", st.message()));
}

}  // namespace

absl::Status CheckMatMulInt4(Device d, const Tensor& x, const Tensor& wq,
                             const Tensor& scales, int64_t group,
                             const Tensor& out) {
  if (absl::Status st =
          Prefixed(CheckTensor(x, "x", d, DType::kF32, {kAnyDim, kAnyDim}));
      !st.ok()) {
    return st;
  }
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
  if (absl::Status st =
          Prefixed(CheckTensor(wq, "wq", d, DType::kI4, {kAnyDim, k}));
      !st.ok()) {
    return st;
  }
  const int64_t n = wq.dim(0);
  if (absl::Status st = Prefixed(
          CheckTensor(scales, "scales", d, DType::kBF16, {n, k / group}));
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          Prefixed(CheckTensor(out, "out", d, DType::kF32, {x.dim(0), n}));
      !st.ok()) {
    return st;
  }
  if (Overlaps(out, x) || Overlaps(out, wq) || Overlaps(out, scales)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": out overlaps an input"));
  }
  return absl::OkStatus();
}

}  // namespace moeserve::kernels::cuda
