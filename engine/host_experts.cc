#include "engine/host_experts.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace moeserve::engine {

using base::MutexLock;
using kernels::DType;
using kernels::Tensor;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t FfnOf(int64_t ffn, const kernels::Int4ExpertLayout* int4,
              const kernels::Fp8ExpertLayout* fp8) {
  return int4 != nullptr ? int4->ffn : fp8 != nullptr ? fp8->ffn : ffn;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostExperts>> HostExperts::Create(
    kernels::Backend* host, kernels::Backend* device) {
  if (host == nullptr || device == nullptr) {
    return absl::InvalidArgumentError("host experts need two backends");
  }
  if (host->device() != kernels::Device::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("the host expert backend must compute on the CPU, not ",
                     kernels::DeviceName(host->device())));
  }
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            host->CreateStream());
  return std::unique_ptr<HostExperts>(
      new HostExperts(host, device, std::move(stream)));
}

HostExperts::HostExperts(kernels::Backend* host, kernels::Backend* device,
                         std::unique_ptr<kernels::Stream> stream)
    : host_(host), device_(device), stream_(std::move(stream)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

HostExperts::~HostExperts() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  worker_.join();
}

absl::Status HostExperts::Reserve(int64_t n, int64_t routed, int64_t hidden,
                                  int64_t ffn) {
  MOESERVE_RETURN_IF_ERROR(hidden_.Reserve(*device_, n * hidden * 4));
  MOESERVE_RETURN_IF_ERROR(out_.Reserve(*device_, routed * hidden * 4));
  return workspace_.Reserve(
      *host_, kernels::GroupedExpertWorkspaceElems(routed, ffn, hidden) * 4);
}

void HostExperts::Start(const Layer& layer) {
  {
    MutexLock lock(&mu_);
    layer_ = layer;
    pending_ = true;
    done_ = false;
  }
  cv_.SignalAll();
}

absl::Status HostExperts::Wait(std::vector<double>* seconds) {
  MutexLock lock(&mu_);
  cv_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; });
  if (seconds != nullptr) *seconds = seconds_;
  return status_;
}

void HostExperts::WorkerLoop() {
  std::vector<double> seconds;
  for (;;) {
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return pending_ || stop_;
      });
      if (stop_ && !pending_) return;
      pending_ = false;
    }
    seconds.clear();
    absl::Status status = Run(&seconds);
    {
      MutexLock lock(&mu_);
      status_ = std::move(status);
      seconds_.swap(seconds);
      done_ = true;
    }
    cv_.SignalAll();
  }
}

absl::Status HostExperts::Run(std::vector<double>* seconds) {
  const Layer& layer = layer_;
  const int64_t need = layer.routed * layer.hidden_size * 4;
  if (out_.bytes() < need ||
      hidden_.bytes() < layer.n * layer.hidden_size * 4 ||
      workspace_.bytes() < kernels::GroupedExpertWorkspaceElems(
                               layer.routed,
                               FfnOf(layer.ffn, layer.int4, layer.fp8),
                               layer.hidden_size) *
                               4) {
    return absl::InternalError("host expert buffers not reserved");
  }
  absl::Status first = absl::OkStatus();
  for (const kernels::ExpertGroup& g : layer.groups) {
    const Clock::time_point start = Clock::now();
    absl::Status s = RunGroup(layer, g, static_cast<float*>(out_.data()),
                              static_cast<float*>(workspace_.data()));
    seconds->push_back(SecondsSince(start));
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status HostExperts::RunGroup(const Layer& layer,
                                   const kernels::ExpertGroup& group,
                                   float* out, float* workspace) {
  const int64_t d = layer.hidden_size;
  const kernels::Device cpu = kernels::Device::kCpu;
  kernels::GroupedExperts call;
  call.x = Tensor(hidden_.data(), DType::kF32, {layer.n, d}, cpu);
  call.rows = Tensor(const_cast<int32_t*>(layer.perm), DType::kI32,
                     {layer.routed}, cpu);
  call.groups = std::span<const kernels::ExpertGroup>(&group, 1);
  call.ffn = layer.ffn;
  call.int4 = layer.int4;
  call.fp8 = layer.fp8;
  const int64_t ws = kernels::GroupedExpertWorkspaceElems(
      layer.routed, FfnOf(layer.ffn, layer.int4, layer.fp8), d);
  MOESERVE_RETURN_IF_ERROR(host_->ExpertFfnGrouped(
      *stream_, call, Tensor(workspace, DType::kF32, {ws}, cpu),
      Tensor(out, DType::kF32, {layer.routed, d}, cpu)));
  return stream_->Synchronize();
}

absl::StatusOr<double> HostExperts::TimeExpert(
    const std::byte* blob, int64_t rows, int64_t hidden_size, int64_t ffn,
    const kernels::Int4ExpertLayout* int4, const kernels::Fp8ExpertLayout* fp8,
    int repeats) {
  MOESERVE_RETURN_IF_ERROR(
      Reserve(rows, rows, hidden_size, FfnOf(ffn, int4, fp8)));
  // Any finite input: the kernels' time does not depend on the values.
  float* x = hidden();
  for (int64_t i = 0; i < rows * hidden_size; ++i) {
    x[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
  }
  std::vector<int32_t> perm(rows);
  for (int64_t r = 0; r < rows; ++r) perm[r] = static_cast<int32_t>(r);
  const kernels::ExpertGroup group{blob, 0, rows};
  Layer layer;
  layer.n = rows;
  layer.routed = rows;
  layer.hidden_size = hidden_size;
  layer.perm = perm.data();
  layer.groups = std::span<const kernels::ExpertGroup>(&group, 1);
  layer.ffn = ffn;
  layer.int4 = int4;
  layer.fp8 = fp8;
  double best = 0;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const Clock::time_point start = Clock::now();
    MOESERVE_RETURN_IF_ERROR(RunGroup(layer, group,
                                      static_cast<float*>(out_.data()),
                                      static_cast<float*>(workspace_.data())));
    const double t = SecondsSince(start);
    best = i == 0 ? t : std::min(best, t);
  }
  return best;
}

}  // namespace moeserve::engine
