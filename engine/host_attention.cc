#include "engine/host_attention.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::engine {

using kernels::DType;
using kernels::Tensor;

absl::StatusOr<std::unique_ptr<HostAttention>> HostAttention::Create(
    kernels::Backend* host, kernels::Backend* device) {
  if (host == nullptr || device == nullptr) {
    return absl::InvalidArgumentError("host attention needs two backends");
  }
  if (host->device() != kernels::Device::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("the host attention backend must compute on the CPU, not ",
                     kernels::DeviceName(host->device())));
  }
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            host->CreateStream());
  return std::unique_ptr<HostAttention>(
      new HostAttention(host, device, std::move(stream)));
}

HostAttention::HostAttention(kernels::Backend* host, kernels::Backend* device,
                             std::unique_ptr<kernels::Stream> stream)
    : host_(host), device_(device), stream_(std::move(stream)) {}

absl::Status HostAttention::Reserve(int64_t n, int64_t heads, int64_t kv_heads,
                                    int64_t head_dim) {
  const int64_t q_bytes = n * heads * head_dim * 4;
  const int64_t kv_bytes = n * kv_heads * head_dim * 4;
  MOESERVE_RETURN_IF_ERROR(q_.Reserve(*device_, q_bytes));
  MOESERVE_RETURN_IF_ERROR(k_.Reserve(*device_, kv_bytes));
  MOESERVE_RETURN_IF_ERROR(v_.Reserve(*device_, kv_bytes));
  return out_.Reserve(*device_, q_bytes);
}

absl::Status HostAttention::Run(int64_t n, int64_t heads, int64_t kv_heads,
                                int64_t head_dim, const Tensor& slots,
                                const kernels::PagedKvCache& cache,
                                const kernels::AttentionBatch& batch) {
  const int64_t q_bytes = n * heads * head_dim * 4;
  const int64_t kv_bytes = n * kv_heads * head_dim * 4;
  if (q_.bytes() < q_bytes || k_.bytes() < kv_bytes || v_.bytes() < kv_bytes ||
      out_.bytes() < q_bytes) {
    return absl::InternalError("host attention buffers not reserved");
  }
  if (cache.k_pool.device() != kernels::Device::kCpu) {
    return absl::FailedPreconditionError(
        absl::StrCat("host attention needs the KV cache in host memory, not ",
                     kernels::DeviceName(cache.k_pool.device())));
  }
  const kernels::Device cpu = kernels::Device::kCpu;
  kernels::Stream& st = *stream_;
  MOESERVE_RETURN_IF_ERROR(host_->KvWrite(
      st, Tensor(k(), DType::kF32, {n, kv_heads, head_dim}, cpu),
      Tensor(v(), DType::kF32, {n, kv_heads, head_dim}, cpu), slots, cache));
  MOESERVE_RETURN_IF_ERROR(host_->Attention(
      st, Tensor(q(), DType::kF32, {n, heads, head_dim}, cpu), cache, batch,
      Tensor(out_.data(), DType::kF32, {n, heads * head_dim}, cpu)));
  return st.Synchronize();
}

}  // namespace moeserve::engine
