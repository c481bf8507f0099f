// Differential test of CudaBackend against the scalar reference
// (kernels/cpu/reference_ops.h), the CUDA twin of
// kernels/cpu/ops_differential_test.cc: random inputs at real model shapes
// (the demo model: hidden 256, 8 heads x 32, 4 kv heads, ffn 384, vocab 4096;
// Qwen1.5-MoE-A2.7B: hidden 2048, 16 x 128, ffn 1408, 60 experts top-4, vocab
// 151936; Mixtral: hidden 4096, 32 x 128, 8 kv heads, ffn 14336) are copied to
// the device, the op runs, the output comes back and is compared at the
// shared harness's tolerance for how the kernel computes
// (kernels/testing/differential.h). Every op is covered (ExpertFfnInt4 on
// experts quantized by int4_expert.h), MatMul on both of its paths (GEMV and
// cuBLASLt), plus the CUDA-only behaviour (out-of-range
// indices are zeros or skipped) and refusals (InvalidArgument).
//
// Without a CUDA device every test skips with CudaBackend::Create()'s status.
//
// The reference is a scalar loop in an unoptimised build, so the widest
// products (Mixtral, the lm_head) are compared on a sample of output columns
// (the first 192 and the last 64) while the device computes all of them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/cuda/launchers.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"
#include "kernels/testing/differential.h"

namespace moeserve::kernels::cuda {
namespace {

namespace ref = ::moeserve::kernels::cpu::ref;

using ::moeserve::kernels::cuda::test_util::BackendAndStream;
using ::moeserve::kernels::cuda::test_util::DeviceBuf;
using ::moeserve::kernels::cuda::test_util::H;
using ::moeserve::kernels::cuda::test_util::MakeBackend;
using ::moeserve::kernels::testing::Close;
using ::moeserve::kernels::testing::kTolDot;
using ::moeserve::kernels::testing::kTolInt4Dot;
using ::moeserve::kernels::testing::kTolOnlineSoftmax;
using ::moeserve::kernels::testing::kTolPointwise;
using ::moeserve::kernels::testing::kTolSplitBf16Dot;
using ::moeserve::kernels::testing::kTolUnorderedSum;
using ::moeserve::kernels::testing::NewTokenQueries;
using ::moeserve::kernels::testing::Rng;

template <typename T>
std::vector<T> Zeros(int64_t n) {
  return std::vector<T>(n);
}

std::vector<float> Nans(int64_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(),
                     [](float f) { return std::isfinite(f); });
}

// Three backends: the default (cuBLASLt from m = 16), and one forced onto
// each MatMul path.
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = MakeBackend();
    MOESERVE_SKIP_WITHOUT_CUDA(d.status());
    ASSERT_TRUE(d.ok()) << d.status();
    def_ = std::move(*d);
    auto g = MakeBackend({.lt_min_m = 0});
    ASSERT_TRUE(g.ok()) << g.status();
    gemv_ = std::move(*g);
    auto l = MakeBackend({.lt_min_m = 1});
    ASSERT_TRUE(l.ok()) << l.status();
    lt_ = std::move(*l);
  }
  CudaBackend& B() { return *def_.backend; }
  Stream& S() { return *def_.stream; }

  BackendAndStream def_, gemv_, lt_;
};

TEST(CudaBackendCreate, UnavailableOrOk) {
  auto b = CudaBackend::Create();
  EXPECT_TRUE(b.ok() || absl::IsUnavailable(b.status())) << b.status();
}

// Runs without a device: options are checked first.
TEST(CudaBackendCreate, RefusesBadOptions) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      CudaBackend::Create(0, {.lt_min_m = -1}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      CudaBackend::Create(0, {.lt_min_m = 16, .lt_split_elems = 0}).status()));
}

// ---------------------------------------------------------------- MatMul

struct Span {
  int64_t begin, end;
};

// Output columns compared against the reference (see the file comment).
std::vector<Span> ColumnsToCheck(int64_t n) {
  if (n <= 256) return {{0, n}};
  return {{0, 192}, {n - 64, n}};
}

// The reference on the checked columns, row-major [m, sum of widths].
std::vector<float> RefMatMulColumns(std::vector<float>& x, std::vector<bf16>& w,
                                    bf16* bias, int64_t m, int64_t k,
                                    int64_t n) {
  std::vector<float> want;
  std::vector<std::vector<float>> parts;
  for (Span s : ColumnsToCheck(n)) {
    const int64_t width = s.end - s.begin;
    std::vector<float> part(m * width);
    ref::MatMul(H(x, {m, k}),
                Tensor(w.data() + s.begin * k, DType::kBF16, {width, k}),
                bias != nullptr ? Tensor(bias + s.begin, DType::kBF16, {width})
                                : Tensor(),
                Tensor(part.data(), DType::kF32, {m, width}));
    parts.push_back(std::move(part));
  }
  for (int64_t r = 0; r < m; ++r) {
    int64_t p = 0;
    for (Span s : ColumnsToCheck(n)) {
      const int64_t width = s.end - s.begin;
      want.insert(want.end(), parts[p].begin() + r * width,
                  parts[p].begin() + (r + 1) * width);
      ++p;
    }
  }
  return want;
}

std::vector<float> SelectColumns(const std::vector<float>& out, int64_t m,
                                 int64_t n) {
  std::vector<float> sel;
  for (int64_t r = 0; r < m; ++r) {
    for (Span s : ColumnsToCheck(n)) {
      sel.insert(sel.end(), out.begin() + r * n + s.begin,
                 out.begin() + r * n + s.end);
    }
  }
  return sel;
}

struct Path {
  const char* name;
  BackendAndStream* bs;
  double tol;
  // The path must be cuBLASLt (counted, no fallback) for aligned shapes.
  bool expect_lt;
};

// One MatMul on every path, against one reference.
void CheckMatMul(const std::vector<Path>& paths, int64_t m, int64_t k,
                 int64_t n, bool bias, Rng& rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " k=", k, " n=", n, " bias=", bias));
  auto x = rng.F32(m * k);
  auto w = n * k > (int64_t{16} << 20) ? rng.Bf16Tiled(n * k) : rng.Bf16(n * k);
  auto b = rng.Bf16(n);
  const std::vector<float> want =
      RefMatMulColumns(x, w, bias ? b.data() : nullptr, m, k, n);
  DeviceBuf<float> dx(x);
  DeviceBuf<bf16> dw(w), db(b);
  for (const Path& p : paths) {
    SCOPED_TRACE(p.name);
    DeviceBuf<float> dout(Nans(m * n));
    const int64_t lt_before = p.bs->backend->lt_gemm_count();
    const int64_t fb_before = p.bs->backend->lt_fallback_count();
    ASSERT_TRUE(p.bs->backend
                    ->MatMul(*p.bs->stream, dx.View({m, k}), dw.View({n, k}),
                             bias ? db.View({n}) : Tensor(), dout.View({m, n}))
                    .ok());
    ASSERT_TRUE(p.bs->stream->Synchronize().ok());
    const std::vector<float> got = dout.ToHost();
    EXPECT_TRUE(AllFinite(got));  // Every element written.
    EXPECT_TRUE(Close(SelectColumns(got, m, n), want, p.tol));
    if (p.expect_lt && k % 8 == 0 && m > 0) {
      EXPECT_EQ(p.bs->backend->lt_gemm_count(), lt_before + 1);
      EXPECT_EQ(p.bs->backend->lt_fallback_count(), fb_before);
    }
  }
}

std::vector<Path> BothPaths(BackendAndStream& gemv, BackendAndStream& lt) {
  return {{"gemv", &gemv, kTolDot, false},
          {"cublaslt", &lt, kTolSplitBf16Dot, true}};
}

TEST_F(CudaOps, MatMulModelShapesOnBothPaths) {
  Rng rng(2);
  // (k, n) of real projections.
  const std::pair<int64_t, int64_t> shapes[] = {
      {256, 256},    // demo q / o
      {256, 128},    // demo k / v
      {256, 768},    // demo expert gate + up
      {384, 256},    // demo expert down
      {256, 4096},   // demo lm_head
      {2048, 2048},  // Qwen q / k / v / o
      {2048, 2816},  // Qwen expert gate + up
      {1408, 2048},  // Qwen expert down
      {2048, 60},    // Qwen router
      {4096, 1024},  // Mixtral k / v
  };
  int i = 0;
  for (auto [k, n] : shapes) {
    for (int64_t m : {1, 7, 16, 64, 300}) {
      if (m == 300 && k * std::min<int64_t>(n, 256) > 384 * 256) continue;
      CheckMatMul(BothPaths(gemv_, lt_), m, k, n, ++i % 2 == 0, rng);
    }
  }
}

TEST_F(CudaOps, MatMulMixtralExpertAndLmHead) {
  Rng rng(3);
  for (int64_t m : {1, 16, 64}) {
    CheckMatMul(BothPaths(gemv_, lt_), m, 4096, 14336, false, rng);    // w1/w3
    CheckMatMul(BothPaths(gemv_, lt_), m, 14336, 4096, m == 16, rng);  // w2
  }
  // Qwen lm_head: 151936 output columns (a grid of 19k blocks on the GEMV).
  for (int64_t m : {1, 16}) {
    CheckMatMul(BothPaths(gemv_, lt_), m, 2048, 151936, false, rng);
  }
}

