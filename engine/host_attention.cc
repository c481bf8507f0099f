#include "engine/host_attention.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::engine {

using kernels::DType;
using kernels::Tensor;

absl::StatusOr<std::unique_ptr<HostAttention>> HostAttention::Create(
    kernels::Backend* host, kernels::Backend* device) {
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            HostStream(host, device, "host attention"));
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
  return Run(Job{.row0 = 0,
                 .n = n,
                 .heads = heads,
                 .kv_heads = kv_heads,
                 .head_dim = head_dim,
                 .slots = slots,
                 .cache = cache,
                 .batch = batch});
}

absl::Status HostAttention::Run(const Job& job) {
  const int64_t n = job.n, heads = job.heads, kv_heads = job.kv_heads,
                head_dim = job.head_dim;
  const int64_t end = job.row0 + n;
  if (job.row0 < 0 || n < 1 || q_.bytes() < end * heads * head_dim * 4 ||
      k_.bytes() < end * kv_heads * head_dim * 4 ||
      v_.bytes() < end * kv_heads * head_dim * 4 ||
      out_.bytes() < end * heads * head_dim * 4) {
    return absl::InternalError("host attention buffers not reserved");
  }
  if (job.cache.k_pool.device() != kernels::Device::kCpu) {
    return absl::FailedPreconditionError(
        absl::StrCat("host attention needs the KV cache in host memory, not ",
                     kernels::DeviceName(job.cache.k_pool.device())));
  }
  const kernels::Device cpu = kernels::Device::kCpu;
  kernels::Stream& st = *stream_;
  const int64_t q_row = heads * head_dim, kv_row = kv_heads * head_dim;
  MOESERVE_RETURN_IF_ERROR(
      host_->KvWrite(st,
                     Tensor(k() + job.row0 * kv_row, DType::kF32,
                            {n, kv_heads, head_dim}, cpu),
                     Tensor(v() + job.row0 * kv_row, DType::kF32,
                            {n, kv_heads, head_dim}, cpu),
                     job.slots, job.cache));
  MOESERVE_RETURN_IF_ERROR(host_->Attention(
      st,
      Tensor(q() + job.row0 * q_row, DType::kF32, {n, heads, head_dim}, cpu),
      job.cache, job.batch,
      Tensor(static_cast<float*>(out_.data()) + job.row0 * q_row, DType::kF32,
             {n, q_row}, cpu)));
  return st.Synchronize();
}

void HostAttention::Start(const Job& job) {
  worker_.Post([this, job] { return Run(job); });
}

absl::Status HostAttention::Wait() { return worker_.Wait(); }

}  // namespace moeserve::engine
