#include "engine/host_experts.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::engine {

using kernels::DType;
using kernels::Tensor;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostExperts>> HostExperts::Create(
    kernels::Backend* host, kernels::Backend* device) {
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            HostStream(host, device, "host experts"));
  return std::unique_ptr<HostExperts>(
      new HostExperts(host, device, std::move(stream)));
}

HostExperts::HostExperts(kernels::Backend* host, kernels::Backend* device,
                         std::unique_ptr<kernels::Stream> stream)
    : host_(host), device_(device), stream_(std::move(stream)) {}

absl::Status HostExperts::Reserve(int64_t n, int64_t routed, int64_t hidden,
                                  int64_t ffn) {
  MOESERVE_RETURN_IF_ERROR(hidden_.Reserve(*device_, n * hidden * 4));
  MOESERVE_RETURN_IF_ERROR(out_.Reserve(*device_, routed * hidden * 4));
  return workspace_.Reserve(
      *host_, kernels::GroupedExpertWorkspaceElems(routed, ffn, hidden) * 4);
}

void HostExperts::Start(const kernels::GroupedExperts& call) {
  worker_.Post([this, call] {
    seconds_.clear();
    return Run(call, &seconds_);
  });
}

absl::Status HostExperts::Wait(std::vector<double>* seconds) {
  absl::Status status = worker_.Wait();
  if (seconds != nullptr) *seconds = seconds_;
  return status;
}

absl::Status HostExperts::Run(const kernels::GroupedExperts& call,
                              std::vector<double>* seconds) {
  absl::Status first = absl::OkStatus();
  for (const kernels::ExpertGroup& g : call.groups) {
    const Clock::time_point start = Clock::now();
    absl::Status s = RunGroup(call, g);
    seconds->push_back(SecondsSince(start));
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status HostExperts::RunGroup(const kernels::GroupedExperts& call,
                                   const kernels::ExpertGroup& group) {
  const int64_t n = call.x.dim(0), d = call.x.dim(1);
  const int64_t routed = call.rows.dim(0);
  const int64_t ws = kernels::GroupedExpertWorkspaceElems(
      routed, kernels::GroupedExpertsFfn(call), d);
  if (call.x.raw() != hidden_.data() || hidden_.bytes() < n * d * 4 ||
      out_.bytes() < routed * d * 4 || workspace_.bytes() < ws * 4) {
    return absl::InternalError("host expert buffers not reserved");
  }
  const kernels::Device cpu = kernels::Device::kCpu;
  kernels::GroupedExperts one = call;
  one.groups = std::span<const kernels::ExpertGroup>(&group, 1);
  MOESERVE_RETURN_IF_ERROR(host_->ExpertFfnGrouped(
      *stream_, one, Tensor(workspace_.data(), DType::kF32, {ws}, cpu),
      Tensor(out_.data(), DType::kF32, {routed, d}, cpu)));
  return stream_->Synchronize();
}

absl::StatusOr<double> HostExperts::TimeExpert(
    const std::byte* blob, int64_t rows, int64_t hidden_size, int64_t ffn,
    const kernels::Int4ExpertLayout* int4, const kernels::Fp8ExpertLayout* fp8,
    int repeats) {
  const kernels::Device cpu = kernels::Device::kCpu;
  std::vector<int32_t> perm(rows);
  for (int64_t r = 0; r < rows; ++r) perm[r] = static_cast<int32_t>(r);
  const kernels::ExpertGroup group{blob, 0, rows};
  kernels::GroupedExperts call;
  call.rows = Tensor(perm.data(), DType::kI32, {rows}, cpu);
  call.groups = std::span<const kernels::ExpertGroup>(&group, 1);
  call.ffn = ffn;
  call.int4 = int4;
  call.fp8 = fp8;
  MOESERVE_RETURN_IF_ERROR(
      Reserve(rows, rows, hidden_size, kernels::GroupedExpertsFfn(call)));
  call.x = Tensor(hidden(), DType::kF32, {rows, hidden_size}, cpu);
  // Any finite input: the kernels' time does not depend on the values.
  float* x = hidden();
  for (int64_t i = 0; i < rows * hidden_size; ++i) {
    x[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
  }
  double best = 0;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const Clock::time_point start = Clock::now();
    MOESERVE_RETURN_IF_ERROR(RunGroup(call, group));
    const double t = SecondsSince(start);
    best = i == 0 ? t : std::min(best, t);
  }
  return best;
}

}  // namespace moeserve::engine