TEST_F(CudaOps, MatMulTailsAndBias) {
  Rng rng(4);
  // k not a multiple of 8: the GEMV's scalar path; cuBLASLt may fall back.
  for (int64_t k : {1, 7, 9, 37, 263}) {
    for (int64_t n : {1, 13, 130}) {
      for (int64_t m : {1, 16, 17, 33}) {
        CheckMatMul(BothPaths(gemv_, lt_), m, k, n, true, rng);
      }
    }
  }
  CheckMatMul(BothPaths(gemv_, lt_), 0, 64, 8, true, rng);
}

TEST_F(CudaOps, MatMulDefaultThresholdPicksThePath) {
  Rng rng(5);
  const int64_t k = 256, n = 256;
  for (int64_t m : {1, 15, 16, 64}) {
    const int64_t before = B().lt_gemm_count();
    CheckMatMul(
        {{"default", &def_, m < 16 ? kTolDot : kTolSplitBf16Dot, false}}, m, k,
        n, true, rng);
    EXPECT_EQ(B().lt_gemm_count(), before + (m >= 16 ? 1 : 0)) << m;
  }
  EXPECT_EQ(gemv_.backend->lt_gemm_count(), 0);
}

TEST_F(CudaOps, MatMulCublasLtChunksRowsThatDoNotFitTheSplitBuffer) {
  // 5000 -> 5120 split elements: 20 rows of k = 256 or 2 of k = 2048 a chunk.
  auto small = MakeBackend({.lt_min_m = 1, .lt_split_elems = 5000});
  ASSERT_TRUE(small.ok()) << small.status();
  Rng rng(6);
  const std::vector<Path> chunked = {
      {"chunked", &*small, kTolSplitBf16Dot, true}};
  CheckMatMul(chunked, 300, 256, 768, true, rng);   // 15 chunks.
  CheckMatMul(chunked, 37, 2048, 256, false, rng);  // 19, last of 1 row.
  // A single row of k = 8192 does not fit: the GEMV serves it.
  const int64_t fb = small->backend->lt_fallback_count();
  CheckMatMul({{"too wide", &*small, kTolDot, false}}, 16, 8192, 64, true, rng);
  EXPECT_EQ(small->backend->lt_fallback_count(), fb + 1);
}

// ---------------------------------------------------------------- ExpertFfn

void CheckExpertFfn(const std::vector<Path>& paths, int64_t m, int64_t hidden,
                    int64_t ffn, Rng& rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " hidden=", hidden, " ffn=", ffn));
  auto x = rng.F32(m * hidden);
  // Scaled like a trained model so silu sees both signs and magnitudes.
  auto blob = rng.Bf16(3 * ffn * hidden, -0.1f, 0.1f);
  std::vector<float> want(m * hidden);
  ref::ExpertFfn(H(x, {m, hidden}), H(blob, {3 * ffn * hidden}), ffn,
                 H(want, {m, hidden}));
  DeviceBuf<float> dx(x), dws(Nans(ExpertFfnWorkspaceElems(m, ffn)));
  DeviceBuf<bf16> dblob(blob);
  for (const Path& p : paths) {
    SCOPED_TRACE(p.name);
    DeviceBuf<float> dout(Nans(m * hidden));
    const int64_t lt_before = p.bs->backend->lt_gemm_count();
    ASSERT_TRUE(p.bs->backend
                    ->ExpertFfn(*p.bs->stream, dx.View({m, hidden}),
                                dblob.View({3 * ffn * hidden}), ffn,
                                dws.View({ExpertFfnWorkspaceElems(m, ffn)}),
                                dout.View({m, hidden}))
                    .ok());
    ASSERT_TRUE(p.bs->stream->Synchronize().ok());
    EXPECT_TRUE(Close(dout.ToHost(), want, p.tol));
    if (p.expect_lt) {  // gate+up and down: two GEMMs.
      EXPECT_EQ(p.bs->backend->lt_gemm_count(), lt_before + 2);
    }
  }
}

TEST_F(CudaOps, ExpertFfn) {
  Rng rng(7);
  for (int64_t m : {1, 40}) {
    std::vector<Path> paths = BothPaths(gemv_, lt_);
    paths.push_back(
        {"default", &def_, m >= 16 ? kTolSplitBf16Dot : kTolDot, m >= 16});
    CheckExpertFfn(paths, m, 256, 384, rng);    // demo
    CheckExpertFfn(paths, m, 2048, 1408, rng);  // Qwen
  }
}

// ---------------------------------------------------------------- Int4

struct Int4Weights {
  std::vector<uint8_t> wq;
  std::vector<bf16> scales;
};

Int4Weights Quantize(Rng& rng, int64_t n, int64_t k, int64_t group) {
  auto w = rng.Bf16(n * k, -0.2f, 0.2f);
  Int4Weights q{Zeros<uint8_t>(n * k / 2), Zeros<bf16>(n * (k / group))};
  absl::Status st = ref::QuantizeInt4(H(w, {n, k}), group,
                                      Tensor(q.wq.data(), DType::kI4, {n, k}),
                                      H(q.scales, {n, k / group}));
  EXPECT_TRUE(st.ok()) << st;
  return q;
}

void CheckMatMulInt4(CudaBackend& b, Stream& s, int64_t m, int64_t k, int64_t n,
                     int64_t group, int64_t offset, Rng& rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " k=", k, " n=", n, " group=", group,
                            " offset=", offset));
  Int4Weights q = Quantize(rng, n, k, group);
  auto x = rng.F32(m * k, -2, 2);
  std::vector<float> want(m * n);
  ref::MatMulInt4Reference(H(x, {m, k}),
                           Tensor(q.wq.data(), DType::kI4, {n, k}),
                           H(q.scales, {n, k / group}), group, H(want, {m, n}));
  // offset > 0 moves x and wq off 16-byte alignment: the scalar path.
  DeviceBuf<float> dx(x, offset * 4);
  DeviceBuf<uint8_t> dwq(q.wq, offset);
  DeviceBuf<bf16> dscales(q.scales);
  DeviceBuf<float> dout(Nans(m * n));
  ASSERT_TRUE(b.MatMulInt4(s, dx.View({m, k}), dwq.View(DType::kI4, {n, k}),
                           dscales.View({n, k / group}), group,
                           dout.View({m, n}))
                  .ok());
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_TRUE(Close(dout.ToHost(), want, kTolInt4Dot));
}

TEST_F(CudaOps, MatMulInt4) {
  Rng rng(8);
  for (int64_t m : {1, 7, 16, 64}) {
    CheckMatMulInt4(B(), S(), m, 256, 384, 64, 0, rng);     // demo
    CheckMatMulInt4(B(), S(), m, 2048, 1408, 128, 0, rng);  // Qwen
  }
  for (int64_t m : {1, 9}) {
    CheckMatMulInt4(B(), S(), m, 1408, 2048, 64, 0, rng);
    CheckMatMulInt4(B(), S(), m, 4096, 256, 128, 0, rng);
    CheckMatMulInt4(B(), S(), m, 2048, 130, 64, 3, rng);  // Scalar.
    CheckMatMulInt4(B(), S(), m, 128, 5, 128, 1, rng);
  }
}

// ------------------------------------- Quantized GEMVs on the raw launchers

// The reference of a quantized matrix on the checked columns (ColumnsToCheck):
// `deq(j, c)` is the host's dequantised weight (Int4At / Fp8At); double sums.
template <typename Deq>
std::vector<float> RefQuantColumns(const std::vector<float>& x, int64_t m,
                                   int64_t k, int64_t n, Deq deq) {
  std::vector<int64_t> cols;
  for (Span s : ColumnsToCheck(n)) {
    for (int64_t j = s.begin; j < s.end; ++j) cols.push_back(j);
  }
  std::vector<float> w(cols.size() * k);
  for (size_t i = 0; i < cols.size(); ++i) {
    for (int64_t c = 0; c < k; ++c) w[i * k + c] = deq(cols[i], c);
  }
  std::vector<float> want(m * cols.size());
  for (int64_t r = 0; r < m; ++r) {
    for (size_t i = 0; i < cols.size(); ++i) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) {
        acc += static_cast<double>(x[r * k + c]) * w[i * k + c];
      }
      want[r * cols.size() + i] = static_cast<float>(acc);
    }
  }
  return want;
}

