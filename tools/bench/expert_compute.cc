#include "tools/bench/expert_compute.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "engine/offload/slow_tier.h"
#include "kernels/tensor.h"

namespace moeserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxDistinctExperts = 64;
constexpr int64_t kUploadBudgetBytes = int64_t{1} << 30;
constexpr double kMinSeconds = 0.2;
constexpr int kMaxPasses = 1000;

}  // namespace

absl::StatusOr<ExpertComputeTiming> ExpertComputeMicros(
    const engine::ModelWeights& weights, kernels::Backend* backend) {
  const engine::ModelConfig& c = weights.config();
  const int64_t hidden = c.hidden_size;
  const int64_t ffn = c.expert_intermediate_size;
  const int64_t blob_bytes = weights.expert({0, 0}).bytes;
  const int all = weights.num_layers() * weights.num_experts();
  const int n = static_cast<int>(
      std::clamp<int64_t>(kUploadBudgetBytes / blob_bytes, 1,
                          std::min<int64_t>(all, kMaxDistinctExperts)));

  // Blobs come from the slow tier the weights support: the packed arena, or
  // pread from the files (weights loaded for the disk tier).
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<engine::SlowTier> slow,
                            weights.expert({0, 0}).data != nullptr
                                ? engine::NewHostSlowTier(&weights)
                                : engine::NewDiskSlowTier(&weights));
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            backend->CreateStream());
  kernels::Stream& s = *stream;
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> staging,
                            backend->AllocateHost(blob_bytes));
  std::vector<std::unique_ptr<kernels::Buffer>> blobs;
  for (int i = 0; i < n; ++i) {
    // Spread the sample over layers and experts.
    const int flat = static_cast<int>(int64_t{i} * all / n);
    const engine::ExpertId id{flat / weights.num_experts(),
                              flat % weights.num_experts()};
    MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> blob,
                              backend->Allocate(blob_bytes));
    MOESERVE_RETURN_IF_ERROR(
        slow->Read(id, static_cast<std::byte*>(staging->data())));
    MOESERVE_RETURN_IF_ERROR(
        backend->CopyToDevice(s, blob->data(), staging->data(), blob_bytes));
    // The staging buffer is reused: the copy must be done before the next
    // Read overwrites it.
    MOESERVE_RETURN_IF_ERROR(s.Synchronize());
    blobs.push_back(std::move(blob));
  }

  // Activations and workspace in device memory too.
  const int64_t ws_elems = kernels::ExpertFfnWorkspaceElems(1, ffn);
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> x,
                            backend->Allocate(hidden * 4));
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> out,
                            backend->Allocate(hidden * 4));
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> ws,
                            backend->Allocate(ws_elems * 4));
  {
    std::vector<float> host(hidden);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0, 1);
    for (float& v : host) v = normal(rng);
    MOESERVE_RETURN_IF_ERROR(
        backend->CopyToDevice(s, x->data(), host.data(), hidden * 4));
    MOESERVE_RETURN_IF_ERROR(s.Synchronize());  // `host` dies here
  }
  const kernels::Device dev = backend->device();
  const kernels::Tensor xt(x->data(), kernels::DType::kF32, {1, hidden}, dev);
  const kernels::Tensor ot(out->data(), kernels::DType::kF32, {1, hidden}, dev);
  const kernels::Tensor wt(ws->data(), kernels::DType::kF32, {ws_elems}, dev);
  // The kernel of the checkpoint's expert format (bf16, int4 or fp8).
  const kernels::Int4ExpertLayout* int4 = weights.int4_layout();
  const kernels::Fp8ExpertLayout* fp8 = weights.fp8_layout();
  auto pass = [&]() -> absl::Status {
    for (const std::unique_ptr<kernels::Buffer>& b : blobs) {
      if (int4 != nullptr) {
        const kernels::Tensor bt(b->data(), kernels::DType::kU8, {int4->bytes},
                                 dev);
        MOESERVE_RETURN_IF_ERROR(
            backend->ExpertFfnInt4(s, xt, bt, *int4, wt, ot));
      } else if (fp8 != nullptr) {
        const kernels::Tensor bt(b->data(), kernels::DType::kU8, {fp8->bytes},
                                 dev);
        MOESERVE_RETURN_IF_ERROR(
            backend->ExpertFfnFp8(s, xt, bt, *fp8, wt, ot));
      } else {
        const kernels::Tensor bt(b->data(), kernels::DType::kBF16,
                                 {3 * ffn * hidden}, dev);
        MOESERVE_RETURN_IF_ERROR(backend->ExpertFfn(s, xt, bt, ffn, wt, ot));
      }
    }
    return s.Synchronize();
  };
  MOESERVE_RETURN_IF_ERROR(pass());  // warm-up

  // Device time between two events (wall time on the CPU backend). The host
  // waits after every pass only to know when to stop.
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Event> start,
                            backend->CreateEvent());
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Event> stop,
                            backend->CreateEvent());
  MOESERVE_RETURN_IF_ERROR(backend->RecordEvent(s, *start));
  int passes = 0;
  const Clock::time_point wall_start = Clock::now();
  do {
    MOESERVE_RETURN_IF_ERROR(pass());
    ++passes;
  } while (std::chrono::duration<double>(Clock::now() - wall_start).count() <
               kMinSeconds &&
           passes < kMaxPasses);
  MOESERVE_RETURN_IF_ERROR(backend->RecordEvent(s, *stop));
  MOESERVE_RETURN_IF_ERROR(stop->Synchronize());
  MOESERVE_ASSIGN_OR_RETURN(const double seconds, stop->SecondsSince(*start));
  return ExpertComputeTiming{
      .micros_per_expert = seconds * 1e6 / (static_cast<double>(passes) * n),
      .distinct_experts = n};
}

}  // namespace moeserve::bench
