// The can_implement check of CudaBackend::MatMulInt4 (kernels/op_checks.h
// style: device, dtype and shape of each argument; InvalidArgument naming
// the argument). It lives here, not in op_checks, because the int4 op is not
// part of the Backend interface yet.
//
// Thread safety: pure function.
#ifndef MOESERVE_KERNELS_CUDA_INT4_CHECKS_H_
#define MOESERVE_KERNELS_CUDA_INT4_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cuda {

// Groups of columns that share one scale.
inline constexpr int64_t kInt4Groups[] = {64, 128};

// x F32[m, k], wq I4[n, k], scales BF16[n, k / group], group 64 or 128 with
// k % group == 0, out F32[m, n] not overlapping an input.
absl::Status CheckMatMulInt4(Device d, const Tensor& x, const Tensor& wq,
                             const Tensor& scales, int64_t group,
                             const Tensor& out);

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_INT4_CHECKS_H_