// Rows `rows` of x [m, k] alone through `launch(x, rows, out)` must give
// the rows of the m-row result bit for bit: a row's arithmetic does not
// depend on how many rows share the launch (what makes ExpertFfnGrouped
// equal the per-expert ops).
template <typename Launch>
void ExpectRowsIndependentOfM(const std::vector<float>& x, int64_t m, int64_t k,
                              int64_t n, const std::vector<float>& got,
                              Launch launch) {
  for (int64_t r : {int64_t{0}, m - 1}) {
    DeviceBuf<float> dx(
        std::vector<float>(x.begin() + r * k, x.begin() + (r + 1) * k));
    DeviceBuf<float> dout(Nans(n));
    ASSERT_EQ(launch(static_cast<const float*>(dx.data()), 1,
                     static_cast<float*>(dout.data())),
              0);
    const std::vector<float> alone = dout.ToHost();  // Synchronous copy.
    int64_t differ = 0;
    for (int64_t j = 0; j < n; ++j) {
      differ += std::memcmp(&alone[j], &got[r * n + j], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "row " << r << " alone vs with " << m << " rows";
  }
}

// A random int4 matrix [n, k] in the expert format's part layout: any
// nibble, scales in +-0.02 (bf16 or fp16), zero points in [0, 16].
struct HostInt4 {
  std::vector<uint8_t> q, zeros;
  std::vector<uint16_t> scales;
  Int4Matrix View(Int4ScaleType t, int64_t n, int64_t k, int64_t group) const {
    return {
        q.data(), scales.data(), zeros.empty() ? nullptr : zeros.data(), t, n,
        k,        group};
  }
};

HostInt4 RandomInt4(Rng& rng, int64_t n, int64_t k, int64_t group,
                    const Int4ExpertOptions& o) {
  HostInt4 h;
  h.q.resize(n * k / 2);
  for (uint8_t& b : h.q) b = static_cast<uint8_t>(rng.Int(256));
  h.scales.resize(n * (k / group));
  for (uint16_t& s : h.scales) {
    const float v = rng.Uniform(-0.02f, 0.02f);
    s = o.scale_type == Int4ScaleType::kF16 ? FloatToF16(v) : FloatToBf16(v);
  }
  if (o.zeros) {
    h.zeros.resize(n * (k / group));
    for (uint8_t& z : h.zeros) z = static_cast<uint8_t>(rng.Int(17));
  }
  return h;
}

void CheckGemvInt4(int64_t m, int64_t k, int64_t n, int64_t group,
                   const Int4ExpertOptions& o, Rng& rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " k=", k, " n=", n, " group=", group,
                            " scales=", Int4ScaleTypeName(o.scale_type),
                            " zeros=", o.zeros));
  const HostInt4 h = RandomInt4(rng, n, k, group, o);
  const Int4Matrix w = h.View(o.scale_type, n, k, group);
  auto x = rng.F32(m * k, -2, 2);
  const std::vector<float> want = RefQuantColumns(
      x, m, k, n, [&](int64_t j, int64_t c) { return Int4At(w, j, c); });
  DeviceBuf<uint8_t> dq(h.q), dz(o.zeros ? h.zeros : Zeros<uint8_t>(1));
  DeviceBuf<uint16_t> ds(h.scales);
  auto launch = [&](const float* dx, int64_t rows, float* out) {
    return LaunchMatMulInt4(
        dx, rows, k, static_cast<const uint8_t*>(dq.data()),
        static_cast<const uint16_t*>(ds.data()),
        o.scale_type == Int4ScaleType::kF16,
        o.zeros ? static_cast<const uint8_t*>(dz.data()) : nullptr, group, n,
        out, nullptr);
  };
  DeviceBuf<float> dx(x), dout(Nans(m * n));
  ASSERT_EQ(launch(static_cast<const float*>(dx.data()), m,
                   static_cast<float*>(dout.data())),
            0);
  const std::vector<float> got = dout.ToHost();  // Synchronous copy.
  EXPECT_TRUE(AllFinite(got));                   // Every element written.
  EXPECT_TRUE(Close(SelectColumns(got, m, n), want, kTolInt4Dot));
  if (m > 1) ExpectRowsIndependentOfM(x, m, k, n, got, launch);
}

// (k, n) of the projections the bf16 GEMV is tested at
// (MatMulModelShapesOnBothPaths), every m from 1 to 9 and the pass
// boundaries up to 40, groups 32 / 64 / 128 / k, the checkpoint options
// (fp16 scales + zeros: GPTQ / AWQ) and the draft's (bf16, symmetric).
TEST_F(CudaOps, GemvInt4ModelShapes) {
  Rng rng(33);
  const std::pair<int64_t, int64_t> shapes[] = {
      {256, 256},   {256, 128},   {256, 768},   {384, 256}, {256, 4096},
      {2048, 2048}, {2048, 2816}, {1408, 2048}, {2048, 60}, {4096, 1024}};
  const Int4ExpertOptions options[] = {{Int4ScaleType::kF16, true},
                                       {Int4ScaleType::kBf16, false}};
  for (auto [k, n] : shapes) {
    const bool small = k * n <= 384 * 256;
    for (int64_t group : {int64_t{32}, int64_t{64}, int64_t{128}, k}) {
      if (k % group != 0) continue;
      for (const Int4ExpertOptions& o : options) {
        for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 33, 40}) {
          if (!small && m != 1 && m != 4 && m != 8 && m != 17 && m != 40) {
            continue;
          }
          CheckGemvInt4(m, k, n, group, o, rng);
        }
      }
    }
  }
}

// Mixtral's expert (w1 / w3 [14336, 4096], w2 [4096, 14336]) at decode and
// a prefill chunk, and the scalar path: groups 16 and 40, tails of k.
TEST_F(CudaOps, GemvInt4MixtralAndScalarPath) {
  Rng rng(34);
  const Int4ExpertOptions fp16_zeros = {Int4ScaleType::kF16, true};
  const Int4ExpertOptions bf16_sym = {Int4ScaleType::kBf16, false};
  for (int64_t m : {1, 8, 16}) {
    CheckGemvInt4(m, 4096, 14336, 128, bf16_sym, rng);
    CheckGemvInt4(m, 14336, 4096, 128, fp16_zeros, rng);
  }
  for (const Int4ExpertOptions& o : {fp16_zeros, bf16_sym}) {
    for (int64_t m : {1, 3, 8, 9, 17, 40}) {
      CheckGemvInt4(m, 144, 96, 16, o, rng);  // groups of 16
      CheckGemvInt4(m, 40, 130, 40, o, rng);  // group == k == 40
      for (int64_t k : {2, 6, 38, 262}) CheckGemvInt4(m, k, 13, k, o, rng);
      CheckGemvInt4(m, 262, 13, 2, o, rng);  // the smallest group
    }
  }
}

// A random fp8 matrix [n, k] with tile (tr, tc): codes anything but NaN,
// scales in [1e-3, 1e-2].
void CheckGemvFp8(int64_t m, int64_t k, int64_t n, int64_t tr, int64_t tc,
                  Rng& rng) {
  SCOPED_TRACE(
      absl::StrCat("m=", m, " k=", k, " n=", n, " tile=", tr, "x", tc));
  std::vector<uint8_t> q(n * k);
  for (uint8_t& b : q) {
    b = static_cast<uint8_t>(rng.Int(256));
    if ((b & 0x7f) == 0x7f) b = 0x3a;
  }
  std::vector<float> scales(((n + tr - 1) / tr) * ((k + tc - 1) / tc));
  for (float& f : scales) f = rng.Uniform(1e-3f, 1e-2f);
  const Fp8Matrix w{q.data(), scales.data(), n, k, tr, tc};
  auto x = rng.F32(m * k, -2, 2);
  const std::vector<float> want = RefQuantColumns(
      x, m, k, n, [&](int64_t j, int64_t c) { return Fp8At(w, j, c); });
  DeviceBuf<uint8_t> dq(q);
  DeviceBuf<float> dscales(scales);
  auto launch = [&](const float* dx, int64_t rows, float* out) {
    return LaunchMatMulFp8(dx, rows, k, static_cast<const uint8_t*>(dq.data()),
                           static_cast<const float*>(dscales.data()), tr, tc, n,
                           out, nullptr);
  };
  DeviceBuf<float> dx(x), dout(Nans(m * n));
  ASSERT_EQ(launch(static_cast<const float*>(dx.data()), m,
                   static_cast<float*>(dout.data())),
            0);
  const std::vector<float> got = dout.ToHost();  // Synchronous copy.
  EXPECT_TRUE(AllFinite(got));
  EXPECT_TRUE(Close(SelectColumns(got, m, n), want, kTolDot));
  if (m > 1) ExpectRowsIndependentOfM(x, m, k, n, got, launch);
}

// The bf16 GEMV's shapes again, with the fp8 checkpoints' scale tiles:
// 128 x 128 blocks (partial where 128 does not divide), per channel, per
// tensor; plus tiles that take the scalar path and tails of k.
TEST_F(CudaOps, GemvFp8ModelShapes) {
  Rng rng(35);
  constexpr int64_t kWhole = kFp8Whole;
  const std::pair<int64_t, int64_t> shapes[] = {
      {256, 256},   {256, 128},   {256, 768},   {384, 256}, {256, 4096},
      {2048, 2048}, {2048, 2816}, {1408, 2048}, {2048, 60}, {4096, 1024}};
  const std::pair<int64_t, int64_t> tiles[] = {
      {128, 128}, {1, kWhole}, {kWhole, kWhole}};
  for (auto [k, n] : shapes) {
    const bool small = k * n <= 384 * 256;
    for (auto [br, bc] : tiles) {
      const int64_t tr = std::min(br, n), tc = std::min(bc, k);
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 33, 40}) {
        if (!small && m != 1 && m != 4 && m != 8 && m != 17 && m != 40) {
          continue;
        }
        CheckGemvFp8(m, k, n, tr, tc, rng);
      }
    }
  }
  for (int64_t m : {1, 8, 16}) {
    CheckGemvFp8(m, 4096, 14336, 128, 128, rng);  // Mixtral w1 / w3
    CheckGemvFp8(m, 14336, 4096, 128, 128, rng);  // w2
  }
  for (int64_t m : {1, 3, 9, 40}) {
    CheckGemvFp8(m, 300, 200, 128, 128, rng);  // partial tiles
    CheckGemvFp8(m, 272, 37, 4, 136, rng);     // tile_cols 136: scalar
    for (int64_t k : {1, 7, 9, 37, 263}) CheckGemvFp8(m, k, 13, 5, k, rng);
  }
}

