// libmoeserve_cuda.so: the CUDA backend as a plugin, so binaries that may run
// on the CPU alone (the server, the tools) neither link cudart/cublasLt nor
// need them installed; kernels/backend_factory dlopens this file for
// --backend=cuda. (Linked in directly, libcublasLt's ~94 KiB of static TLS
// is carved out of every thread's stack and civetweb's worker threads fail
// to start.) The object crosses the boundary as a kernels::Backend*: both
// sides are built from the same headers against the same shared Abseil.
#include <cstring>
#include <memory>

#include "kernels/cuda/cuda_backend.h"

extern "C" {

// A new CudaBackend for `device` (the caller owns it and deletes it through
// kernels::Backend*), or null with *code set to the absl::StatusCode and
// `error` (error_len bytes) to the message.
__attribute__((visibility("default"))) moeserve::kernels::Backend*
moeserve_cuda_backend_create(int device, int* code, char* error,
                             int error_len) {
  absl::StatusOr<std::unique_ptr<moeserve::kernels::cuda::CudaBackend>> b =
      moeserve::kernels::cuda::CudaBackend::Create(device);
  if (b.ok()) return b->release();
  *code = static_cast<int>(b.status().code());
  if (error_len > 0) {
    const std::string msg(b.status().message());
    std::strncpy(error, msg.c_str(), error_len - 1);
    error[error_len - 1] = '\0';
  }
  return nullptr;
}

}  // extern "C"
