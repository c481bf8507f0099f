#include "kernels/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef MOESERVE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace moeserve::kernels {

absl::StatusOr<std::unique_ptr<Backend>>
CreateBackend(const BackendOptions &options) {
  if (options.name == "cpu") {
    return std::unique_ptr<Backend>(
        std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{
            .num_threads = std::max(1, options.cpu_threads)}));
  }
  if (options.name == "cuda") {
#ifdef MOESERVE_WITH_CUDA
    absl::StatusOr<std::unique_ptr<cuda::CudaBackend>> b =
        cuda::CudaBackend::Create(options.cuda_device);
    if (!b.ok())
      return b.status();
    return std::unique_ptr<Backend>(*std::move(b));
#else
    return absl::FailedPreconditionError(
        "backend 'cuda': this build has no CUDA backend (the CUDA toolkit "
        "was not found when it was built; see third_party/cuda)");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend must be cpu or cuda, got '", options.name, "'"));
}

std::vector<std::string> CompiledBackends() {
#ifdef MOESERVE_WITH_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

} // namespace moeserve::kernels
