// Thin wrappers over the CUDA runtime for host C++ (see runtime_shim.h).
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/runtime_shim.h"

namespace moeserve::kernels::cuda {

int RtDeviceCount(int* count) { return cudaGetDeviceCount(count); }
int RtSetDevice(int device) { return cudaSetDevice(device); }
int RtEnsureDevice(int device) {
  thread_local int current = -1;
  if (device == current) return cudaSuccess;
  const cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) current = device;
  return err;
}
int RtDeviceName(int device, char* buf, int len) {
  cudaDeviceProp prop;
  const cudaError_t err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return err;
  snprintf(buf, len, "%s-sm%d%d", prop.name, prop.major, prop.minor);
  return cudaSuccess;
}
int RtMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return cudaMemGetInfo(free_bytes, total_bytes);
}

int RtStreamCreate(Strm* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking);
}
int RtStreamDestroy(Strm stream) { return cudaStreamDestroy(stream); }
int RtStreamSynchronize(Strm stream) { return cudaStreamSynchronize(stream); }

int RtMalloc(void** p, int64_t bytes) { return cudaMalloc(p, bytes); }
int RtFree(void* p) { return cudaFree(p); }
int RtMallocHost(void** p, int64_t bytes) {
  return cudaHostAlloc(p, bytes, cudaHostAllocPortable);
}
int RtFreeHost(void* p) { return cudaFreeHost(p); }
int RtHostRegister(void* p, int64_t bytes) {
  return cudaHostRegister(p, bytes, cudaHostRegisterPortable);
}
int RtHostUnregister(void* p) { return cudaHostUnregister(p); }

// cudaMemcpy from pageable memory may return before the DMA lands, and
// cudaMemset is asynchronous: both run on the legacy default stream, which our
// streams (cudaStreamNonBlocking) do not wait for. So these wait for it: a
// kernel launched on any stream afterwards sees the bytes (seen on an H100: a
// NaN fill landing after the GEMV that overwrote it).
int RtCopyToDevice(void* dst, const void* src, int64_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return e != cudaSuccess ? e : cudaStreamSynchronize(cudaStreamLegacy);
}
int RtCopyToHost(void* dst, const void* src, int64_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
}
int RtMemset(void* p, int value, int64_t bytes) {
  const cudaError_t e = cudaMemset(p, value, bytes);
  return e != cudaSuccess ? e : cudaStreamSynchronize(cudaStreamLegacy);
}
int RtCopyAsync(void* dst, const void* src, int64_t bytes, Strm stream) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
}
int RtMemsetAsync(void* p, int value, int64_t bytes, Strm stream) {
  return cudaMemsetAsync(p, value, bytes, stream);
}

int RtEventCreate(Evt* event) { return cudaEventCreate(event); }
int RtEventDestroy(Evt event) { return cudaEventDestroy(event); }
int RtEventRecord(Evt event, Strm stream) {
  return cudaEventRecord(event, stream);
}
int RtStreamWaitEvent(Strm stream, Evt event) {
  return cudaStreamWaitEvent(stream, event, 0);
}
int RtEventSynchronize(Evt event) { return cudaEventSynchronize(event); }
int RtEventElapsedMs(float* ms, Evt start, Evt end) {
  return cudaEventElapsedTime(ms, start, end);
}

int RtGetLastError() { return cudaGetLastError(); }

const char* RtErrorName(int err) {
  return cudaGetErrorName(static_cast<cudaError_t>(err));
}
const char* RtErrorString(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}

}  // namespace moeserve::kernels::cuda
