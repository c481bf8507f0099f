// CudaBackend's memory API (kernels/backend.h): device and page-locked host
// buffers, stream-ordered copies and timing events.
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/runtime_shim.h"

namespace moeserve::kernels::cuda {
namespace {

// cudaMalloc'd (device) or cudaHostAlloc'd (host) memory.
class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(void* data, int64_t bytes, bool host)
      : data_(data), bytes_(bytes), host_(host) {}
  ~CudaBuffer() override { host_ ? RtFreeHost(data_) : RtFree(data_); }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* const data_;
  const int64_t bytes_;
  const bool host_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(const void* owner, Evt event) : owner_(owner), event_(event) {}
  ~CudaEvent() override { RtEventDestroy(event_); }
  absl::Status Synchronize() override {
    if (!recorded_) return absl::OkStatus();
    return FromCuda(RtEventSynchronize(event_), "cudaEventSynchronize");
  }
  absl::StatusOr<double> SecondsSince(const Event& start) const override {
    const auto* s = dynamic_cast<const CudaEvent*>(&start);
    if (s == nullptr || s->owner_ != owner_) {
      return absl::InvalidArgumentError("event of another backend");
    }
    float ms = 0;
    MOESERVE_RETURN_IF_ERROR(FromCuda(RtEventElapsedMs(&ms, s->event_, event_),
                                      "cudaEventElapsedTime"));
    return ms * 1e-3;
  }
  const void* owner() const { return owner_; }
  Evt get() const { return event_; }
  bool recorded() const { return recorded_; }
  void set_recorded() { recorded_ = true; }

 private:
  const void* const owner_;
  const Evt event_;
  bool recorded_ = false;
};

absl::StatusOr<CudaEvent*> OwnEvent(const void* owner, Event& e) {
  auto* ce = dynamic_cast<CudaEvent*>(&e);
  if (ce == nullptr || ce->owner() != owner) {
    return absl::InvalidArgumentError("event does not belong to this backend");
  }
  return ce;
}

absl::Status CheckSize(int64_t bytes, const char* what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::Allocate(int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cudaMalloc of ", bytes, " bytes"));
  }
  RtEnsureDevice(device_id_);
  void* p = nullptr;
  const int err = RtMalloc(&p, bytes);
  if (err != 0) {
    RtGetLastError();  // Reported here; not the next launch's error.
    size_t free_bytes = 0, total = 0;
    RtMemGetInfo(&free_bytes, &total);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cudaMalloc of ", bytes, " bytes failed (", RtErrorName(err), "); ",
        free_bytes, " of ", total, " bytes of device memory free"));
  }
  return std::unique_ptr<Buffer>(new CudaBuffer(p, bytes, /*host=*/false));
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::AllocateHost(
    int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cudaHostAlloc of ", bytes, " bytes"));
  }
  void* p = nullptr;
  const int err = RtMallocHost(&p, bytes);
  if (err != 0) {
    RtGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        "cudaHostAlloc of ", bytes, " bytes failed (", RtErrorName(err), ")"));
  }
  return std::unique_ptr<Buffer>(new CudaBuffer(p, bytes, /*host=*/true));
}

absl::Status CudaBackend::RegisterHost(void* p, int64_t bytes) {
  if (p == nullptr || bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cudaHostRegister of ", bytes, " bytes at ",
                     p == nullptr ? "null" : "a host pointer"));
  }
  const int err = RtHostRegister(p, bytes);
  if (err != 0) RtGetLastError();
  return FromCuda(err, "cudaHostRegister");
}

void CudaBackend::UnregisterHost(void* p) { RtHostUnregister(p); }

absl::Status CudaBackend::CopyToDevice(Stream& s, void* dst, const void* src,
                                       int64_t bytes) {
  return CopyOnDevice(s, dst, src, bytes);
}

absl::Status CudaBackend::CopyToHost(Stream& s, void* dst, const void* src,
                                     int64_t bytes) {
  return CopyOnDevice(s, dst, src, bytes);
}

// One implementation for every direction: cudaMemcpyDefault infers it from
// the pointers (unified virtual addressing, every supported GPU).
absl::Status CudaBackend::CopyOnDevice(Stream& s, void* dst, const void* src,
                                       int64_t bytes) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckSize(bytes, "copy"));
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(RtCopyAsync(dst, src, bytes, st), "cudaMemcpyAsync");
}

absl::Status CudaBackend::Zero(Stream& s, void* dst, int64_t bytes) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_RETURN_IF_ERROR(CheckSize(bytes, "memset"));
  if (bytes == 0) return absl::OkStatus();
  return FromCuda(RtMemsetAsync(dst, 0, bytes, st), "cudaMemsetAsync");
}

absl::StatusOr<std::unique_ptr<Event>> CudaBackend::CreateEvent() {
  RtEnsureDevice(device_id_);
  Evt e = nullptr;
  MOESERVE_RETURN_IF_ERROR(FromCuda(RtEventCreate(&e), "cudaEventCreate"));
  return std::unique_ptr<Event>(new CudaEvent(this, e));
}

absl::Status CudaBackend::RecordEvent(Stream& s, Event& e) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_ASSIGN_OR_RETURN(CudaEvent * ce, OwnEvent(this, e));
  MOESERVE_RETURN_IF_ERROR(
      FromCuda(RtEventRecord(ce->get(), st), "cudaEventRecord"));
  ce->set_recorded();
  return absl::OkStatus();
}

absl::Status CudaBackend::WaitEvent(Stream& s, Event& e) {
  MOESERVE_ASSIGN_OR_RETURN(Strm st, RawStream(this, s));
  MOESERVE_ASSIGN_OR_RETURN(CudaEvent * ce, OwnEvent(this, e));
  // A never-recorded event is complete (cudaStreamWaitEvent agrees).
  return FromCuda(RtStreamWaitEvent(st, ce->get()), "cudaStreamWaitEvent");
}

}  // namespace moeserve::kernels::cuda
