// The CUDA runtime calls host C++ needs, compiled by nvcc (runtime_shim.cu).
// This header includes only std types: Bazel 4's header-inclusion check
// rejects /usr/local/cuda/include in a cc_library without a CUDA toolchain,
// so host code reaches the runtime through these thin wrappers instead of
// cuda_runtime.h. Each returns the cudaError_t value as an int (0 = success).
// CUstream_st* / CUevent_st* are the types cudaStream_t / cudaEvent_t name.
#ifndef MOESERVE_KERNELS_CUDA_RUNTIME_SHIM_H_
#define MOESERVE_KERNELS_CUDA_RUNTIME_SHIM_H_

#include <cstddef>
#include <cstdint>

struct CUstream_st;
struct CUevent_st;

namespace moeserve::kernels::cuda {

using Strm = CUstream_st*;  // == cudaStream_t
using Evt = CUevent_st*;    // == cudaEvent_t

int RtDeviceCount(int* count);
int RtSetDevice(int device);
// cudaSetDevice only when `device` is not already this thread's current one
// (remembered per thread), so it is cheap to call before every launch.
int RtEnsureDevice(int device);
// Writes "name-smXY" into buf (NUL-terminated, truncated to len).
int RtDeviceName(int device, char* buf, int len);
int RtMemGetInfo(size_t* free_bytes, size_t* total_bytes);

int RtStreamCreate(Strm* stream);  // non-blocking w.r.t. the legacy stream
int RtStreamDestroy(Strm stream);
int RtStreamSynchronize(Strm stream);

int RtMalloc(void** p, int64_t bytes);
int RtFree(void* p);
int RtMallocHost(void** p, int64_t bytes);  // cudaHostAlloc, portable
int RtFreeHost(void* p);
int RtHostRegister(void* p, int64_t bytes);  // cudaHostRegisterPortable
int RtHostUnregister(void* p);

// Synchronous copies (tests, one-time uploads).
int RtCopyToDevice(void* dst, const void* src, int64_t bytes);
int RtCopyToHost(void* dst, const void* src, int64_t bytes);
int RtMemset(void* p, int value, int64_t bytes);

// Stream-ordered copies (cudaMemcpyAsync with cudaMemcpyDefault: the
// direction comes from unified addressing) and memset.
int RtCopyAsync(void* dst, const void* src, int64_t bytes, Strm stream);
int RtMemsetAsync(void* p, int value, int64_t bytes, Strm stream);

int RtEventCreate(Evt* event);  // with timing
int RtEventDestroy(Evt event);
int RtEventRecord(Evt event, Strm stream);
int RtStreamWaitEvent(Strm stream, Evt event);
int RtEventSynchronize(Evt event);
int RtEventElapsedMs(float* ms, Evt start, Evt end);

// Returns and clears the thread's last runtime error. Called after a failed
// runtime call whose error is reported by status, so that the next kernel
// launch's cudaGetLastError() check does not pick it up.
int RtGetLastError();

const char* RtErrorName(int err);
const char* RtErrorString(int err);

}  // namespace moeserve::kernels::cuda

#endif  // MOESERVE_KERNELS_CUDA_RUNTIME_SHIM_H_