// ----------------------------------------------------------- ExpertFfnFp8

// A random expert quantized to fp8 on the host (fp8_expert.h) and copied to
// the device; the op against ref::ExpertFfnFp8 on the host copy. The
// dequantised weights are the CPU's bit for bit, so kTolDot.
void CheckExpertFfnFp8(CudaBackend& b, Stream& s, int64_t m, int64_t hidden,
                       int64_t ffn, int64_t br, int64_t bc, Rng& rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " hidden=", hidden, " ffn=", ffn,
                            " tile=", br, "x", bc));
  absl::StatusOr<Fp8ExpertLayout> layout =
      MakeFp8ExpertLayout(hidden, ffn, br, bc);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto w = rng.Bf16(3 * ffn * hidden, -0.1f, 0.1f);
  auto blob = Zeros<uint8_t>(layout->bytes);
  QuantizeExpertFp8(w.data(), *layout,
                    reinterpret_cast<std::byte*>(blob.data()));
  auto x = rng.F32(m * hidden);
  std::vector<float> want(m * hidden);
  ref::ExpertFfnFp8(H(x, {m, hidden}), H(blob, {layout->bytes}), *layout,
                    H(want, {m, hidden}));
  DeviceBuf<float> dx(x), dws(Nans(ExpertFfnWorkspaceElems(m, ffn)));
  DeviceBuf<uint8_t> dblob(blob);
  DeviceBuf<float> dout(Nans(m * hidden));
  absl::Status st = b.ExpertFfnFp8(
      s, dx.View({m, hidden}), dblob.View({layout->bytes}), *layout,
      dws.View({ExpertFfnWorkspaceElems(m, ffn)}), dout.View({m, hidden}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_TRUE(Close(dout.ToHost(), want, kTolDot));
}

TEST_F(CudaOps, ExpertFfnFp8) {
  Rng rng(31);
  constexpr int64_t kWhole = kFp8Whole;
  for (int64_t m : {1, 3, 8, 17}) {
    CheckExpertFfnFp8(B(), S(), m, 256, 96, 128, 128, rng);   // demo, blocks
    CheckExpertFfnFp8(B(), S(), m, 256, 96, 1, kWhole, rng);  // per channel
    CheckExpertFfnFp8(B(), S(), m, 256, 96, kWhole, kWhole, rng);  // tensor
    CheckExpertFfnFp8(B(), S(), m, 200, 300, 128, 128, rng);       // Partial.
    CheckExpertFfnFp8(B(), S(), m, 52, 37, 16, 40, rng);  // Scalar path.
  }
  // The bf16 ExpertFfn's shapes and row counts (demo, Qwen at m = 1, 40).
  for (int64_t m : {1, 40}) {
    CheckExpertFfnFp8(B(), S(), m, 256, 384, 128, 128, rng);
    CheckExpertFfnFp8(B(), S(), m, 2048, 1408, 128, 128, rng);  // Qwen
  }
  CheckExpertFfnFp8(B(), S(), 1, 4096, 14336, 128, 128, rng);  // Mixtral
}

// Every finite code through the kernel's decode, on both paths: x = the
// identity, so out[r, j] is weight (j, r) alone, the CPU's value exactly.
TEST_F(CudaOps, MatMulFp8DecodesEveryCodeExactly) {
  for (auto [k, tile_cols] : {std::pair<int64_t, int64_t>{256, 128},
                              {272, 136}}) {  // 136: the scalar path.
    SCOPED_TRACE(absl::StrCat("k=", k, " tile_cols=", tile_cols));
    const int64_t n = 6;
    auto q = Zeros<uint8_t>(n * k);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < k; ++c) {
        uint8_t code = static_cast<uint8_t>((c + 37 * j) % 256);
        if ((code & 0x7f) == 0x7f) code = 0x41;
        q[j * k + c] = code;
      }
    }
    std::vector<float> scales = {0.0123f, -3.5f, 1e-30f, 7.0f};  // [2, 2]
    auto x = Zeros<float>(k * k);
    for (int64_t r = 0; r < k; ++r) x[r * k + r] = 1.0f;
    DeviceBuf<uint8_t> dq(q);
    DeviceBuf<float> dscales(scales), dx(x), dout(Nans(k * n));
    ASSERT_EQ(
        LaunchMatMulFp8(static_cast<const float*>(dx.data()), k, k,
                        static_cast<const uint8_t*>(dq.data()),
                        static_cast<const float*>(dscales.data()), 4, tile_cols,
                        n, static_cast<float*>(dout.data()), nullptr),
        0);
    const std::vector<float> got = dout.ToHost();  // Synchronous copy.
    const Fp8Matrix w{q.data(), scales.data(), n, k, 4, tile_cols};
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(got[r * n + j], Fp8At(w, j, r))
            << "weight (" << j << ", " << r << ") code " << int{q[j * k + r]};
      }
    }
  }
}

