// CudaStream: the kernels::Stream of CudaBackend. It owns a non-blocking
// cudaStream_t and the stream's device scratch for the cuBLASLt MatMul path
// (workspace + hi/lo split buffers, see cublaslt_gemm.h): scratch is per
// stream because ops on different streams may run at the same time, and
// allocated once at CreateStream because ops never allocate.
// Package-internal: CudaBackend's files and tests reach it through
// OwnStream() / RawStream().
#ifndef MOESERVE_KERNELS_CUDA_CUDA_STREAM_H_
#define MOESERVE_KERNELS_CUDA_CUDA_STREAM_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cuda/cublaslt_gemm.h"
#include "kernels/cuda/runtime_shim.h"

namespace moeserve::kernels::cuda {

// OK, or Internal "what: cudaErrorX (text)".
inline absl::Status FromCuda(int err, const char* what) {
  if (err == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", RtErrorName(err), " (",
                                          RtErrorString(err), ")"));
}

class CudaStream final : public Stream {
 public:
  // Takes ownership of `stream` and of the device memory in `scratch`
  // (cudaMalloc'd, may be null).
  CudaStream(const void* owner, int device, Strm stream, LtScratch scratch)
      : owner_(owner), device_(device), stream_(stream), scratch_(scratch) {}
  ~CudaStream() override {
    // The scratch may still be in use by enqueued work.
    RtStreamSynchronize(stream_);
    if (scratch_.workspace != nullptr) RtFree(scratch_.workspace);
    if (scratch_.split != nullptr) RtFree(scratch_.split);
    RtStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const override { return Device::kCuda; }
  absl::Status Synchronize() override {
    return FromCuda(RtStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  const void* owner() const { return owner_; }
  int device_id() const { return device_; }
  Strm get() const { return stream_; }
  const LtScratch& scratch() const { return scratch_; }

 private:
  const void* const owner_;  // The CudaBackend that created it.
  const int device_;         // Its device ordinal.
  const Strm stream_;
  const LtScratch scratch_;
};

// `s` as a CudaStream of `owner`, or InvalidArgument. Also makes the
// stream's device current on the calling thread: ops, copies and events are
// enqueued from several threads (the engine's scheduler, the link workers),
// and a launch into a stream of a device that is not current fails.
inline absl::StatusOr<CudaStream*> OwnStream(const void* owner, Stream& s) {
  auto* cs = dynamic_cast<CudaStream*>(&s);
  if (cs == nullptr || cs->owner() != owner) {
    return absl::InvalidArgumentError("stream does not belong to this backend");
  }
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtEnsureDevice(cs->device_id()), "cudaSetDevice"));
  return cs;
}

// The cudaStream_t of `s`, or InvalidArgument if `s` is not a stream of
// `owner`.
inline absl::StatusOr<Strm> RawStream(const void* owner, Stream& s) {
  MOESERVE_ASSIGN_OR_RETURN(CudaStream * cs, OwnStream(owner, s));
  return cs->get();
}

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_CUDA_STREAM_H_
