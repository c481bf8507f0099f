// Test helpers of the CUDA backend's tests: device copies of host vectors and
// MOESERVE_SKIP_WITHOUT_CUDA (kernels/testing/cuda_skip.h: a test skips only
// on a machine without a CUDA device, never with MOESERVE_REQUIRE_CUDA=1).
#ifndef MOESERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define MOESERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/runtime_shim.h"
#include "kernels/tensor.h"
#include "kernels/testing/cuda_skip.h"

namespace moeserve::kernels::cuda::test_util {

// A host view of a vector.
template <typename T>
Tensor H(std::vector<T>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DTypeOf<T>::value, shape);
}

// A device copy of a host vector (synchronous copies); freed on destruction.
// `offset_bytes` shifts the view off the allocation's 256-byte alignment, to
// test the kernels' unaligned paths.
template <typename T>
class DeviceBuf {
 public:
  explicit DeviceBuf(const std::vector<T>& host, int64_t offset_bytes = 0)
      : n_(host.size()), offset_(offset_bytes) {
    EXPECT_EQ(RtMalloc(&base_, Bytes() + offset_ + 1), 0);
    EXPECT_EQ(RtCopyToDevice(data(), host.data(), Bytes()), 0);
  }
  ~DeviceBuf() { RtFree(base_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;

  void* data() const { return static_cast<char*>(base_) + offset_; }
  Tensor View(std::initializer_list<int64_t> shape) const {
    return Tensor(data(), DTypeOf<T>::value, shape, Device::kCuda);
  }
  // The same bytes as another dtype (I4 weights live in uint8_t vectors).
  Tensor View(DType dtype, std::initializer_list<int64_t> shape) const {
    return Tensor(data(), dtype, shape, Device::kCuda);
  }
  std::vector<T> ToHost() const {
    std::vector<T> out(n_);
    EXPECT_EQ(RtCopyToHost(out.data(), data(), Bytes()), 0);
    return out;
  }
  // Overwrites the device copy.
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    EXPECT_EQ(RtCopyToDevice(data(), host.data(), Bytes()), 0);
  }

 private:
  int64_t Bytes() const { return static_cast<int64_t>(n_ * sizeof(T)); }
  size_t n_;
  int64_t offset_;
  void* base_ = nullptr;
};

// A CudaBackend and one stream of it, or a skipped test.
struct BackendAndStream {
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<Stream> stream;
};

// Creates the backend; on failure returns the status for
// MOESERVE_SKIP_WITHOUT_CUDA.
inline absl::StatusOr<BackendAndStream> MakeBackend(
    const CudaBackendOptions& options = {}) {
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b,
                            CudaBackend::Create(0, options));
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, b->CreateStream());
  return BackendAndStream{std::move(b), std::move(s)};
}

}  // namespace moeserve::kernels::cuda::test_util

#endif  // MOESERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
