#include "kernels/backend_factory.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/plugin_loader.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/null_backend.h"

namespace moeserve::kernels {
namespace {

#ifdef MOESERVE_WITH_CUDA
// kernels/cuda/cuda_plugin.cc's entry point.
using CreateCudaFn = Backend* (*)(int device, int* code, char* error,
                                  int error_len);

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  static std::string* load_error = new std::string();
  static CreateCudaFn create = [] {
    void* handle = base::OpenPlugin({.file = "libmoeserve_cuda.so",
                                     .package_dir = "kernels/cuda",
                                     .env_var = "MOESERVE_CUDA_PLUGIN",
                                     .dlopen_flags = RTLD_NOW | RTLD_LOCAL},
                                    load_error);
    if (handle == nullptr) return CreateCudaFn{nullptr};
    return reinterpret_cast<CreateCudaFn>(
        base::PluginSymbol(handle, "moeserve_cuda_backend_create", load_error));
  }();
  if (create == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("backend 'cuda': ", *load_error));
  }
  int code = 0;
  char error[512] = {0};
  Backend* backend = create(device, &code, error, sizeof(error));
  if (backend == nullptr) {
    return absl::Status(static_cast<absl::StatusCode>(code), error);
  }
  return std::unique_ptr<Backend>(backend);
}
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const BackendOptions& options) {
  if (options.name == "cpu") {
    return std::unique_ptr<Backend>(
        std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{
            .num_threads = std::max(1, options.cpu_threads)}));
  }
  if (options.name == "null") {
    return std::unique_ptr<Backend>(std::make_unique<NullBackend>());
  }
  if (options.name == "cuda") {
#ifdef MOESERVE_WITH_CUDA
    absl::StatusOr<std::unique_ptr<Backend>> cuda =
        CreateCudaBackend(options.cuda_device);
    if (cuda.ok() && options.cuda_graphs) (*cuda)->SetGraphs(true);
    return cuda;
#else
    return absl::FailedPreconditionError(
        "backend 'cuda': this build has no CUDA backend (the CUDA toolkit "
        "was not found when it was built; see third_party/cuda)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "backend must be cpu, cuda or null, got '", options.name, "'"));
}

std::vector<std::string> CompiledBackends() {
#ifdef MOESERVE_WITH_CUDA
  return {"cpu", "cuda", "null"};
#else
  return {"cpu", "null"};
#endif
}

std::vector<std::string> DescribeCompute() {
  std::string backends = absl::StrJoin(CompiledBackends(), ", ");
#ifdef MOESERVE_WITH_CUDA
  absl::StrAppend(&backends,
                  " (cuda: plugin libmoeserve_cuda.so, loaded on use; needs "
                  "an NVIDIA GPU)");
#endif
  std::vector<std::string> built, here;
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512,
                       cpu::Isa::kAvx512Bf16, cpu::Isa::kAmxBf16}) {
    built.push_back(cpu::IsaName(isa));
    if (cpu::IsaSupported(isa)) here.push_back(cpu::IsaName(isa));
  }
  return {absl::StrCat("backends: ", backends),
          absl::StrCat("cpu kernels: ", absl::StrJoin(built, " "),
                       "; this CPU: ", absl::StrJoin(here, " "), "; default ",
                       cpu::IsaName(cpu::BestIsa()),
                       " (MOESERVE_CPU_KERNELS picks another)")};
}

}  // namespace moeserve::kernels