// Grouped fp8 experts run the quantized GEMV of ExpertFfnFp8 over all groups
// at once: each row bit for bit what ExpertFfnFp8 gives it alone.
TEST_F(CudaOps, ExpertFfnGroupedFp8MatchesPerExpert) {
  Rng rng(32);
  const int64_t hidden = 256, ffn = 96, n = 4;
  absl::StatusOr<Fp8ExpertLayout> layout =
      MakeFp8ExpertLayout(hidden, ffn, 128, 128);
  ASSERT_TRUE(layout.ok());
  auto blob = Zeros<uint8_t>(2 * layout->bytes);
  for (int e = 0; e < 2; ++e) {
    QuantizeExpertFp8(
        rng.Bf16(3 * ffn * hidden, -0.1f, 0.1f).data(), *layout,
        reinterpret_cast<std::byte*>(blob.data()) + e * layout->bytes);
  }
  auto x = rng.F32(n * hidden);
  std::vector<int32_t> rows = {0, 2, 1, 2, 3};
  const int64_t pairs = rows.size();
  DeviceBuf<uint8_t> dblob(blob);
  DeviceBuf<float> dx(x), dout(Nans(pairs * hidden)),
      dws(Nans(GroupedExpertWorkspaceElems(pairs, ffn, hidden)));
  DeviceBuf<int32_t> drows(rows);
  auto* base = static_cast<const uint8_t*>(dblob.data());
  const ExpertGroup groups[] = {{base, 0, 2}, {base + layout->bytes, 2, 3}};
  GroupedExperts call;
  call.x = dx.View({n, hidden});
  call.rows = drows.View({pairs});
  call.groups = groups;
  call.fp8 = &*layout;
  ASSERT_TRUE(B().ExpertFfnGrouped(S(), call,
                                   dws.View({GroupedExpertWorkspaceElems(
                                       pairs, ffn, hidden)}),
                                   dout.View({pairs, hidden}))
                  .ok());
  ASSERT_TRUE(S().Synchronize().ok());
  const std::vector<float> grouped = dout.ToHost();
  for (int64_t p = 0; p < pairs; ++p) {
    const ExpertGroup& g = groups[p < 2 ? 0 : 1];
    DeviceBuf<float> xr(std::vector<float>(x.begin() + rows[p] * hidden,
                                           x.begin() + (rows[p] + 1) * hidden));
    DeviceBuf<float> one(Nans(hidden)), ws(Nans(3 * ffn));
    Tensor b(const_cast<void*>(g.blob), DType::kU8, {layout->bytes},
             Device::kCuda);
    ASSERT_TRUE(B().ExpertFfnFp8(S(), xr.View({1, hidden}), b, *layout,
                                 ws.View({3 * ffn}), one.View({1, hidden}))
                    .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    const std::vector<float> alone = one.ToHost();
    EXPECT_TRUE(
        std::equal(alone.begin(), alone.end(), grouped.begin() + p * hidden))
        << "pair " << p;
  }
}

// ---------------------------------------------------------- ExpertFfnInt4

// A random expert quantized on the host (int4_expert.h) and copied to the
// device; the op against ref::ExpertFfnInt4 on the host copy.
void CheckExpertFfnInt4(CudaBackend& b, Stream& s, int64_t m, int64_t hidden,
                        int64_t ffn, Rng& rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " hidden=", hidden, " ffn=", ffn));
  absl::StatusOr<Int4ExpertLayout> layout = MakeInt4ExpertLayout(hidden, ffn);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto w = rng.Bf16Tiled(3 * ffn * hidden, int64_t{1} << 20, -0.1f, 0.1f);
  auto blob = Zeros<uint8_t>(layout->bytes);
  QuantizeExpertInt4(w.data(), *layout,
                     reinterpret_cast<std::byte*>(blob.data()));
  auto x = rng.F32(m * hidden);
  std::vector<float> want(m * hidden);
  ref::ExpertFfnInt4(H(x, {m, hidden}), H(blob, {layout->bytes}), *layout,
                     H(want, {m, hidden}));
  DeviceBuf<float> dx(x), dws(Nans(ExpertFfnWorkspaceElems(m, ffn)));
  DeviceBuf<uint8_t> dblob(blob);
  DeviceBuf<float> dout(Nans(m * hidden));
  absl::Status st = b.ExpertFfnInt4(
      s, dx.View({m, hidden}), dblob.View({layout->bytes}), *layout,
      dws.View({ExpertFfnWorkspaceElems(m, ffn)}), dout.View({m, hidden}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_TRUE(Close(dout.ToHost(), want, kTolInt4Dot));
}

TEST_F(CudaOps, ExpertFfnInt4) {
  Rng rng(9);
  for (int64_t m : {1, 3, 8, 17}) {
    CheckExpertFfnInt4(B(), S(), m, 256, 96, rng);   // demo, group_out 32
    CheckExpertFfnInt4(B(), S(), m, 256, 128, rng);  // demo, group_out 128
    CheckExpertFfnInt4(B(), S(), m, 144, 40, rng);   // groups 16, 40: scalar
  }
  // The bf16 ExpertFfn's shapes and row counts (demo, Qwen at m = 1, 40).
  for (int64_t m : {1, 40}) {
    CheckExpertFfnInt4(B(), S(), m, 256, 384, rng);
    CheckExpertFfnInt4(B(), S(), m, 2048, 1408, rng);  // Qwen
  }
  CheckExpertFfnInt4(B(), S(), 1, 4096, 14336, rng);  // Mixtral
}

// A checkpoint's int4 expert (fp16 or bf16 scales, zero points or not;
// engine/quant/int4_import.h): every nibble, scale and zero point random
// (zeros 0..16), on the device against ref::ExpertFfnInt4 on the host copy.
void CheckExpertFfnInt4Checkpoint(CudaBackend& b, Stream& s, int64_t m,
                                  int64_t hidden, int64_t ffn, int64_t group_in,
                                  int64_t group_out, Int4ExpertOptions options,
                                  Rng& rng) {
  SCOPED_TRACE(absl::StrCat("m=", m, " hidden=", hidden, " ffn=", ffn,
                            " groups=", group_in, "/", group_out,
                            " scales=", Int4ScaleTypeName(options.scale_type),
                            " zeros=", options.zeros));
  absl::StatusOr<Int4ExpertLayout> layout =
      Int4ExpertLayoutWithOptions(hidden, ffn, group_in, group_out, options);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto blob = Zeros<uint8_t>(layout->bytes);
  auto* base = reinterpret_cast<std::byte*>(blob.data());
  for (Int4Part part : {Int4Part::kGate, Int4Part::kUp, Int4Part::kDown}) {
    const Int4Matrix w = Int4ExpertPart(base, *layout, part);
    auto* q = const_cast<uint8_t*>(w.q);
    for (int64_t i = 0; i < w.rows * w.cols / 2; ++i) q[i] = rng.Int(256);
    auto* scales = const_cast<uint16_t*>(w.scales);
    const int64_t groups = w.rows * w.groups_per_row();
    for (int64_t i = 0; i < groups; ++i) {
      const float v = rng.Uniform(-0.02f, 0.02f);
      scales[i] = options.scale_type == Int4ScaleType::kF16 ? FloatToF16(v)
                                                            : FloatToBf16(v);
    }
    if (w.zeros != nullptr) {
      auto* zeros = const_cast<uint8_t*>(w.zeros);
      for (int64_t i = 0; i < groups; ++i) zeros[i] = rng.Int(17);
    }
  }
  auto x = rng.F32(m * hidden);
  std::vector<float> want(m * hidden);
  ref::ExpertFfnInt4(H(x, {m, hidden}), H(blob, {layout->bytes}), *layout,
                     H(want, {m, hidden}));
  DeviceBuf<float> dx(x), dws(Nans(ExpertFfnWorkspaceElems(m, ffn)));
  DeviceBuf<uint8_t> dblob(blob);
  DeviceBuf<float> dout(Nans(m * hidden));
  absl::Status st = b.ExpertFfnInt4(
      s, dx.View({m, hidden}), dblob.View({layout->bytes}), *layout,
      dws.View({ExpertFfnWorkspaceElems(m, ffn)}), dout.View({m, hidden}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_TRUE(Close(dout.ToHost(), want, kTolInt4Dot));
}

TEST_F(CudaOps, ExpertFfnInt4CheckpointLayouts) {
  Rng rng(10);
  const Int4ExpertOptions options[] = {{Int4ScaleType::kF16, true},
                                       {Int4ScaleType::kF16, false},
                                       {Int4ScaleType::kBf16, true}};
  for (const Int4ExpertOptions& o : options) {
    for (int64_t m : {1, 3, 8, 17}) {
      // Demo shape with group 128 / one group per down row (k = 96), groups
      // 64 / 32, 32 / 32 (vector path), 16 / 40 (scalar path).
      CheckExpertFfnInt4Checkpoint(B(), S(), m, 256, 96, 128, 96, o, rng);
      CheckExpertFfnInt4Checkpoint(B(), S(), m, 256, 128, 64, 32, o, rng);
      CheckExpertFfnInt4Checkpoint(B(), S(), m, 256, 96, 32, 32, o, rng);
      CheckExpertFfnInt4Checkpoint(B(), S(), m, 144, 40, 16, 40, o, rng);
    }
    // Qwen1.5-MoE's expert at group 128, decode and a prefill chunk.
    CheckExpertFfnInt4Checkpoint(B(), S(), 1, 2048, 1408, 128, 128, o, rng);
    CheckExpertFfnInt4Checkpoint(B(), S(), 40, 2048, 1408, 128, 128, o, rng);
  }
}

TEST_F(CudaOps, ExpertFfnInt4RefusalsNameTheArgument) {
  const int64_t m = 2, hidden = 32, ffn = 16;
  absl::StatusOr<Int4ExpertLayout> layout = MakeInt4ExpertLayout(hidden, ffn);
  ASSERT_TRUE(layout.ok());
  const int64_t ws_elems = ExpertFfnWorkspaceElems(m, ffn);
  DeviceBuf<float> x(Zeros<float>(m * hidden)), out(Zeros<float>(m * hidden)),
      ws(Zeros<float>(ws_elems));
  DeviceBuf<uint8_t> blob(Zeros<uint8_t>(layout->bytes));
  DeviceBuf<uint8_t> unaligned(Zeros<uint8_t>(layout->bytes), 1);
  auto expect_invalid = [](absl::Status st, const std::string& word) {
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find(word), std::string::npos) << st;
  };
  EXPECT_TRUE(B().ExpertFfnInt4(S(), x.View({m, hidden}),
                                blob.View({layout->bytes}), *layout,
                                ws.View({ws_elems}), out.View({m, hidden}))
                  .ok());
  std::vector<uint8_t> host_blob(layout->bytes);
  expect_invalid(
      B().ExpertFfnInt4(S(), x.View({m, hidden}), H(host_blob, {layout->bytes}),
                        *layout, ws.View({ws_elems}), out.View({m, hidden})),
      "blob");
  expect_invalid(
      B().ExpertFfnInt4(S(), x.View({m, hidden}),
                        blob.View(DType::kBF16, {layout->bytes / 2}), *layout,
                        ws.View({ws_elems}), out.View({m, hidden})),
      "blob");
  expect_invalid(B().ExpertFfnInt4(S(), x.View({m, hidden}),
                                   unaligned.View({layout->bytes}), *layout,
                                   ws.View({ws_elems}), out.View({m, hidden})),
                 "aligned");
  Int4ExpertLayout bad = *layout;
  bad.bytes += 64;
  expect_invalid(
      B().ExpertFfnInt4(S(), x.View({m, hidden}), blob.View({layout->bytes}),
                        bad, ws.View({ws_elems}), out.View({m, hidden})),
      "layout");
  expect_invalid(B().ExpertFfnInt4(
                     S(), x.View({m, hidden}), blob.View({layout->bytes}),
                     *layout, ws.View({ws_elems - 1}), out.View({m, hidden})),
                 "workspace");
  ASSERT_TRUE(S().Synchronize().ok());
}

// ------------------------------------------------------- Elementwise ops

TEST_F(CudaOps, EmbeddingIncludingOutOfRangeIdsAreZeros) {
  Rng rng(9);
  for (auto [vocab, d] : std::vector<std::pair<int64_t, int64_t>>{
           {4096, 256}, {151936, 128}, {1001, 2048}}) {
    SCOPED_TRACE(absl::StrCat(vocab, "x", d));
    auto table = rng.Bf16(vocab * d);
    const int64_t n = 17;
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = rng.Int(vocab);
    ids[0] = 0;
    ids[1] = vocab - 1;
    std::vector<float> want(n * d);
    ref::Embedding(H(ids, {n}), H(table, {vocab, d}), H(want, {n, d}));
    // Out of range on the device: zeros (the CPU backend refuses them).
    ids.push_back(-1);
    ids.push_back(static_cast<int32_t>(vocab));
    ids.push_back(std::numeric_limits<int32_t>::max());
    want.resize((n + 3) * d, 0.0f);
    DeviceBuf<int32_t> dids(ids);
    DeviceBuf<bf16> dtable(table);
    DeviceBuf<float> dout(Nans((n + 3) * d));
    ASSERT_TRUE(B().Embedding(S(), dids.View({n + 3}), dtable.View({vocab, d}),
                              dout.View({n + 3, d}))
                    .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_EQ(dout.ToHost(), want);
  }
}

TEST_F(CudaOps, RmsNormIncludingPerHeadViewAndInPlace) {
  Rng rng(10);
  for (int64_t d : {256, 2048, 4096, 255}) {
    for (int64_t n : {1, 3, 17}) {
      SCOPED_TRACE(absl::StrCat(n, "x", d));
      auto x = rng.F32(n * d, -3, 3);
      auto w = rng.Bf16(d, 0.5f, 1.5f);
      std::vector<float> want(n * d);
      ref::RmsNorm(H(x, {n, d}), H(w, {d}), 1e-6f, H(want, {n, d}));
      DeviceBuf<float> dx(x), dout(Nans(n * d));
      DeviceBuf<bf16> dw(w);
      ASSERT_TRUE(B().RmsNorm(S(), dx.View({n, d}), dw.View({d}), 1e-6f,
                              dout.View({n, d}))
                      .ok());
      ASSERT_TRUE(B().RmsNorm(S(), dx.View({n, d}), dw.View({d}), 1e-6f,
                              dx.View({n, d}))
                      .ok());
      ASSERT_TRUE(S().Synchronize().ok());
      const std::vector<float> got = dout.ToHost();
      EXPECT_TRUE(Close(got, want, kTolPointwise));
      EXPECT_EQ(dx.ToHost(), got);  // In place gives the same result.
    }
  }
  // q/k norm (qwen3_moe, olmoe): [n, heads * hd] seen as [n * heads, hd].
  for (auto [heads, hd] : std::vector<std::pair<int64_t, int64_t>>{
           {8, 32}, {16, 128}, {32, 128}}) {
    const int64_t n = 5;
    auto q = rng.F32(n * heads * hd);
    auto w = rng.Bf16(hd, 0.5f, 1.5f);
    std::vector<float> want(q.size());
    Tensor view = *H(q, {n, heads * hd}).Reshape({n * heads, hd});
    ref::RmsNorm(view, H(w, {hd}), 1e-5f, H(want, {n * heads, hd}));
    DeviceBuf<float> dq(q), dout(Nans(q.size()));
    DeviceBuf<bf16> dw(w);
    Tensor dview = *dq.View({n, heads * hd}).Reshape({n * heads, hd});
    ASSERT_TRUE(B().RmsNorm(S(), dview, dw.View({hd}), 1e-5f,
                            dout.View({n * heads, hd}))
                    .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_TRUE(Close(dout.ToHost(), want, kTolPointwise)) << heads;
  }
}

TEST_F(CudaOps, RopeRotateHalf) {
  Rng rng(11);
  struct Case {
    int64_t heads, hd;
    float theta;
  };
  for (Case c : {Case{8, 32, 1e4f}, Case{4, 32, 1e4f}, Case{16, 128, 1e6f},
                 Case{32, 128, 1e6f}, Case{8, 128, 1e6f}, Case{8, 6, 1e4f}}) {
    SCOPED_TRACE(absl::StrCat(c.heads, "x", c.hd, " theta=", c.theta));
    const int64_t n = 17;
    auto x = rng.F32(n * c.heads * c.hd);
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = i < 2 ? i : rng.Int(32768);
    DeviceBuf<float> dx(x);
    DeviceBuf<int32_t> dpos(pos);
    ASSERT_TRUE(B().RopeRotateHalf(S(), dx.View({n, c.heads, c.hd}),
                                   dpos.View({n}), c.theta)
                    .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    ref::RopeRotateHalf(H(x, {n, c.heads, c.hd}), H(pos, {n}), c.theta);
    EXPECT_TRUE(Close(dx.ToHost(), x, kTolPointwise));
  }
}

// A paged cache with shuffled blocks and sequences of different lengths: two
// decoding (one query, one of them long), one prefilling a chunk after
// cached tokens, one fresh prompt, one single-token prompt. KvWrite writes
// every cached position, plus a padding row (slot -1) and, on the device
// only, a row whose slot is past the pool (skipped by the kernel).
void CheckKvWriteAndAttention(CudaBackend& b, Stream& s, int64_t heads,
                              int64_t kv_heads, int64_t hd, int64_t block_size,
                              Rng& rng) {
  SCOPED_TRACE(absl::StrCat("heads=", heads, " kv=", kv_heads, " hd=", hd,
                            " block=", block_size));
  const std::vector<int64_t> ctx = {300, 37, 20, 5, 1};  // After the writes.
  const std::vector<int64_t> n_new = {1, 1, 7, 5, 1};    // Queries this step.
  const int64_t num_seqs = ctx.size();
  const int64_t max_blocks = (300 + block_size - 1) / block_size + 1;
  const int64_t num_blocks = num_seqs * max_blocks + 3;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = num_blocks - 1; i > 0; --i) {
    std::swap(perm[i], perm[rng.Int(i + 1)]);
  }
  std::vector<int32_t> tables(num_seqs * max_blocks);
  std::copy(perm.begin(), perm.begin() + tables.size(), tables.begin());
  const int64_t row = kv_heads * hd;
  auto k_pool = rng.F32(num_blocks * block_size * row);  // Garbage elsewhere.
  auto v_pool = rng.F32(k_pool.size());
  std::vector<int32_t> slots;
  for (int64_t q = 0; q < num_seqs; ++q) {
    for (int64_t p = 0; p < ctx[q]; ++p) {
      slots.push_back(tables[q * max_blocks + p / block_size] * block_size +
                      p % block_size);
    }
  }
  slots.push_back(-1);
  const int64_t n_ref = slots.size();  // The rows the reference may see.
  slots.push_back(static_cast<int32_t>(num_blocks * block_size));
  const int64_t total = slots.size();
  auto k_new = rng.F32(total * row, -2, 2), v_new = rng.F32(total * row);

  auto k_ref = k_pool, v_ref = v_pool;
  const std::initializer_list<int64_t> pool_shape = {num_blocks, block_size,
                                                     kv_heads, hd};
  PagedKvCache ref_cache{H(k_ref, pool_shape), H(v_ref, pool_shape)};
  ref::KvWrite(H(k_new, {n_ref, kv_heads, hd}), H(v_new, {n_ref, kv_heads, hd}),
               H(slots, {n_ref}), ref_cache);

  DeviceBuf<float> dk_pool(k_pool), dv_pool(v_pool), dk_new(k_new),
      dv_new(v_new);
  DeviceBuf<int32_t> dslots(slots);
  PagedKvCache cache{dk_pool.View(pool_shape), dv_pool.View(pool_shape)};
  ASSERT_TRUE(b.KvWrite(s, dk_new.View({total, kv_heads, hd}),
                        dv_new.View({total, kv_heads, hd}),
                        dslots.View({total}), cache)
                  .ok());
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_EQ(dk_pool.ToHost(), k_ref);
  EXPECT_EQ(dv_pool.ToHost(), v_ref);

  auto [qstart, pos] = NewTokenQueries(n_new, ctx);
  const int64_t n_q = pos.size();
  auto qv = rng.F32(n_q * heads * hd, -2, 2);
  std::vector<float> want(n_q * heads * hd);
  ref::Attention(H(qv, {n_q, heads, hd}), ref_cache,
                 {H(qstart, {num_seqs + 1}), H(pos, {n_q}),
                  H(tables, {num_seqs, max_blocks})},
                 H(want, {n_q, heads * hd}));
  DeviceBuf<float> dq(qv), dout(Nans(n_q * heads * hd));
  DeviceBuf<int32_t> dqstart(qstart), dpos(pos), dtables(tables);
  ASSERT_TRUE(b.Attention(s, dq.View({n_q, heads, hd}), cache,
                          {dqstart.View({num_seqs + 1}), dpos.View({n_q}),
                           dtables.View({num_seqs, max_blocks})},
                          dout.View({n_q, heads * hd}))
                  .ok());
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_TRUE(Close(dout.ToHost(), want, kTolOnlineSoftmax));
}

TEST_F(CudaOps, KvWriteAndPagedAttention) {
  Rng rng(12);
  CheckKvWriteAndAttention(B(), S(), 8, 4, 32, 16, rng);     // demo
  CheckKvWriteAndAttention(B(), S(), 16, 16, 128, 16, rng);  // Qwen
  CheckKvWriteAndAttention(B(), S(), 32, 8, 128, 16, rng);   // Mixtral
  CheckKvWriteAndAttention(B(), S(), 8, 1, 40, 3, rng);      // MQA, odd.
  CheckKvWriteAndAttention(B(), S(), 4, 2, 512, 16, rng);    // Max hd.
}

TEST_F(CudaOps, RouterTopK) {
  Rng rng(13);
  for (int64_t n : {17, 300}) {
    for (auto [e, k] : std::vector<std::pair<int64_t, int>>{
             {8, 2}, {60, 4}, {64, 8}, {128, 8}}) {
      for (bool normalize : {false, true}) {
        SCOPED_TRACE(absl::StrCat("n=", n, " e=", e, " k=", k,
                                  " normalize=", normalize));
        // Distinct logits (gaps >= 0.3) so both sides pick the same ids.
        std::vector<float> logits(n * e);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<int> perm(e);
          std::iota(perm.begin(), perm.end(), 0);
          for (int64_t i = e - 1; i > 0; --i) {
            std::swap(perm[i], perm[rng.Int(i + 1)]);
          }
          for (int64_t j = 0; j < e; ++j) {
            logits[t * e + j] =
                0.35f * perm[j] - 5 + rng.Uniform(-0.02f, 0.02f);
          }
        }
        std::vector<float> w_ref(n * k);
        std::vector<int32_t> ids_ref(n * k);
        ref::RouterTopK(H(logits, {n, e}), k, normalize, H(w_ref, {n, k}),
                        H(ids_ref, {n, k}));
        DeviceBuf<float> dlogits(logits), dw(Nans(n * k));
        DeviceBuf<int32_t> dids(std::vector<int32_t>(n * k, -7));
        ASSERT_TRUE(B().RouterTopK(S(), dlogits.View({n, e}), k, normalize,
                                   dw.View({n, k}), dids.View({n, k}))
                        .ok());
        ASSERT_TRUE(S().Synchronize().ok());
        EXPECT_EQ(dids.ToHost(), ids_ref);
        EXPECT_TRUE(Close(dw.ToHost(), w_ref, kTolPointwise));
      }
    }
  }
}

TEST_F(CudaOps, RouterTopKTiesGoToLowerIndex) {
  std::vector<float> logits = {1, 3, 3, 0, 3, 3,   // Row 0.
                               2, 2, 2, 2, 2, 2};  // Row 1: all tied.
  DeviceBuf<float> dlogits(logits);
  for (bool normalize : {true, false}) {
    DeviceBuf<float> dw(Nans(6));
    DeviceBuf<int32_t> dids(std::vector<int32_t>(6, -7));
    ASSERT_TRUE(B().RouterTopK(S(), dlogits.View({2, 6}), 3, normalize,
                               dw.View({2, 3}), dids.View({2, 3}))
                    .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_EQ(dids.ToHost(), (std::vector<int32_t>{1, 2, 4, 0, 1, 2}));
    std::vector<float> w_ref(6);
    std::vector<int32_t> ids_ref(6);
    ref::RouterTopK(H(logits, {2, 6}), 3, normalize, H(w_ref, {2, 3}),
                    H(ids_ref, {2, 3}));
    EXPECT_EQ(ids_ref, dids.ToHost());
    EXPECT_TRUE(Close(dw.ToHost(), w_ref, kTolPointwise));
    if (normalize) {
      for (float x : dw.ToHost()) EXPECT_FLOAT_EQ(x, 1.0f / 3);
    }
  }
}

TEST_F(CudaOps, SiluMulAddSigmoidGatedAddIncludingAliasing) {
  Rng rng(14);
  for (auto [m, f] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1408}, {3, 14336}, {17, 37}, {40, 384}, {8, 4096}}) {
    SCOPED_TRACE(absl::StrCat(m, "x", f));
    auto g = rng.F32(m * f, -8, 8), u = rng.F32(m * f, -2, 2);
    std::vector<float> silu(m * f), sum(m * f);
    ref::SiluMul(H(g, {m, f}), H(u, {m, f}), H(silu, {m, f}));
    ref::Add(H(g, {m, f}), H(u, {m, f}), H(sum, {m, f}));
    {
      DeviceBuf<float> dg(g), du(u), dout(Nans(m * f));
      ASSERT_TRUE(
          B().SiluMul(S(), dg.View({m, f}), du.View({m, f}), dout.View({m, f}))
              .ok());
      ASSERT_TRUE(S().Synchronize().ok());
      EXPECT_TRUE(Close(dout.ToHost(), silu, kTolPointwise));
      // out aliases gate, then (fresh inputs) up.
      ASSERT_TRUE(
          B().SiluMul(S(), dg.View({m, f}), du.View({m, f}), dg.View({m, f}))
              .ok());
      ASSERT_TRUE(S().Synchronize().ok());
      EXPECT_TRUE(Close(dg.ToHost(), silu, kTolPointwise));
      dg.Upload(g);
      ASSERT_TRUE(
          B().SiluMul(S(), dg.View({m, f}), du.View({m, f}), du.View({m, f}))
              .ok());
      ASSERT_TRUE(S().Synchronize().ok());
      EXPECT_TRUE(Close(du.ToHost(), silu, kTolPointwise));
    }
    {
      DeviceBuf<float> da(g), db(u), dout(Nans(m * f));
      ASSERT_TRUE(
          B().Add(S(), da.View({m, f}), db.View({m, f}), dout.View({m, f}))
              .ok());
      ASSERT_TRUE(S().Synchronize().ok());
      EXPECT_EQ(dout.ToHost(), sum);  // One rounding: exact.
      ASSERT_TRUE(
          B().Add(S(), da.View({m, f}), db.View({m, f}), da.View({m, f})).ok());
      ASSERT_TRUE(S().Synchronize().ok());
      EXPECT_EQ(da.ToHost(), sum);  // out aliases a.
      da.Upload(g);
      ASSERT_TRUE(
          B().Add(S(), da.View({m, f}), db.View({m, f}), db.View({m, f})).ok());
      ASSERT_TRUE(S().Synchronize().ok());
      EXPECT_EQ(db.ToHost(), sum);  // out aliases b.
    }
    {
      auto gate = rng.F32(m, -4, 4);
      auto y = rng.F32(m * f), y_ref = y;
      ref::SigmoidGatedAdd(H(u, {m, f}), H(gate, {m}), H(y_ref, {m, f}));
      for (bool two_d : {false, true}) {  // gate F32[m] and F32[m, 1].
        DeviceBuf<float> du(u), dgate(gate), dy(y);
        ASSERT_TRUE(
            B().SigmoidGatedAdd(S(), du.View({m, f}),
                                two_d ? dgate.View({m, 1}) : dgate.View({m}),
                                dy.View({m, f}))
                .ok());
        ASSERT_TRUE(S().Synchronize().ok());
        EXPECT_TRUE(Close(dy.ToHost(), y_ref, kTolPointwise)) << two_d;
      }
    }
  }
}

TEST_F(CudaOps, GatherRowsAndScaleAddRows) {
  Rng rng(15);
  for (int64_t d : {256, 2048, 4096}) {
    SCOPED_TRACE(d);
    const int64_t n = 17, m = 9;
    auto x = rng.F32(n * d);
    std::vector<int32_t> rows = {3, 0, 16, 3, 5, 5, 5, 11, 2};  // Repeats.
    std::vector<float> gathered(m * d);
    ref::GatherRows(H(x, {n, d}), H(rows, {m}), H(gathered, {m, d}));
    DeviceBuf<float> dx(x), dg(Nans(m * d));
    DeviceBuf<int32_t> drows(rows);
    ASSERT_TRUE(
        B().GatherRows(S(), dx.View({n, d}), drows.View({m}), dg.View({m, d}))
            .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_EQ(dg.ToHost(), gathered);

    // Repeated rows accumulate (atomically, in any order).
    auto w = rng.F32(m, 0, 1);
    auto y = rng.F32(n * d), y_ref = y;
    ref::ScaleAddRows(H(gathered, {m, d}), H(rows, {m}), H(w, {m}),
                      H(y_ref, {n, d}));
    DeviceBuf<float> dw(w), dy(y);
    ASSERT_TRUE(B().ScaleAddRows(S(), dg.View({m, d}), drows.View({m}),
                                 dw.View({m}), dy.View({n, d}))
                    .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_TRUE(Close(dy.ToHost(), y_ref, kTolUnorderedSum));

    // Without rows (empty tensor): rows[i] = i.
    auto y2 = rng.F32(m * d), y2_ref = y2;
    ref::ScaleAddRows(H(gathered, {m, d}), Tensor(), H(w, {m}),
                      H(y2_ref, {m, d}));
    DeviceBuf<float> dy2(y2);
    ASSERT_TRUE(B().ScaleAddRows(S(), dg.View({m, d}), Tensor(), dw.View({m}),
                                 dy2.View({m, d}))
                    .ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_TRUE(Close(dy2.ToHost(), y2_ref, kTolUnorderedSum));
  }
}

TEST_F(CudaOps, GatherAndScaleAddSkipOutOfRangeRowsAndEmptyBatches) {
  const int64_t n = 4, d = 8;
  std::vector<float> x(n * d);
  std::iota(x.begin(), x.end(), 1.0f);
  std::vector<int32_t> rows = {2, -1, 4, 1};  // Two out of range.
  DeviceBuf<float> dx(x), dg(Nans(4 * d));
  DeviceBuf<int32_t> drows(rows);
  ASSERT_TRUE(
      B().GatherRows(S(), dx.View({n, d}), drows.View({4}), dg.View({4, d}))
          .ok());
  ASSERT_TRUE(S().Synchronize().ok());
  std::vector<float> want(4 * d, 0.0f);
  for (int64_t j = 0; j < d; ++j) {
    want[j] = x[2 * d + j];
    want[3 * d + j] = x[1 * d + j];
  }
  EXPECT_EQ(dg.ToHost(), want);

  std::vector<float> y(n * d, 0.5f), w = {1, 1, 1, 2};
  DeviceBuf<float> dy(y), dw(w);
  ASSERT_TRUE(B().ScaleAddRows(S(), dx.View({4, d}), drows.View({4}),
                               dw.View({4}), dy.View({n, d}))
                  .ok());
  // m = 0: nothing to do, nothing touched.
  ASSERT_TRUE(
      B().ScaleAddRows(S(), Tensor(nullptr, DType::kF32, {0, d}, Device::kCuda),
                       Tensor(nullptr, DType::kI32, {0}, Device::kCuda),
                       Tensor(nullptr, DType::kF32, {0}, Device::kCuda),
                       dy.View({n, d}))
          .ok());
  ASSERT_TRUE(S().Synchronize().ok());
  std::vector<float> y_want = y;
  for (int64_t j = 0; j < d; ++j) {
    y_want[2 * d + j] += x[0 * d + j];      // rows[0] = 2, weight 1.
    y_want[1 * d + j] += 2 * x[3 * d + j];  // rows[3] = 1, weight 2.
  }
  EXPECT_EQ(dy.ToHost(), y_want);
}

TEST_F(CudaOps, SoftmaxAndArgmaxAtVocabSizes) {
  Rng rng(16);
  for (int64_t v : {151936, 32000, 4096, 1001, 1}) {
    SCOPED_TRACE(v);
    auto logits = rng.F32(3 * v, -20, 20);
    std::vector<float> p_ref(3 * v);
    std::vector<int32_t> am_ref(3);
    ref::Softmax(H(logits, {3, v}), H(p_ref, {3, v}));
    ref::Argmax(H(logits, {3, v}), H(am_ref, {3}));
    DeviceBuf<float> dl(logits), dp(Nans(3 * v));
    DeviceBuf<int32_t> dam(std::vector<int32_t>(3, -7));
    ASSERT_TRUE(B().Softmax(S(), dl.View({3, v}), dp.View({3, v})).ok());
    ASSERT_TRUE(B().Argmax(S(), dl.View({3, v}), dam.View({3})).ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_TRUE(Close(dp.ToHost(), p_ref, kTolPointwise));
    EXPECT_EQ(dam.ToHost(), am_ref);
    // In place.
    ASSERT_TRUE(B().Softmax(S(), dl.View({3, v}), dl.View({3, v})).ok());
    ASSERT_TRUE(S().Synchronize().ok());
    EXPECT_TRUE(Close(dl.ToHost(), p_ref, kTolPointwise));
  }
}

TEST_F(CudaOps, ArgmaxTiesGoToLowerIndex) {
  const int64_t v = 151936;
  std::vector<float> x(3 * v, 0.0f);
  x[1] = 5;  // Row 0: a tie at 1 and 3.
  x[3] = 5;
  x[v + 100000] = 7;  // Row 1: a tie far apart (different threads).
  x[v + 5000] = 7;
  std::fill(x.begin() + 2 * v, x.end(), -INFINITY);  // Row 2: all -inf -> 0.
  std::vector<int32_t> want(3);
  ref::Argmax(H(x, {3, v}), H(want, {3}));
  ASSERT_EQ(want, (std::vector<int32_t>{1, 5000, 0}));
  DeviceBuf<float> dx(x);
  DeviceBuf<int32_t> dam(std::vector<int32_t>(3, -7));
  ASSERT_TRUE(B().Argmax(S(), dx.View({3, v}), dam.View({3})).ok());
  ASSERT_TRUE(S().Synchronize().ok());
  EXPECT_EQ(dam.ToHost(), want);
}

// ---------------------------------------------------------------- Refusals

class FakeStream final : public Stream {
 public:
  Device device() const override { return Device::kCuda; }
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

TEST_F(CudaOps, RefusesHostTensorsWrongDtypesAndShapes) {
  std::vector<float> hx(8), hout(8);
  std::vector<bf16> hw(8);
  EXPECT_TRUE(absl::IsInvalidArgument(
      B().RmsNorm(S(), H(hx, {1, 8}), H(hw, {8}), 1e-6f, H(hout, {1, 8}))));

  DeviceBuf<float> x(Zeros<float>(4 * 8)), out(Zeros<float>(4 * 4));
  DeviceBuf<bf16> w(Zeros<bf16>(4 * 8));
  DeviceBuf<float> wf(Zeros<float>(4 * 8));
  // Host x.
  EXPECT_TRUE(absl::IsInvalidArgument(B().MatMul(
      S(), H(hx, {1, 8}), w.View({4, 8}), Tensor(), out.View({1, 4}))));
  // F32 weights.
  EXPECT_TRUE(absl::IsInvalidArgument(B().MatMul(
      S(), x.View({4, 8}), wf.View({4, 8}), Tensor(), out.View({4, 4}))));
  // k mismatch, out shape.
  EXPECT_TRUE(absl::IsInvalidArgument(B().MatMul(
      S(), x.View({4, 8}), w.View({8, 4}), Tensor(), out.View({4, 8}))));
  EXPECT_TRUE(absl::IsInvalidArgument(B().MatMul(
      S(), x.View({4, 8}), w.View({4, 8}), Tensor(), out.View({2, 4}))));
  // ExpertFfn: workspace too small.
  EXPECT_TRUE(absl::IsInvalidArgument(B().ExpertFfn(
      S(), x.View({1, 8}), w.View({24}), 1, out.View({2}), out.View({1, 8}))));
  // Limits of the CUDA kernels.
  DeviceBuf<float> logits(Zeros<float>(100)), tw(Zeros<float>(65));
  DeviceBuf<int32_t> tid(Zeros<int32_t>(65));
  EXPECT_TRUE(absl::IsInvalidArgument(B().RouterTopK(S(), logits.View({1, 100}),
                                                     65, true, tw.View({1, 65}),
                                                     tid.View({1, 65}))));
}

TEST_F(CudaOps, RefusesAttentionBeyondMaxHeadDim) {
  const int64_t hd = kMaxHeadDim + 2;
  DeviceBuf<float> q(Zeros<float>(hd)), pool(Zeros<float>(hd)),
      pool2(Zeros<float>(hd)), out(Zeros<float>(hd));
  DeviceBuf<int32_t> qs(std::vector<int32_t>{0, 1}),
      pos(std::vector<int32_t>{0}), table(std::vector<int32_t>{0});
  PagedKvCache cache{pool.View({1, 1, 1, hd}), pool2.View({1, 1, 1, hd})};
  absl::Status st = B().Attention(
      S(), q.View({1, 1, hd}), cache,
      {qs.View({2}), pos.View({1}), table.View({1, 1})}, out.View({1, hd}));
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

TEST_F(CudaOps, RefusesStreamsOfOtherBackends) {
  DeviceBuf<float> x(Zeros<float>(8)), out(Zeros<float>(8));
  DeviceBuf<bf16> w(Zeros<bf16>(8));
  FakeStream fake;
  EXPECT_TRUE(absl::IsInvalidArgument(
      B().RmsNorm(fake, x.View({1, 8}), w.View({8}), 1e-6f, out.View({1, 8}))));
  EXPECT_TRUE(absl::IsInvalidArgument(B().MatMul(
      fake, x.View({1, 8}), w.View({1, 8}), Tensor(), out.View({1, 1}))));
  // A stream of another CudaBackend instance.
  EXPECT_TRUE(absl::IsInvalidArgument(B().MatMul(*gemv_.stream, x.View({1, 8}),
                                                 w.View({1, 8}), Tensor(),
                                                 out.View({1, 1}))));
}

TEST_F(CudaOps, MatMulInt4RefusalsNameTheArgument) {
  const int64_t m = 2, k = 128, n = 4;
  DeviceBuf<float> x(Zeros<float>(m * k)), out(Zeros<float>(m * n));
  DeviceBuf<uint8_t> wq(Zeros<uint8_t>(n * k / 2));
  DeviceBuf<bf16> scales(Zeros<bf16>(n * 2));
  auto expect_invalid = [](absl::Status st, const std::string& word) {
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find(word), std::string::npos) << st;
  };
  // OK first, so the refusals below are about the one bad argument.
  EXPECT_TRUE(B().MatMulInt4(S(), x.View({m, k}), wq.View(DType::kI4, {n, k}),
                             scales.View({n, 2}), 64, out.View({m, n}))
                  .ok());
  expect_invalid(
      B().MatMulInt4(S(), x.View({m, k}), wq.View(DType::kI4, {n, k}),
                     scales.View({n, 4}), 32, out.View({m, n})),
      "group");
  expect_invalid(
      B().MatMulInt4(S(), x.View({m, 96}), wq.View(DType::kI4, {n, 96}),
                     scales.View({n, 1}), 64, out.View({m, n})),
      "multiple of group");
  expect_invalid(
      B().MatMulInt4(S(), x.View({m, k}), wq.View(DType::kBF16, {n, k / 4}),
                     scales.View({n, 2}), 64, out.View({m, n})),
      "wq");
  expect_invalid(
      B().MatMulInt4(S(), x.View({m, k}), wq.View(DType::kI4, {n, k}),
                     scales.View({n, 1}), 64, out.View({m, n})),
      "scales");
  expect_invalid(
      B().MatMulInt4(S(), x.View({m, k}), wq.View(DType::kI4, {n, k}),
                     scales.View({n, 2}), 64, out.View({n, m})),
      "out");
  std::vector<float> hx(m * k);
  expect_invalid(B().MatMulInt4(S(), H(hx, {m, k}), wq.View(DType::kI4, {n, k}),
                                scales.View({n, 2}), 64, out.View({m, n})),
                 "x");
  ASSERT_TRUE(S().Synchronize().ok());
}

}  // namespace
}  // namespace moeserve::kernels::cuda
