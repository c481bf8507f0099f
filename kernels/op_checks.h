// can_implement checks shared by every backend: device, dtype and shape rules
// of each Backend op (see backend.h for the contracts). A backend calls the
// check first and runs the op only on OkStatus, so a bad call is refused with
// InvalidArgument instead of reading out of bounds. Value checks on index
// tensors (ids, slots, block tables) need host access and live in the backend.
//
// Thread safety: pure functions.
#ifndef MOESERVE_KERNELS_OP_CHECKS_H_
#define MOESERVE_KERNELS_OP_CHECKS_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"

namespace moeserve::kernels {

// Wildcard for CheckTensor dims.
inline constexpr int64_t kAnyDim = -1;

// OK iff t is valid, on `device`, of `dtype`, of rank dims.size() and each dim
// equal to the given one (kAnyDim matches anything), with non-null data when
// it has elements.
absl::Status CheckTensor(const Tensor& t, const char* name, Device device,
                         DType dtype, std::initializer_list<int64_t> dims);

// CheckTensor for an operand of `op`: the error names the op first
// ("MatMul: x is ...").
absl::Status CheckOperand(const char* op, const Tensor& t, const char* name,
                          Device device, DType dtype,
                          std::initializer_list<int64_t> dims);

// True if the byte ranges of a and b intersect.
bool Overlaps(const Tensor& a, const Tensor& b);

absl::Status CheckEmbedding(Device d, const Tensor& ids, const Tensor& table,
                            const Tensor& out);
absl::Status CheckRmsNorm(Device d, const Tensor& x, const Tensor& w, float eps,
                          const Tensor& out);
absl::Status CheckMatMul(Device d, const Tensor& x, const Tensor& w,
                         const Tensor& bias, const Tensor& out);
absl::Status CheckRope(Device d, const Tensor& x, const Tensor& positions,
                       float theta);
absl::Status CheckKvWrite(Device d, const Tensor& k, const Tensor& v,
                          const Tensor& slot_mapping,
                          const PagedKvCache& cache);
absl::Status CheckAttention(Device d, const Tensor& q,
                            const PagedKvCache& cache,
                            const AttentionBatch& batch, const Tensor& out);
absl::Status CheckRouterTopK(Device d, const Tensor& logits, int k,
                             const Tensor& weights, const Tensor& ids);
// SiluMul and Add: three F32 tensors of one shape.
absl::Status CheckSameShapeF32(Device d, const Tensor& a, const Tensor& b,
                               const Tensor& out);
absl::Status CheckGatherRows(Device d, const Tensor& x, const Tensor& rows,
                             const Tensor& out);
absl::Status CheckScaleAddRows(Device d, const Tensor& x, const Tensor& rows,
                               const Tensor& weights, const Tensor& y);
absl::Status CheckSigmoidGatedAdd(Device d, const Tensor& x, const Tensor& gate,
                                  const Tensor& y);
absl::Status CheckExpertFfn(Device d, const Tensor& x, const Tensor& blob,
                            int64_t ffn, const Tensor& workspace,
                            const Tensor& out);
// ExpertFfnInt4: also checks that `layout` is consistent (the offsets of
// Int4ExpertLayoutWithOptions for its hidden, ffn, groups, scale type and
// zero points; a scale type outside the enum is refused) and that blob is
// 16-byte aligned.
absl::Status CheckExpertFfnInt4(Device d, const Tensor& x, const Tensor& blob,
                                const Int4ExpertLayout& layout,
                                const Tensor& workspace, const Tensor& out);
// ExpertFfnFp8: also checks that `layout` is what MakeFp8ExpertLayout gives
// for its hidden, ffn and tile, and that blob is 16-byte aligned.
absl::Status CheckExpertFfnFp8(Device d, const Tensor& x, const Tensor& blob,
                               const Fp8ExpertLayout& layout,
                               const Tensor& workspace, const Tensor& out);
// ExpertFfnGrouped: x, rows, out and workspace as documented; every group
// with a non-null blob (16-byte aligned for int4 and fp8), count >= 0 and a
// range inside [0, R) starting at or after the previous group's end; int4
// layout as CheckExpertFfnInt4, fp8 as CheckExpertFfnFp8, not both. Blob sizes
// are the caller's (they are pointers).
absl::Status CheckExpertFfnGrouped(Device d, const GroupedExperts& call,
                                   const Tensor& workspace, const Tensor& out);
absl::Status CheckCombineExpertRows(Device d, const Tensor& x,
                                    const Tensor& weights, const Tensor& pairs,
                                    const Tensor& y);
absl::Status CheckSoftmax(Device d, const Tensor& x, const Tensor& out);
absl::Status CheckArgmax(Device d, const Tensor& x, const Tensor& out);

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_OP_CHECKS_H_
