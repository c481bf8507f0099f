// CudaBackend: the Backend (kernels/backend.h) for Device::kCuda tensors.
// Ops validate with kernels/op_checks.h on the host (InvalidArgument, as the
// CPU backend), then enqueue the launchers of launchers.h on the stream's
// cudaStream_t; outputs are ready after Stream::Synchronize(). Index values
// live on the device and are guarded inside the kernels (see launchers.h)
// rather than range-checked on the host.
//
// Thread safety: as Backend. A CudaBackend is bound to the device that was
// current when Create() ran.
#ifndef MOESERVE_KERNELS_CUDA_CUDA_BACKEND_H_
#define MOESERVE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cuda {

class CudaBackend final : public Backend {
public:
  // UNAVAILABLE ("no CUDA device") when the runtime reports no device (or no
  // driver); never crashes.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device = 0);

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  int device_id() const { return device_id_; }

  // Memory API (cuda_memory.cc): cudaMalloc, cudaHostAlloc /
  // cudaHostRegister, cudaMemcpyAsync / cudaMemsetAsync on the stream, and
  // timing cudaEvents.
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(int64_t bytes) override;
  absl::Status RegisterHost(void *p, int64_t bytes) override;
  void UnregisterHost(void *p) override;
  absl::Status CopyToDevice(Stream &s, void *dst, const void *src,
                            int64_t bytes) override;
  absl::Status CopyToHost(Stream &s, void *dst, const void *src,
                          int64_t bytes) override;
  absl::Status CopyOnDevice(Stream &s, void *dst, const void *src,
                            int64_t bytes) override;
  absl::Status Zero(Stream &s, void *dst, int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  absl::Status RecordEvent(Stream &s, Event &e) override;
  absl::Status WaitEvent(Stream &s, Event &e) override;

  absl::Status Embedding(Stream &s, const Tensor &ids, const Tensor &table,
                         const Tensor &out) override;
  absl::Status RmsNorm(Stream &s, const Tensor &x, const Tensor &w, float eps,
                       const Tensor &out) override;
  absl::Status MatMul(Stream &s, const Tensor &x, const Tensor &w,
                      const Tensor &bias, const Tensor &out) override;
  absl::Status RopeRotateHalf(Stream &s, const Tensor &x,
                              const Tensor &positions, float theta) override;
  absl::Status KvWrite(Stream &s, const Tensor &k, const Tensor &v,
                       const Tensor &slot_mapping,
                       const PagedKvCache &cache) override;
  absl::Status Attention(Stream &s, const Tensor &q, const PagedKvCache &cache,
                         const AttentionBatch &batch,
                         const Tensor &out) override;
  absl::Status RouterTopK(Stream &s, const Tensor &logits, int k,
                          bool normalize, const Tensor &weights,
                          const Tensor &ids) override;
  absl::Status SiluMul(Stream &s, const Tensor &gate, const Tensor &up,
                       const Tensor &out) override;
  absl::Status Add(Stream &s, const Tensor &a, const Tensor &b,
                   const Tensor &out) override;
  absl::Status GatherRows(Stream &s, const Tensor &x, const Tensor &rows,
                          const Tensor &out) override;
  absl::Status ScaleAddRows(Stream &s, const Tensor &x, const Tensor &rows,
                            const Tensor &weights, const Tensor &y) override;
  absl::Status SigmoidGatedAdd(Stream &s, const Tensor &x, const Tensor &gate,
                               const Tensor &y) override;
  absl::Status ExpertFfn(Stream &s, const Tensor &x, const Tensor &blob,
                         int64_t ffn, const Tensor &workspace,
                         const Tensor &out) override;
  absl::Status Softmax(Stream &s, const Tensor &x, const Tensor &out) override;
  absl::Status Argmax(Stream &s, const Tensor &x, const Tensor &out) override;

private:
  CudaBackend(int device, std::string name)
      : device_id_(device), name_(std::move(name)) {}

  int device_id_;
  std::string name_;
};

} // namespace moeserve::kernels::cuda

#endif // MOESERVE_KERNELS_CUDA_CUDA_BACKEND_H_
