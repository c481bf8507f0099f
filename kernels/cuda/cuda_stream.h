// CudaStream: the kernels::Stream of CudaBackend, a non-blocking
// cudaStream_t it owns. Package-internal: CudaBackend's files and tests get
// the raw handle through RawStream().
#ifndef MOESERVE_KERNELS_CUDA_CUDA_STREAM_H_
#define MOESERVE_KERNELS_CUDA_CUDA_STREAM_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cuda/runtime_shim.h"

namespace moeserve::kernels::cuda {

// OK, or Internal "what: cudaErrorX (text)".
inline absl::Status FromCuda(int err, const char *what) {
  if (err == 0)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", RtErrorName(err), " (",
                                          RtErrorString(err), ")"));
}

class CudaStream final : public Stream {
public:
  CudaStream(const void *owner, Strm stream) : owner_(owner), stream_(stream) {}
  ~CudaStream() override { RtStreamDestroy(stream_); }
  Device device() const override { return Device::kCuda; }
  absl::Status Synchronize() override {
    return FromCuda(RtStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  const void *owner() const { return owner_; }
  Strm get() const { return stream_; }

private:
  const void *const owner_; // the CudaBackend that created it
  const Strm stream_;
};

// The cudaStream_t of `s`, or InvalidArgument if `s` is not a stream of
// `owner`.
inline absl::StatusOr<Strm> RawStream(const void *owner, Stream &s) {
  auto *cs = dynamic_cast<CudaStream *>(&s);
  if (cs == nullptr || cs->owner() != owner) {
    return absl::InvalidArgumentError("stream does not belong to this backend");
  }
  return cs->get();
}

} // namespace moeserve::kernels::cuda

#endif // MOESERVE_KERNELS_CUDA_CUDA_STREAM_H_
