// Differential test of CudaBackend against the scalar reference
// (kernels/cpu/reference_ops.h), in the style of
// kernels/cpu/ops_differential_test.cc: random inputs at model shapes are
// copied to the device, the op runs, the output is copied back and compared
// at the CPU harness tolerances. Without a CUDA device every test skips.
//
// Coverage so far: MatMul, RmsNorm, Softmax, Argmax, Add (see README.md for
// the ops still to add here).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launchers.h"
#include "kernels/tensor.h"
#include "kernels/testing/differential.h"
#include "gtest/gtest.h"

namespace moeserve::kernels::cuda {
namespace {

namespace ref = ::moeserve::kernels::cpu::ref;

using ::moeserve::kernels::testing::Close;
using ::moeserve::kernels::testing::kTolDot;
using ::moeserve::kernels::testing::kTolPointwise;
using ::moeserve::kernels::testing::Rng;

template <typename T>
Tensor H(std::vector<T> &v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DTypeOf<T>::value, shape);
}

// A device copy of a host vector; freed on destruction.
template <typename T> class DeviceBuf {
public:
  explicit DeviceBuf(const std::vector<T> &host) : n_(host.size()) {
    EXPECT_EQ(RtMalloc(&p_, Bytes()), 0);
    EXPECT_EQ(RtCopyToDevice(p_, host.data(), Bytes()), 0);
  }
  ~DeviceBuf() { RtFree(p_); }
  DeviceBuf(const DeviceBuf &) = delete;
  DeviceBuf &operator=(const DeviceBuf &) = delete;
  Tensor View(std::initializer_list<int64_t> shape) const {
    return Tensor(p_, DTypeOf<T>::value, shape, Device::kCuda);
  }
  std::vector<T> ToHost() const {
    std::vector<T> out(n_);
    EXPECT_EQ(RtCopyToHost(out.data(), p_, Bytes()), 0);
    return out;
  }

private:
  int64_t Bytes() const { return static_cast<int64_t>(n_ * sizeof(T)); }
  size_t n_;
  void *p_ = nullptr;
};

class CudaOps : public ::testing::Test {
protected:
  void SetUp() override {
    auto b = CudaBackend::Create();
    if (absl::IsUnavailable(b.status())) {
      GTEST_SKIP() << "CUDA differential test skipped: " << b.status()
                   << " (needs a machine with an NVIDIA GPU)";
    }
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
    auto s = backend_->CreateStream();
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = std::move(*s);
  }
  Backend &B() { return *backend_; }
  Stream &S() { return *stream_; }

  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<Stream> stream_;
};

TEST(CudaBackendCreate, UnavailableOrOk) {
  auto b = CudaBackend::Create();
  EXPECT_TRUE(b.ok() || absl::IsUnavailable(b.status())) << b.status();
}

void RunMatMul(CudaOps &t, Backend &b, Stream &s, int64_t m, int64_t k,
               int64_t n, bool bias, Rng &rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " k=", k, " n=", n, " bias=", bias));
  auto x = rng.F32(m * k);
  auto w = rng.Bf16(n * k);
  auto bi = rng.Bf16(n);
  std::vector<float> want(m * n), init(m * n, NAN);
  DeviceBuf<float> dx(x), dout(init);
  DeviceBuf<bf16> dw(w), db(bi);
  ASSERT_TRUE(b.MatMul(s, dx.View({m, k}), dw.View({n, k}),
                       bias ? db.View({n}) : Tensor(), dout.View({m, n}))
                  .ok());
  ASSERT_TRUE(s.Synchronize().ok());
  ref::MatMul(H(x, {m, k}), H(w, {n, k}), bias ? H(bi, {n}) : Tensor(),
              H(want, {m, n}));
  EXPECT_TRUE(Close(dout.ToHost(), want, kTolDot));
}

TEST_F(CudaOps, MatMulModelShapesAndTails) {
  Rng rng(2);
  const std::pair<int64_t, int64_t> shapes[] = {
      {256, 512}, {512, 256}, {2048, 1408}, {1408, 2048}, {4096, 1024}};
  for (auto [k, n] : shapes) {
    for (int64_t m : {1, 3, 8, 17})
      RunMatMul(*this, B(), S(), m, k, n, false, rng);
  }
  for (int64_t k : {1, 7, 8, 9, 37, 263}) {
    for (int64_t m : {1, 2, 17})
      RunMatMul(*this, B(), S(), m, k, 13, true, rng);
  }
}

TEST_F(CudaOps, RmsNormSoftmaxAddArgmax) {
  Rng rng(3);
  for (int64_t n : {1, 3, 17}) {
    for (int64_t d : {64, 255, 2048}) {
      SCOPED_TRACE(absl::StrCat(n, "x", d));
      auto x = rng.F32(n * d, -4, 4);
      auto y = rng.F32(n * d, -4, 4);
      auto w = rng.Bf16(d);
      std::vector<float> want(n * d), init(n * d, NAN);
      DeviceBuf<float> dx(x), dy(y), dout(init);
      DeviceBuf<bf16> dw(w);

      ASSERT_TRUE(B().RmsNorm(S(), dx.View({n, d}), dw.View({d}), 1e-6f,
                              dout.View({n, d}))
                      .ok());
      ASSERT_TRUE(S().Synchronize().ok());
      ref::RmsNorm(H(x, {n, d}), H(w, {d}), 1e-6f, H(want, {n, d}));
      EXPECT_TRUE(Close(dout.ToHost(), want, kTolPointwise));

      ASSERT_TRUE(B().Softmax(S(), dx.View({n, d}), dout.View({n, d})).ok());
      ASSERT_TRUE(S().Synchronize().ok());
      ref::Softmax(H(x, {n, d}), H(want, {n, d}));
      EXPECT_TRUE(Close(dout.ToHost(), want, kTolPointwise));

      ASSERT_TRUE(
          B().Add(S(), dx.View({n, d}), dy.View({n, d}), dout.View({n, d}))
              .ok());
      ASSERT_TRUE(S().Synchronize().ok());
      ref::Add(H(x, {n, d}), H(y, {n, d}), H(want, {n, d}));
      EXPECT_EQ(dout.ToHost(), want);

      std::vector<int32_t> ids_init(n, -1), ids_want(n);
      DeviceBuf<int32_t> dids(ids_init);
      ASSERT_TRUE(B().Argmax(S(), dx.View({n, d}), dids.View({n})).ok());
      ASSERT_TRUE(S().Synchronize().ok());
      ref::Argmax(H(x, {n, d}), H(ids_want, {n}));
      EXPECT_EQ(dids.ToHost(), ids_want);
    }
  }
}

TEST_F(CudaOps, RefusesHostTensors) {
  std::vector<float> x(8), out(8);
  std::vector<bf16> w(8);
  EXPECT_TRUE(absl::IsInvalidArgument(
      B().RmsNorm(S(), H(x, {1, 8}), H(w, {8}), 1e-6f, H(out, {1, 8}))));
}

} // namespace
} // namespace moeserve::kernels::cuda
