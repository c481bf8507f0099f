// CreateBackend: picks a compute backend by name ("cpu", "cuda" or "null",
// the device that does no arithmetic: null_backend.h) for the server and
// tools. The CUDA backend is built only where the build found the
// CUDA toolkit (//third_party/cuda), as the plugin libmoeserve_cuda.so loaded
// on first use (MOESERVE_CUDA_PLUGIN overrides its path); asking for it
// elsewhere is a clear error, not a crash.
#ifndef MOESERVE_KERNELS_BACKEND_FACTORY_H_
#define MOESERVE_KERNELS_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace moeserve::kernels {

struct BackendOptions {
  std::string name = "cpu";  // "cpu", "cuda" or "null"
  int cpu_threads = 1;       // CPU backend: threads running kernels
  int cuda_device = 0;       // CUDA backend: device ordinal
  // CUDA backend: record the engine's dense sub-steps as CUDA graphs and
  // replay them (Backend::SetGraphs; issue 30 item 3). Ignored elsewhere.
  bool cuda_graphs = false;
};

// InvalidArgument for an unknown name; FailedPrecondition for "cuda" in a
// build without the toolkit; Unavailable for "cuda" without a usable GPU.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const BackendOptions& options);

// The names this build can create ("cpu", "null", and "cuda" with the
// toolkit).
std::vector<std::string> CompiledBackends();

// What --version says about compute: the backends this build carries and
// the CPU kernel variants it has, which of them this CPU runs, and the
// default, e.g.
//   "backends: cpu, cuda (plugin libmoeserve_cuda.so, loaded on use)"
//   "cpu kernels: scalar avx2 avx512 avx512bf16 amxbf16; this CPU: scalar
//    avx2 avx512 avx512bf16; default avx512"
std::vector<std::string> DescribeCompute();

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_BACKEND_FACTORY_H_
