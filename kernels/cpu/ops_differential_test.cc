// Differential test of the CPU backend against the scalar reference
// (reference_ops.h), in the spirit of llama.cpp's test-backend-ops: every op
// runs on random inputs at the model's real shapes (plus odd sizes for SIMD
// tails) on several backend configurations (SIMD / scalar, 1-3 threads), and
// the outputs must match the reference within a per-op tolerance relative to
// the output's scale. A second group checks that bad calls are refused with
// InvalidArgument rather than crashing.
//
// How to add an op:
//  1. Declare it in kernels/backend.h, its check in kernels/op_checks.h.
//  2. Write the obviously-correct version in reference_ops.{h,cc} (double
//     accumulation, no threads).
//  3. Implement it in CpuBackend (and later CUDA).
//  4. Here: a TEST_P that builds inputs with Rng, runs Backend() and ref::,
//     and compares with ExpectClose(got, want, tolerance). Pick the
//     tolerance from the table below by how the op accumulates; exact ops
//     (copies, ids) compare with ==. Cover m in {1, 3, 8, 17} and a size
//     that is not a multiple of 8.
//  5. Add its refusals (wrong dtype, shape, device, index) to the Refuses*
//     tests.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_int4.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"
#include "kernels/testing/differential.h"

namespace moeserve::kernels::cpu {
namespace {

using ::moeserve::kernels::testing::Close;
using ::moeserve::kernels::testing::kTolBf16ActivationDot;
using ::moeserve::kernels::testing::kTolBf16ActivationFfn;
using ::moeserve::kernels::testing::kTolDot;
using ::moeserve::kernels::testing::kTolInt4Dot;
using ::moeserve::kernels::testing::kTolPointwise;
using ::moeserve::kernels::testing::NewTokenQueries;
using ::moeserve::kernels::testing::Rng;

Tensor T(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}
Tensor T(std::vector<bf16>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kBF16, shape);
}
Tensor T(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kI32, shape);
}

// The harness itself must be able to fail: a single wrong element of a
// realistic MatMul output, off by 1e-4 of the scale, is caught.
TEST(Harness, CatchesASmallError) {
  Rng rng(1);
  std::vector<float> want = rng.F32(2048, -30, 30);
  std::vector<float> got = want;
  EXPECT_TRUE(Close(got, want, kTolDot));
  got[777] += 30 * 1e-4f;
  EXPECT_FALSE(Close(got, want, kTolDot));
  got = want;
  got[5] = NAN;
  EXPECT_FALSE(Close(got, want, kTolDot));
}

struct Config {
  int threads;
  bool simd;
};

class Ops : public ::testing::TestWithParam<Config> {
 public:
  Backend& B() { return *backend_; }
  Stream& S() { return *stream_; }

 protected:
  void SetUp() override {
    backend_ = std::make_unique<CpuBackend>(
        CpuBackendOptions{GetParam().threads, GetParam().simd});
    auto s = backend_->CreateStream();
    ASSERT_TRUE(s.ok());
    stream_ = std::move(*s);
  }

  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Stream> stream_;
};

// x with every element rounded to bf16 and back (what the avx512bf16
// kernels compute with).
std::vector<float> RoundedToBf16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = Bf16ToFloat(FloatToBf16(x[i]));
  return r;
}

// MatMul on b against the reference within `tol`; with `bf16_x` (the
// avx512bf16 kernels) also against the reference fed bf16-rounded x within
// kTolDot (only the summation order differs there).
void RunMatMul(Backend& b, Stream& s, int64_t m, int64_t k, int64_t n,
               bool bias, Rng& rng, double tol = kTolDot, bool bf16_x = false) {
  SCOPED_TRACE(absl::StrCat("m=", m, " k=", k, " n=", n, " bias=", bias,
                            " backend=", b.name()));
  auto x = rng.F32(m * k);
  auto w = rng.Bf16(n * k);
  auto bv = rng.Bf16(n);
  std::vector<float> got(m * n, NAN), want(m * n);
  Tensor bt = bias ? T(bv, {n}) : Tensor();
  ASSERT_TRUE(b.MatMul(s, T(x, {m, k}), T(w, {n, k}), bt, T(got, {m, n})).ok());
  ASSERT_TRUE(s.Synchronize().ok());
  ref::MatMul(T(x, {m, k}), T(w, {n, k}), bt, T(want, {m, n}));
  EXPECT_TRUE(Close(got, want, tol));
  if (bf16_x) {
    std::vector<float> xr = RoundedToBf16(x);
    ref::MatMul(T(xr, {m, k}), T(w, {n, k}), bt, T(want, {m, n}));
    EXPECT_TRUE(Close(got, want, kTolDot)) << "against bf16-rounded x";
  }
}
void RunMatMul(Ops& t, int64_t m, int64_t k, int64_t n, bool bias, Rng& rng) {
  RunMatMul(t.B(), t.S(), m, k, n, bias, rng);
}

TEST_P(Ops, MatMulModelShapes) {
  Rng rng(2);
  // (k, n): attention/expert projections of the demo model, Qwen-MoE and
  // Mixtral sizes; m = decode batch sizes and an odd prefill chunk.
  const std::pair<int64_t, int64_t> shapes[] = {
      {256, 512}, {512, 256}, {2048, 1408}, {1408, 2048}, {4096, 1024}};
  for (auto [k, n] : shapes) {
    for (int64_t m : {1, 3, 8, 17}) RunMatMul(*this, m, k, n, false, rng);
  }
}

TEST_P(Ops, MatMulMixtralExpertShape) {
  Rng rng(3);
  RunMatMul(*this, 1, 4096, 14336, false, rng);  // w1 / w3
  RunMatMul(*this, 3, 14336, 4096, false, rng);  // w2
}

TEST_P(Ops, MatMulTailsAndBias) {
  Rng rng(4);
  for (int64_t k : {1, 7, 8, 9, 37, 263}) {
    for (int64_t n : {1, 3, 5, 13}) {
      for (int64_t m : {1, 2, 3, 17, 33}) RunMatMul(*this, m, k, n, true, rng);
    }
  }
  RunMatMul(*this, 0, 64, 8, true, rng);
}

void RunExpertFfn(Backend& b, Stream& s, int64_t m, int64_t hidden, int64_t ffn,
                  Rng& rng, double tol = kTolDot) {
  SCOPED_TRACE(absl::StrCat("m=", m, " hidden=", hidden, " ffn=", ffn,
                            " backend=", b.name()));
  auto x = rng.F32(m * hidden);
  // Scale like a trained model so silu sees both signs and magnitudes.
  auto blob = rng.Bf16(3 * ffn * hidden, -0.1f, 0.1f);
  std::vector<float> ws(ExpertFfnWorkspaceElems(m, ffn));
  std::vector<float> got(m * hidden, NAN), want(m * hidden);
  ASSERT_TRUE(b.ExpertFfn(s, T(x, {m, hidden}), T(blob, {3 * ffn * hidden}),
                          ffn, T(ws, {int64_t(ws.size())}), T(got, {m, hidden}))
                  .ok());
  ref::ExpertFfn(T(x, {m, hidden}), T(blob, {3 * ffn * hidden}), ffn,
                 T(want, {m, hidden}));
  EXPECT_TRUE(Close(got, want, tol));
}
void RunExpertFfn(Ops& t, int64_t m, int64_t hidden, int64_t ffn, Rng& rng) {
  RunExpertFfn(t.B(), t.S(), m, hidden, ffn, rng);
}

TEST_P(Ops, ExpertFfn) {
  Rng rng(5);
  for (int64_t m : {1, 3, 8, 17}) {
    RunExpertFfn(*this, m, 256, 512, rng);
    RunExpertFfn(*this, m, 2048, 1408, rng);
  }
  RunExpertFfn(*this, 5, 52, 37, rng);  // Odd sizes: SIMD tails everywhere.
}

// ---- ExpertFfnInt4: the int4 expert of a quantized draft model. The weights
// dequantise exactly (q * bf16 scale), so the SIMD kernels differ from the
// double-accumulating reference only by fp32 accumulation: kTolInt4Dot.

// layout.bytes of 64-byte aligned host memory (the op wants 16).
struct Int4Blob {
  explicit Int4Blob(int64_t bytes) : storage(bytes + 64) {
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((64 - base % 64) % 64);
  }
  std::vector<uint8_t> storage;
  uint8_t* data;
};

// A random bf16 expert, quantized.
struct QuantizedExpert {
  QuantizedExpert(int64_t hidden, int64_t ffn, Rng& rng)
      : layout(*MakeInt4ExpertLayout(hidden, ffn)),
        weights(rng.Bf16Tiled(3 * ffn * hidden, int64_t{1} << 20, -0.1f, 0.1f)),
        blob(layout.bytes) {
    QuantizeExpertInt4(weights.data(), layout,
                       reinterpret_cast<std::byte*>(blob.data));
  }
  Tensor View() { return Tensor(blob.data, DType::kU8, {layout.bytes}); }
  Int4ExpertLayout layout;
  std::vector<bf16> weights;
  Int4Blob blob;
};

// An int4 expert as a checkpoint gives one (engine/quant/int4_import.h):
// layout options and groups of the caller's choosing, every nibble, scale
// and zero point random (zeros 0..16, the whole range the format holds;
// scales of either sign), so every (u - z) and both scale decodes occur.
struct CheckpointExpert {
  CheckpointExpert(int64_t hidden, int64_t ffn, int64_t group_in,
                   int64_t group_out, Int4ExpertOptions options, Rng& rng)
      : layout(*Int4ExpertLayoutWithOptions(hidden, ffn, group_in, group_out,
                                            options)),
        blob(layout.bytes) {
    auto* base = reinterpret_cast<std::byte*>(blob.data);
    for (Int4Part part : {Int4Part::kGate, Int4Part::kUp, Int4Part::kDown}) {
      const Int4Matrix w = Int4ExpertPart(base, layout, part);
      auto* q = const_cast<uint8_t*>(w.q);
      for (int64_t i = 0; i < w.rows * w.cols / 2; ++i) q[i] = rng.Int(256);
      const int64_t groups = w.rows * w.groups_per_row();
      auto* scales = const_cast<uint16_t*>(w.scales);
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
  }
  Tensor View() { return Tensor(blob.data, DType::kU8, {layout.bytes}); }
  Int4ExpertLayout layout;
  Int4Blob blob;
};

template <typename Expert>
void RunExpertFfnInt4(CpuBackend& b, Stream& s, Expert& e, int64_t m,
                      Rng& rng) {
  const int64_t hidden = e.layout.hidden, ffn = e.layout.ffn;
  SCOPED_TRACE(absl::StrCat(
      "m=", m, " hidden=", hidden, " ffn=", ffn, " groups=", e.layout.group_in,
      "/", e.layout.group_out, " scales=",
      Int4ScaleTypeName(e.layout.scale_type), " zeros=", e.layout.has_zeros,
      " int4 isa=", IsaName(b.int4_isa()), " threads=", b.num_threads()));
  auto x = rng.F32(m * hidden);
  std::vector<float> ws(ExpertFfnWorkspaceElems(m, ffn), NAN);
  std::vector<float> got(m * hidden, NAN), want(m * hidden);
  absl::Status st =
      b.ExpertFfnInt4(s, T(x, {m, hidden}), e.View(), e.layout,
                      T(ws, {int64_t(ws.size())}), T(got, {m, hidden}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(s.Synchronize().ok());
  ref::ExpertFfnInt4(T(x, {m, hidden}), e.View(), e.layout,
                     T(want, {m, hidden}));
  EXPECT_TRUE(Close(
      got, want,
      b.int4_isa() == Isa::kAvx512Bf16 ? kTolBf16ActivationFfn : kTolInt4Dot));
}

// What CpuBackend::ExpertFfnInt4 does, on the int4 variant `isa` whatever
// the backend's choice: gate and up stacked, SiLU x up, down.
template <typename Expert>
void RunExpertFfnInt4Direct(ThreadPool& pool, Isa isa, Expert& e, int64_t m,
                            Rng& rng) {
  const int64_t hidden = e.layout.hidden, ffn = e.layout.ffn;
  SCOPED_TRACE(absl::StrCat(
      "m=", m, " hidden=", hidden, " ffn=", ffn, " groups=", e.layout.group_in,
      "/", e.layout.group_out, " scales=",
      Int4ScaleTypeName(e.layout.scale_type), " zeros=", e.layout.has_zeros,
      " int4 isa=", IsaName(isa), " threads=", pool.num_threads()));
  const auto* base = reinterpret_cast<const std::byte*>(e.blob.data);
  const Int4Matrix gate = Int4ExpertPart(base, e.layout, Int4Part::kGate);
  const Int4Matrix up = Int4ExpertPart(base, e.layout, Int4Part::kUp);
  const Int4Matrix down = Int4ExpertPart(base, e.layout, Int4Part::kDown);
  auto x = rng.F32(m * hidden);
  std::vector<float> gate_up(m * 2 * ffn, NAN), act(m * ffn, NAN);
  std::vector<float> got(m * hidden, NAN), want(m * hidden);
  MatMulInt4(pool, isa, x.data(), m, gate, &up, gate_up.data());
  SiluMulRows(pool, gate_up.data(), 2 * ffn, gate_up.data() + ffn, 2 * ffn, m,
              ffn, act.data());
  MatMulInt4(pool, isa, act.data(), m, down, nullptr, got.data());
  ref::ExpertFfnInt4(T(x, {m, hidden}), e.View(), e.layout,
                     T(want, {m, hidden}));
  EXPECT_TRUE(
      Close(got, want,
            isa == Isa::kAvx512Bf16 ? kTolBf16ActivationFfn : kTolInt4Dot));
}

TEST_P(Ops, ExpertFfnInt4) {
  Rng rng(15);
  // The demo models (group_out 32 and 128), then odd groups: 144 -> 16,
  // 40 and 52 (k itself: SIMD plus a scalar tail), 6 (tail only).
  const std::pair<int64_t, int64_t> shapes[] = {
      {256, 96}, {256, 128}, {144, 40}, {40, 52}, {144, 6}};
  // With SIMD on an AVX-512 machine, also the AVX2 kernel.
  std::vector<std::unique_ptr<CpuBackend>> backends;
  if (GetParam().simd && BestInt4Isa() >= Isa::kAvx512) {
    backends.push_back(std::make_unique<CpuBackend>(
        CpuBackendOptions{GetParam().threads, true, /*use_avx512=*/false}));
  }
  for (auto [hidden, ffn] : shapes) {
    QuantizedExpert e(hidden, ffn, rng);
    for (int64_t m : {1, 3, 8, 17}) {
      RunExpertFfnInt4(*backend_, S(), e, m, rng);
      for (auto& b : backends) {
        auto s = b->CreateStream();
        ASSERT_TRUE(s.ok());
        RunExpertFfnInt4(*b, **s, e, m, rng);
      }
    }
  }
}

// Checkpoint layouts (fp16 or bf16 scales, zero points or not) against the
// dequantize-then-fp32 reference, at the shapes the draft's int4 is tested
// at with the groups checkpoints use: 32, 64, 128 and one group per row
// (the demo's down projection, k = 96 under group_size 128: GPTQ's
// g_idx = i // 128 puts every column in group 0), plus groups with a
// scalar tail (40, 52) and tail only (6).
TEST_P(Ops, ExpertFfnInt4CheckpointLayouts) {
  Rng rng(19);
  struct Shape {
    int64_t hidden, ffn, group_in, group_out;
  };
  const Shape shapes[] = {{256, 96, 128, 96}, {256, 128, 64, 32},
                          {256, 96, 32, 32},  {128, 256, 128, 128},
                          {144, 40, 16, 40},  {40, 52, 40, 52},
                          {144, 6, 144, 6}};
  const Int4ExpertOptions options[] = {{Int4ScaleType::kF16, true},
                                       {Int4ScaleType::kF16, false},
                                       {Int4ScaleType::kBf16, true}};
  std::vector<std::unique_ptr<CpuBackend>> backends;
  if (GetParam().simd && BestInt4Isa() >= Isa::kAvx512) {
    backends.push_back(std::make_unique<CpuBackend>(
        CpuBackendOptions{GetParam().threads, true, /*use_avx512=*/false}));
  }
  for (const Shape& sh : shapes) {
    for (const Int4ExpertOptions& o : options) {
      CheckpointExpert e(sh.hidden, sh.ffn, sh.group_in, sh.group_out, o, rng);
      for (int64_t m : {1, 3, 8, 17}) {
        RunExpertFfnInt4(*backend_, S(), e, m, rng);
        for (auto& b : backends) {
          auto s = b->CreateStream();
          ASSERT_TRUE(s.ok());
          RunExpertFfnInt4(*b, **s, e, m, rng);
        }
      }
    }
  }
}

// The reference reads a checkpoint layout as the format defines it:
// (u - z) * scale, z = 8 without zeros, fp16 or bf16 scale bits.
TEST(ExpertFfnInt4, ReferenceDequantizesByTheDefinition) {
  Rng rng(20);
  for (Int4ExpertOptions o : {Int4ExpertOptions{Int4ScaleType::kF16, true},
                              Int4ExpertOptions{Int4ScaleType::kF16, false},
                              Int4ExpertOptions{Int4ScaleType::kBf16, true}}) {
    CheckpointExpert e(64, 32, 32, 32, o, rng);
    const auto* base = reinterpret_cast<const std::byte*>(e.blob.data);
    const Int4Matrix w = Int4ExpertPart(base, e.layout, Int4Part::kDown);
    for (int64_t r = 0; r < w.rows; ++r) {
      for (int64_t c = 0; c < w.cols; ++c) {
        const uint8_t byte = w.q[r * w.cols / 2 + c / 2];
        const int u = c % 2 == 0 ? byte & 15 : byte >> 4;
        const int z = o.zeros ? w.zeros[r] : 8;  // One group a row.
        const uint16_t bits = w.scales[r];
        const float scale = o.scale_type == Int4ScaleType::kF16
                                ? F16ToFloat(bits)
                                : Bf16ToFloat(bits);
        ASSERT_EQ(Int4At(w, r, c), static_cast<float>(u - z) * scale)
            << r << "," << c;
      }
    }
  }
}

// Mixtral-sized (4096 x 14336) at decode m = 1 on every SIMD variant: the
// quantization and the reference dominate, so once, not per configuration.
TEST(ExpertFfnInt4, MixtralShapeAtM1) {
  Rng rng(16);
  QuantizedExpert e(4096, 14336, rng);
  std::vector<Isa> seen;
  for (bool avx512 : {true, false}) {
    CpuBackend b(CpuBackendOptions{2, true, avx512});
    if (std::find(seen.begin(), seen.end(), b.int4_isa()) != seen.end()) {
      continue;
    }
    seen.push_back(b.int4_isa());
    auto s = b.CreateStream();
    ASSERT_TRUE(s.ok());
    RunExpertFfnInt4(b, **s, e, 1, rng);
  }
  if (Int4IsaSupported(Isa::kAvx512Bf16)) {
    ThreadPool pool(2);
    RunExpertFfnInt4Direct(pool, Isa::kAvx512Bf16, e, 1, rng);
  }
}

// The expert quantizer is the per-matrix reference quantizer, bit for bit.
TEST(ExpertFfnInt4, QuantizerMatchesReferenceQuantizeInt4) {
  Rng rng(17);
  QuantizedExpert e(256, 96, rng);
  const int64_t hidden = 256, ffn = 96;
  const Int4Part parts[] = {Int4Part::kGate, Int4Part::kUp, Int4Part::kDown};
  for (int p = 0; p < 3; ++p) {
    const Int4Matrix w = Int4ExpertPart(
        reinterpret_cast<const std::byte*>(e.blob.data), e.layout, parts[p]);
    std::vector<uint8_t> wq(w.rows * w.cols / 2);
    std::vector<bf16> scales(w.rows * (w.cols / w.group));
    ASSERT_TRUE(ref::QuantizeInt4(
                    Tensor(e.weights.data() + p * ffn * hidden, DType::kBF16,
                           {w.rows, w.cols}),
                    w.group, Tensor(wq.data(), DType::kI4, {w.rows, w.cols}),
                    T(scales, {w.rows, w.cols / w.group}))
                    .ok());
    EXPECT_EQ(std::vector<uint8_t>(w.q, w.q + wq.size()), wq) << "part " << p;
    EXPECT_EQ(std::vector<bf16>(w.scales, w.scales + scales.size()), scales)
        << "part " << p;
  }
}

// ---- Every variant of the int4 matmul (matmul_int4.h), forced by name ---
// MatMulInt4 called directly, so every variant this CPU has runs whatever
// the backend's default; one it lacks is skipped. kScalar, kAvx2 and
// kAvx512 use the exact weights in fp32: kTolInt4Dot against the double
// reference. kAvx512Bf16 rounds x to bf16 (where its steps fit a matrix's
// groups; else it runs kAvx512): kTolBf16ActivationDot
// against the reference, kTolInt4Dot against the reference fed the same
// rounded x (so the looser bound cannot hide a summation or lane-order bug),
// and kTolBf16ActivationFfn through a whole expert (x rounded before gate/up,
// the activation before down: the reasoning of the bf16 kernels' bounds,
// differential.h, with exact int4 weights in place of bf16 ones).

class Int4Variant
    : public ::testing::TestWithParam<std::tuple<Isa, int /*threads*/>> {
 public:
  Isa isa() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }

 protected:
  void SetUp() override {
    if (!Int4IsaSupported(isa())) {
      GTEST_SKIP() << "this CPU lacks the instructions of the int4 "
                   << IsaName(isa()) << " kernel";
    }
    pool_ = std::make_unique<ThreadPool>(threads());
  }

  std::unique_ptr<ThreadPool> pool_;
};

// y = x dequant([a; b])^T with double sums, x rounded to bf16 if asked.
std::vector<float> Int4Reference(const std::vector<float>& x, int64_t m,
                                 const Int4Matrix& a, const Int4Matrix* b,
                                 bool bf16_x) {
  const int64_t k = a.cols, n = a.rows + (b != nullptr ? b->rows : 0);
  const std::vector<float> xr = bf16_x ? RoundedToBf16(x) : x;
  std::vector<float> y(m * n), w(k);
  for (int64_t j = 0; j < n; ++j) {
    const Int4Matrix& part = j < a.rows ? a : *b;
    const int64_t row = j < a.rows ? j : j - a.rows;
    for (int64_t c = 0; c < k; ++c) w[c] = Int4At(part, row, c);
    for (int64_t r = 0; r < m; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += double{xr[r * k + c]} * w[c];
      y[r * n + j] = static_cast<float>(acc);
    }
  }
  return y;
}

// MatMulInt4 on `isa` against the reference (see the section comment).
void CheckInt4Product(ThreadPool& pool, Isa isa, const Int4Matrix& a,
                      const Int4Matrix* b, int64_t m, Rng& rng) {
  const int64_t k = a.cols, n = a.rows + (b != nullptr ? b->rows : 0);
  SCOPED_TRACE(absl::StrCat("m=", m, " k=", k, " n=", n, " group=", a.group,
                            " scales=", Int4ScaleTypeName(a.scale_type),
                            " zeros=", a.zeros != nullptr,
                            " stacked=", b != nullptr));
  const std::vector<float> x = rng.F32(m * k);
  std::vector<float> got(m * n, NAN);
  MatMulInt4(pool, isa, x.data(), m, a, b, got.data());
  // kAvx512Bf16 takes groups of 32, multiples of 64 and one group per row
  // of a multiple of 32 (matmul_int4.h); kAvx512 runs the others.
  const bool bf16_x =
      isa == Isa::kAvx512Bf16 &&
      (a.group == 32 || a.group % 64 == 0 || (a.group == k && k % 32 == 0));
  EXPECT_TRUE(Close(got, Int4Reference(x, m, a, b, false),
                    bf16_x ? kTolBf16ActivationDot : kTolInt4Dot));
  if (bf16_x) {
    EXPECT_TRUE(Close(got, Int4Reference(x, m, a, b, true), kTolInt4Dot))
        << "against bf16-rounded x";
  }
}

// Every shape, group and layout the backend's int4 tests use (the draft's
// quantized experts, the checkpoint layouts: groups 32, 64, 128, one per
// row, odd ones), plus mixtral_tiny's (k = 32: a lone 32-column step) and
// a group of 96 in rows of 192 (kAvx512Bf16 hands it to kAvx512); gate + up
// stacked and down alone, m across the register tiles (1, 2, 3, 4) and the
// row blocks (16, 17, 33).
TEST_P(Int4Variant, MatchesReferenceAtEveryTestedLayout) {
  Rng rng(45);
  struct Shape {
    int64_t hidden, ffn, group_in, group_out;
  };
  const Shape shapes[] = {
      {256, 96, 128, 32}, {256, 128, 128, 128}, {144, 40, 16, 40},
      {40, 52, 40, 52},   {144, 6, 16, 6},      {256, 96, 128, 96},
      {256, 128, 64, 32}, {256, 96, 32, 32},    {128, 256, 128, 128},
      {144, 6, 144, 6},   {64, 32, 64, 32},     {192, 32, 96, 32}};
  const Int4ExpertOptions options[] = {{Int4ScaleType::kBf16, false},
                                       {Int4ScaleType::kF16, true},
                                       {Int4ScaleType::kF16, false},
                                       {Int4ScaleType::kBf16, true}};
  for (const Shape& sh : shapes) {
    for (const Int4ExpertOptions& o : options) {
      CheckpointExpert e(sh.hidden, sh.ffn, sh.group_in, sh.group_out, o, rng);
      const auto* base = reinterpret_cast<const std::byte*>(e.blob.data);
      const Int4Matrix gate = Int4ExpertPart(base, e.layout, Int4Part::kGate);
      const Int4Matrix up = Int4ExpertPart(base, e.layout, Int4Part::kUp);
      const Int4Matrix down = Int4ExpertPart(base, e.layout, Int4Part::kDown);
      for (int64_t m : {1, 2, 3, 4, 5, 8, 16, 17, 33}) {
        CheckInt4Product(*pool_, isa(), gate, &up, m, rng);
        CheckInt4Product(*pool_, isa(), down, nullptr, m, rng);
      }
    }
  }
}

// Whole experts: the draft's quantizer at the demo shapes and the GPTQ-style
// checkpoint layouts of demo-fg (fp16 scales + zeros, groups 32 and 128/96).
TEST_P(Int4Variant, ExpertFfnMatchesReference) {
  Rng rng(46);
  for (auto [hidden, ffn] :
       {std::pair<int64_t, int64_t>{256, 96}, {256, 128}, {144, 40}}) {
    QuantizedExpert e(hidden, ffn, rng);
    for (int64_t m : {1, 3, 8, 17}) {
      RunExpertFfnInt4Direct(*pool_, isa(), e, m, rng);
    }
  }
  for (int64_t group_out : {32, 96}) {
    CheckpointExpert e(256, 96, group_out == 32 ? 32 : 128, group_out,
                       {Int4ScaleType::kF16, true}, rng);
    for (int64_t m : {1, 3, 8, 17}) {
      RunExpertFfnInt4Direct(*pool_, isa(), e, m, rng);
    }
  }
}

// A row's output is the same bits whatever the other rows, the row block or
// register tile that computed it and the thread count: decode (m = 1),
// batched decode and verification agree exactly.
TEST_P(Int4Variant, RowResultIndependentOfBatchAndThreads) {
  Rng rng(47);
  const int64_t m = 40;
  ThreadPool other(threads() == 1 ? 3 : 1);
  for (int64_t group : {32, 64, 128}) {
    for (const Int4ExpertOptions o :
         {Int4ExpertOptions{Int4ScaleType::kBf16, false},
          Int4ExpertOptions{Int4ScaleType::kF16, true}}) {
      CheckpointExpert e(256, 128, group, 32, o, rng);
      const auto* base = reinterpret_cast<const std::byte*>(e.blob.data);
      const Int4Matrix gate = Int4ExpertPart(base, e.layout, Int4Part::kGate);
      const Int4Matrix up = Int4ExpertPart(base, e.layout, Int4Part::kUp);
      const int64_t k = gate.cols, n = gate.rows + up.rows;
      const std::vector<float> x = rng.F32(m * k);
      std::vector<float> all(m * n);
      MatMulInt4(*pool_, isa(), x.data(), m, gate, &up, all.data());
      for (auto [r0, rows] : {std::pair<int64_t, int64_t>{0, 1},
                              {5, 1},
                              {7, 2},
                              {1, 3},
                              {9, 7},
                              {3, 16},
                              {17, 17},
                              {20, 20}}) {
        SCOPED_TRACE(absl::StrCat("group ", group, " zeros ", o.zeros, " rows ",
                                  r0, " + ", rows));
        std::vector<float> got(rows * n, NAN);
        MatMulInt4(other, isa(), x.data() + r0 * k, rows, gate, &up,
                   got.data());
        EXPECT_EQ(got, std::vector<float>(all.begin() + r0 * n,
                                          all.begin() + (r0 + rows) * n));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, Int4Variant,
    ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512,
                                         Isa::kAvx512Bf16),
                       ::testing::Values(1, 2)),
    [](const ::testing::TestParamInfo<std::tuple<Isa, int>>& info) {
      return absl::StrCat(IsaName(std::get<0>(info.param)), "_",
                          std::get<1>(info.param), "t");
    });

TEST_P(Ops, RmsNormIncludingPerHeadView) {
  Rng rng(6);
  for (int64_t d : {256, 2048, 4096, 33}) {
    for (int64_t n : {1, 3, 17}) {
      auto x = rng.F32(n * d, -3, 3);
      auto w = rng.Bf16(d, 0.5f, 1.5f);
      std::vector<float> got(n * d), want(n * d);
      ASSERT_TRUE(
          B().RmsNorm(S(), T(x, {n, d}), T(w, {d}), 1e-6f, T(got, {n, d}))
              .ok());
      ref::RmsNorm(T(x, {n, d}), T(w, {d}), 1e-6f, T(want, {n, d}));
      EXPECT_TRUE(Close(got, want, kTolPointwise)) << n << "x" << d;
      // In place gives the same result.
      ASSERT_TRUE(
          B().RmsNorm(S(), T(x, {n, d}), T(w, {d}), 1e-6f, T(x, {n, d})).ok());
      EXPECT_EQ(x, got);
    }
  }
  // q/k norm: [n, heads * hd] seen as [n * heads, hd].
  const int64_t n = 3, heads = 8, hd = 128;
  auto q = rng.F32(n * heads * hd);
  auto w = rng.Bf16(hd, 0.5f, 1.5f);
  std::vector<float> got(q.size()), want(q.size());
  Tensor view = *T(q, {n, heads * hd}).Reshape({n * heads, hd});
  ASSERT_TRUE(
      B().RmsNorm(S(), view, T(w, {hd}), 1e-5f, T(got, {n * heads, hd})).ok());
  ref::RmsNorm(view, T(w, {hd}), 1e-5f, T(want, {n * heads, hd}));
  EXPECT_TRUE(Close(got, want, kTolPointwise));
}

TEST_P(Ops, RopeRotateHalf) {
  Rng rng(7);
  for (int64_t hd : {32, 128, 6}) {
    for (float theta : {10000.0f, 1e6f}) {
      const int64_t n = 17, heads = 8;
      auto x = rng.F32(n * heads * hd);
      std::vector<int32_t> pos(n);
      for (int64_t i = 0; i < n; ++i) pos[i] = i < 2 ? i : rng.Int(32768);
      auto want = x;
      ASSERT_TRUE(
          B().RopeRotateHalf(S(), T(x, {n, heads, hd}), T(pos, {n}), theta)
              .ok());
      ref::RopeRotateHalf(T(want, {n, heads, hd}), T(pos, {n}), theta);
      EXPECT_TRUE(Close(x, want, kTolPointwise)) << hd << " " << theta;
    }
  }
}

TEST(RopeSemantics, MatchesHandComputedRotation) {
  // hd = 4, position 1, theta 100: inv_freq = {1, 0.1}; pairs (0,2), (1,3).
  CpuBackend b({1, true});
  auto s = *b.CreateStream();
  std::vector<float> x = {1, 2, 3, 4};
  std::vector<int32_t> pos = {1};
  ASSERT_TRUE(b.RopeRotateHalf(*s, T(x, {1, 1, 4}), T(pos, {1}), 100.0f).ok());
  const double c0 = std::cos(1.0), s0 = std::sin(1.0);
  const double c1 = std::cos(0.1), s1 = std::sin(0.1);
  EXPECT_NEAR(x[0], 1 * c0 - 3 * s0, 1e-6);
  EXPECT_NEAR(x[2], 3 * c0 + 1 * s0, 1e-6);
  EXPECT_NEAR(x[1], 2 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(x[3], 4 * c1 + 2 * s1, 1e-6);
}

// A paged cache with shuffled blocks and several sequences of different
// lengths: one decoding (1 query) at a context of `long_ctx`, one prefilling a
// chunk, one fresh prompt.
void RunAttention(Ops& t, int64_t heads, int64_t kv_heads, int64_t hd,
                  int64_t block_size, Rng& rng, int64_t long_ctx = 37) {
  SCOPED_TRACE(absl::StrCat("heads=", heads, " kv=", kv_heads, " hd=", hd,
                            " block=", block_size, " long_ctx=", long_ctx));
  // Length after writes.
  const std::vector<int64_t> ctx = {long_ctx, 20, 5, 1};
  const std::vector<int64_t> n_new = {1, 7, 5, 1};  // Queries this step.
  const int64_t num_seqs = ctx.size();
  const int64_t max_blocks = (long_ctx + block_size - 1) / block_size + 1;
  const int64_t num_blocks = num_seqs * max_blocks + 3;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = num_blocks - 1; i > 0; --i)
    std::swap(perm[i], perm[rng.Int(i + 1)]);
  std::vector<int32_t> tables(num_seqs * max_blocks);
  std::copy(perm.begin(), perm.begin() + tables.size(), tables.begin());
  const int64_t row = kv_heads * hd;
  auto k_pool = rng.F32(num_blocks * block_size * row);  // Garbage elsewhere.
  auto v_pool = rng.F32(k_pool.size());
  auto k_ref = k_pool, v_ref = v_pool;
  // Every cached position is written: old ones and this step's.
  int64_t total = std::accumulate(ctx.begin(), ctx.end(), int64_t{0});
  std::vector<int32_t> slots;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t p = 0; p < ctx[s]; ++p) {
      slots.push_back(tables[s * max_blocks + p / block_size] * block_size +
                      p % block_size);
    }
  }
  slots.push_back(-1);  // A padding row is skipped.
  ++total;
  auto k_new = rng.F32(total * row, -2, 2), v_new = rng.F32(total * row);
  PagedKvCache cache{Tensor(k_pool.data(), DType::kF32,
                            {num_blocks, block_size, kv_heads, hd}),
                     Tensor(v_pool.data(), DType::kF32,
                            {num_blocks, block_size, kv_heads, hd})};
  PagedKvCache ref_cache{
      Tensor(k_ref.data(), DType::kF32, {num_blocks, block_size, kv_heads, hd}),
      Tensor(v_ref.data(), DType::kF32,
             {num_blocks, block_size, kv_heads, hd})};
  ASSERT_TRUE(t.B()
                  .KvWrite(t.S(), T(k_new, {total, kv_heads, hd}),
                           T(v_new, {total, kv_heads, hd}), T(slots, {total}),
                           cache)
                  .ok());
  ref::KvWrite(T(k_new, {total, kv_heads, hd}), T(v_new, {total, kv_heads, hd}),
               T(slots, {total}), ref_cache);
  EXPECT_EQ(k_pool, k_ref);
  EXPECT_EQ(v_pool, v_ref);

  auto [qstart, pos] = NewTokenQueries(n_new, ctx);
  const int64_t n_q = pos.size();
  auto q = rng.F32(n_q * heads * hd, -2, 2);
  AttentionBatch batch{T(qstart, {num_seqs + 1}), T(pos, {n_q}),
                       T(tables, {num_seqs, max_blocks})};
  std::vector<float> got(n_q * heads * hd, NAN), want(got.size());
  ASSERT_TRUE(t.B()
                  .Attention(t.S(), T(q, {n_q, heads, hd}), cache, batch,
                             T(got, {n_q, heads * hd}))
                  .ok());
  ref::Attention(T(q, {n_q, heads, hd}), ref_cache, batch,
                 T(want, {n_q, heads * hd}));
  EXPECT_TRUE(Close(got, want, kTolDot));
}

TEST_P(Ops, PagedAttention) {
  Rng rng(8);
  RunAttention(*this, 8, 4, 32, 16, rng);
  RunAttention(*this, 8, 4, 128, 16, rng);
  RunAttention(*this, 8, 8, 32, 5, rng);  // MHA, odd block size.
  RunAttention(*this, 8, 1, 40, 3, rng);  // MQA, odd head_dim.
  RunAttention(*this, 4, 2, 20, 4, rng);  // head_dim not a multiple of 8.
  // Long contexts: many blocks of the online softmax, and the vectorised
  // exp over a wide range of score differences (scores up to about +-40).
  RunAttention(*this, 8, 4, 32, 16, rng, 700);
  RunAttention(*this, 4, 4, 64, 7, rng, 300);
}

// Grouped query heads (several per KV head, walked together by the SIMD
// kernel) give bit for bit what each head gives alone: the same attention
// with every KV head duplicated so that each query head has its own copy.
TEST_P(Ops, GroupedHeadsMatchEachHeadAlone) {
  Rng rng(21);
  for (auto [heads, kv_heads, hd] :
       {std::tuple<int64_t, int64_t, int64_t>{8, 2, 32},
        {12, 2, 24},
        {6, 3, 16},
        {10, 1, 40}}) {
    SCOPED_TRACE(absl::StrCat("heads=", heads, " kv=", kv_heads, " hd=", hd));
    const int64_t group = heads / kv_heads, block = 8, ctx = 77;
    const int64_t blocks = (ctx + block - 1) / block;
    auto k = rng.F32(blocks * block * kv_heads * hd, -2, 2);
    auto v = rng.F32(k.size());
    // The same cache with kv head h / group copied to head h.
    std::vector<float> k_mha(blocks * block * heads * hd), v_mha(k_mha.size());
    for (int64_t slot = 0; slot < blocks * block; ++slot) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t from = (slot * kv_heads + h / group) * hd;
        const int64_t to = (slot * heads + h) * hd;
        std::copy(k.begin() + from, k.begin() + from + hd, k_mha.begin() + to);
        std::copy(v.begin() + from, v.begin() + from + hd, v_mha.begin() + to);
      }
    }
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::vector<int32_t> qs = {0, 2}, pos = {ctx - 2, ctx - 1};
    auto q = rng.F32(2 * heads * hd, -2, 2);
    std::vector<float> grouped(q.size(), NAN), alone(q.size(), NAN);
    const AttentionBatch batch{T(qs, {2}), T(pos, {2}), T(table, {1, blocks})};
    ASSERT_TRUE(B().Attention(S(), T(q, {2, heads, hd}),
                              {T(k, {blocks, block, kv_heads, hd}),
                               T(v, {blocks, block, kv_heads, hd})},
                              batch, T(grouped, {2, heads * hd}))
                    .ok());
    ASSERT_TRUE(B().Attention(S(), T(q, {2, heads, hd}),
                              {T(k_mha, {blocks, block, heads, hd}),
                               T(v_mha, {blocks, block, heads, hd})},
                              batch, T(alone, {2, heads * hd}))
                    .ok());
    EXPECT_EQ(grouped, alone);
  }
}

TEST_P(Ops, AttentionSingleTokenIsItsValue) {
  // With one cached position the softmax is 1: out = v.
  const int64_t hd = 8;
  std::vector<float> k_pool(2 * 4 * hd, 0.5f), v_pool(2 * 4 * hd);
  for (size_t i = 0; i < v_pool.size(); ++i) v_pool[i] = float(i);
  std::vector<int32_t> qs = {0, 1}, pos = {0}, table = {1};
  std::vector<float> q(2 * hd, 1.0f), out(2 * hd);
  PagedKvCache c{T(k_pool, {2, 4, 1, hd}), T(v_pool, {2, 4, 1, hd})};
  ASSERT_TRUE(B().Attention(S(), T(q, {1, 2, hd}), c,
                            {T(qs, {2}), T(pos, {1}), T(table, {1, 1})},
                            T(out, {1, 2 * hd}))
                  .ok());
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < hd; ++d) EXPECT_EQ(out[h * hd + d], 4 * hd + d);
  }
}

TEST_P(Ops, RouterTopK) {
  Rng rng(9);
  const int64_t n = 17;
  for (auto [e, k] : std::vector<std::pair<int64_t, int>>{
           {8, 2}, {60, 4}, {64, 8}, {128, 8}}) {
    for (bool normalize : {false, true}) {
      // Distinct logits (gaps >= 0.3) so both sides must pick the same ids.
      std::vector<float> logits(n * e);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<int> perm(e);
        std::iota(perm.begin(), perm.end(), 0);
        for (int64_t i = e - 1; i > 0; --i)
          std::swap(perm[i], perm[rng.Int(i + 1)]);
        for (int64_t j = 0; j < e; ++j) {
          logits[t * e + j] = 0.35f * perm[j] - 5 + rng.Uniform(-0.02f, 0.02f);
        }
      }
      std::vector<float> w(n * k), w_ref(n * k);
      std::vector<int32_t> ids(n * k), ids_ref(n * k);
      ASSERT_TRUE(B().RouterTopK(S(), T(logits, {n, e}), k, normalize,
                                 T(w, {n, k}), T(ids, {n, k}))
                      .ok());
      ref::RouterTopK(T(logits, {n, e}), k, normalize, T(w_ref, {n, k}),
                      T(ids_ref, {n, k}));
      EXPECT_EQ(ids, ids_ref) << e << " " << k;
      EXPECT_TRUE(Close(w, w_ref, kTolPointwise));
    }
  }
}

TEST_P(Ops, RouterTopKTiesGoToLowerIndex) {
  std::vector<float> logits = {1, 3, 3, 0, 3, 3};
  std::vector<float> w(3);
  std::vector<int32_t> ids(3);
  ASSERT_TRUE(B().RouterTopK(S(), T(logits, {1, 6}), 3, true, T(w, {1, 3}),
                             T(ids, {1, 3}))
                  .ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 4}));
  for (float x : w) EXPECT_FLOAT_EQ(x, 1.0f / 3);
}

TEST_P(Ops, PointwiseOps) {
  Rng rng(10);
  for (auto [m, f] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1408}, {3, 14336}, {17, 37}, {8, 4096}}) {
    auto g = rng.F32(m * f, -8, 8), u = rng.F32(m * f, -2, 2);
    std::vector<float> got(m * f), want(m * f);
    ASSERT_TRUE(
        B().SiluMul(S(), T(g, {m, f}), T(u, {m, f}), T(got, {m, f})).ok());
    ref::SiluMul(T(g, {m, f}), T(u, {m, f}), T(want, {m, f}));
    EXPECT_TRUE(Close(got, want, kTolPointwise));

    ASSERT_TRUE(B().Add(S(), T(g, {m, f}), T(u, {m, f}), T(got, {m, f})).ok());
    ref::Add(T(g, {m, f}), T(u, {m, f}), T(want, {m, f}));
    EXPECT_EQ(got, want);  // One rounding: exact.
    ASSERT_TRUE(B().Add(S(), T(g, {m, f}), T(u, {m, f}), T(g, {m, f})).ok());
    EXPECT_EQ(g, want);  // In place.

    auto gate = rng.F32(m, -4, 4);
    auto y = rng.F32(m * f), y_ref = y;
    ASSERT_TRUE(
        B().SigmoidGatedAdd(S(), T(u, {m, f}), T(gate, {m, 1}), T(y, {m, f}))
            .ok());
    ref::SigmoidGatedAdd(T(u, {m, f}), T(gate, {m}), T(y_ref, {m, f}));
    EXPECT_TRUE(Close(y, y_ref, kTolPointwise));
  }
}

TEST_P(Ops, GatherAndScaleAddRows) {
  Rng rng(11);
  const int64_t n = 17, d = 2048, m = 9;
  auto x = rng.F32(n * d);
  std::vector<int32_t> rows = {3, 0, 16, 3, 5, 5, 5, 11, 2};  // Repeats.
  std::vector<float> got(m * d), want(m * d);
  ASSERT_TRUE(
      B().GatherRows(S(), T(x, {n, d}), T(rows, {m}), T(got, {m, d})).ok());
  ref::GatherRows(T(x, {n, d}), T(rows, {m}), T(want, {m, d}));
  EXPECT_EQ(got, want);

  auto w = rng.F32(m, 0, 1);
  auto y = rng.F32(n * d), y_ref = y;
  ASSERT_TRUE(B().ScaleAddRows(S(), T(got, {m, d}), T(rows, {m}), T(w, {m}),
                               T(y, {n, d}))
                  .ok());
  ref::ScaleAddRows(T(got, {m, d}), T(rows, {m}), T(w, {m}), T(y_ref, {n, d}));
  EXPECT_TRUE(Close(y, y_ref, kTolPointwise));
  // Without rows: identity mapping.
  auto y2 = rng.F32(m * d), y2_ref = y2;
  ASSERT_TRUE(
      B().ScaleAddRows(S(), T(got, {m, d}), Tensor(), T(w, {m}), T(y2, {m, d}))
          .ok());
  ref::ScaleAddRows(T(got, {m, d}), Tensor(), T(w, {m}), T(y2_ref, {m, d}));
  EXPECT_TRUE(Close(y2, y2_ref, kTolPointwise));
}

TEST_P(Ops, EmbeddingSoftmaxArgmax) {
  Rng rng(12);
  const int64_t vocab = 1001, d = 256, n = 17;
  auto table = rng.Bf16(vocab * d);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = rng.Int(vocab);
  ids[0] = 0;
  ids[1] = vocab - 1;
  std::vector<float> got(n * d), want(n * d);
  ASSERT_TRUE(
      B().Embedding(S(), T(ids, {n}), T(table, {vocab, d}), T(got, {n, d}))
          .ok());
  ref::Embedding(T(ids, {n}), T(table, {vocab, d}), T(want, {n, d}));
  EXPECT_EQ(got, want);

  for (int64_t v : {32000, 1001, 1}) {
    auto logits = rng.F32(3 * v, -20, 20);
    std::vector<float> p(3 * v), p_ref(3 * v);
    ASSERT_TRUE(B().Softmax(S(), T(logits, {3, v}), T(p, {3, v})).ok());
    ref::Softmax(T(logits, {3, v}), T(p_ref, {3, v}));
    EXPECT_TRUE(Close(p, p_ref, kTolPointwise));
    std::vector<int32_t> am(3), am_ref(3);
    ASSERT_TRUE(B().Argmax(S(), T(logits, {3, v}), T(am, {3})).ok());
    ref::Argmax(T(logits, {3, v}), T(am_ref, {3}));
    EXPECT_EQ(am, am_ref);
  }
  std::vector<float> tied = {0, 5, 1, 5};
  std::vector<int32_t> am(1);
  ASSERT_TRUE(B().Argmax(S(), T(tied, {1, 4}), T(am, {1})).ok());
  EXPECT_EQ(am[0], 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, Ops,
                         ::testing::Values(Config{2, true}, Config{2, false},
                                           Config{1, true}, Config{3, true}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return absl::StrCat(
                               info.param.simd ? "simd" : "scalar", "_",
                               info.param.threads, "t");
                         });

// ---- Every variant of the bf16 matmul (matmul.h), forced by name --------
// A variant this CPU lacks is skipped, never failed. fp32 variants (scalar,
// avx2, avx512) differ from the double-accumulating reference only by fp32
// summation: kTolDot. avx512bf16 and amxbf16 round x to bf16 first (the
// same rounding): kTolBf16ActivationDot against the reference, kTolDot
// against the reference fed the same rounded x, kTolBf16ActivationFfn
// through ExpertFfn (differential.h has the reasoning and the measured
// errors).

class MatMulVariant
    : public ::testing::TestWithParam<std::tuple<Isa, int /*threads*/>> {
 public:
  Isa isa() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }
  // Whether the variant rounds x to bf16.
  bool Bf16X() const {
    return isa() == Isa::kAvx512Bf16 || isa() == Isa::kAmxBf16;
  }
  double Tol() const { return Bf16X() ? kTolBf16ActivationDot : kTolDot; }
  double FfnTol() const { return Bf16X() ? kTolBf16ActivationFfn : kTolDot; }
  // A backend forced to this variant.
  std::unique_ptr<CpuBackend> MakeBackend(int num_threads) const {
    CpuBackendOptions options;
    options.num_threads = num_threads;
    options.isa = isa();
    return std::make_unique<CpuBackend>(options);
  }

 protected:
  void SetUp() override {
    if (!IsaSupported(isa())) {
      GTEST_SKIP() << "this CPU lacks the instructions of the "
                   << IsaName(isa()) << " kernels"
                   << (isa() == Isa::kAmxBf16
                           ? " (AMX-TILE/AMX-BF16, or the OS tile state, or "
                             "the kernel's arch_prctl permission)"
                           : "");
    }
    backend_ = MakeBackend(threads());
    ASSERT_EQ(backend_->isa(), isa());
    auto s = backend_->CreateStream();
    ASSERT_TRUE(s.ok());
    stream_ = std::move(*s);
  }

  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Stream> stream_;
};

// m across the GEMV / register-tile / row-block boundaries; k and n not
// multiples of the tiles (16 or 32 columns of k, 4 or 16 weight rows, 6 or
// 16 x rows). amxbf16 adds m around its 16-row tiles and 2 x 2 tile blocks.
TEST_P(MatMulVariant, MatchesReferenceAcrossShapes) {
  Rng rng(40);
  const std::pair<int64_t, int64_t> shapes[] = {
      {1, 5}, {15, 3}, {37, 13}, {263, 29}, {1000, 515}};
  std::vector<int64_t> ms = {1, 7, 8, 9, 16, 33, 64, 130};
  if (isa() == Isa::kAmxBf16) ms.insert(ms.end(), {17, 31, 32, 48});
  for (auto [k, n] : shapes) {
    for (int64_t m : ms) {
      for (bool bias : {false, true}) {
        RunMatMul(*backend_, *stream_, m, k, n, bias, rng, Tol(), Bf16X());
      }
    }
  }
}

TEST_P(MatMulVariant, MatchesReferenceAtModelShapes) {
  Rng rng(41);
  std::vector<int64_t> ms = {1, 9, 64};
  if (isa() == Isa::kAmxBf16) ms.insert(ms.end(), {16, 17, 31, 32, 48, 130});
  for (int64_t m : ms) {
    RunMatMul(*backend_, *stream_, m, 2048, 1408, false, rng, Tol(), Bf16X());
    RunMatMul(*backend_, *stream_, m, 1408, 2051, true, rng, Tol(), Bf16X());
  }
}

TEST_P(MatMulVariant, ExpertFfnThroughTheBackend) {
  Rng rng(42);
  for (int64_t m : {1, 7, 8, 9, 33}) {
    RunExpertFfn(*backend_, *stream_, m, 256, 512, rng, FfnTol());
    RunExpertFfn(*backend_, *stream_, m, 52, 37, rng, FfnTol());
  }
  RunExpertFfn(*backend_, *stream_, 17, 2048, 1408, rng, FfnTol());
}

// A row's output is the same bits whatever the other rows and the thread
// count: decode (m = 1), batched decode and verification agree exactly.
TEST_P(MatMulVariant, RowResultIndependentOfBatchAndThreads) {
  Rng rng(43);
  const int64_t m = 130, k = 1000, n = 515;
  auto x = rng.F32(m * k);
  auto w = rng.Bf16(n * k);
  auto bias = rng.Bf16(n);
  std::vector<float> all(m * n);
  ASSERT_TRUE(backend_
                  ->MatMul(*stream_, T(x, {m, k}), T(w, {n, k}), T(bias, {n}),
                           T(all, {m, n}))
                  .ok());
  auto other = MakeBackend(threads() == 1 ? 3 : 1);
  auto s = other->CreateStream();
  ASSERT_TRUE(s.ok());
  for (auto [r0, rows] : {std::pair<int64_t, int64_t>{0, 1},
                          {5, 1},
                          {7, 7},
                          {64, 9},
                          {66, 64},
                          {3, 16},
                          {17, 33},
                          {100, 30}}) {
    SCOPED_TRACE(absl::StrCat("rows ", r0, " + ", rows));
    std::vector<float> xs(x.begin() + r0 * k, x.begin() + (r0 + rows) * k);
    std::vector<float> got(rows * n, NAN);
    ASSERT_TRUE(other
                    ->MatMul(**s, T(xs, {rows, k}), T(w, {n, k}), T(bias, {n}),
                             T(got, {rows, n}))
                    .ok());
    EXPECT_EQ(got, std::vector<float>(all.begin() + r0 * n,
                                      all.begin() + (r0 + rows) * n));
  }
}

// The weights end where an inaccessible page begins, so a kernel that reads
// one byte past W (a full-width load of the last k block of the last rows,
// an A tile of 16 rows where fewer are left) dies here instead of reading a
// neighbour's bytes. Shapes with k and n tails of every tile size.
TEST_P(MatMulVariant, ReadsNothingPastTheWeights) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  Rng rng(44);
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 19},
                         {17, 37, 19},
                         {33, 1000, 515},
                         {16, 63, 33},
                         {17, 37, 32},
                         {1, 1000, 16},
                         {2, 2048, 17}}) {
    SCOPED_TRACE(absl::StrCat("m=", m, " k=", k, " n=", n));
    const int64_t bytes = n * k * static_cast<int64_t>(sizeof(bf16));
    const int64_t span = (bytes + page - 1) / page * page;
    void* map = mmap(nullptr, span + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(map, MAP_FAILED);
    auto* base = static_cast<char*>(map);
    ASSERT_EQ(mprotect(base + span, page, PROT_NONE), 0);
    auto* w = reinterpret_cast<bf16*>(base + span - bytes);
    const std::vector<bf16> wv = rng.Bf16(n * k);
    std::copy(wv.begin(), wv.end(), w);
    std::vector<float> x = rng.F32(m * k), got(m * n, NAN), want(m * n);
    std::vector<bf16> wcopy = wv;
    ASSERT_TRUE(backend_
                    ->MatMul(*stream_, T(x, {m, k}),
                             Tensor(w, DType::kBF16, {n, k}), Tensor(),
                             T(got, {m, n}))
                    .ok());
    ref::MatMul(T(x, {m, k}), T(wcopy, {n, k}), Tensor(), T(want, {m, n}));
    EXPECT_TRUE(Close(got, want, Tol()));
    munmap(map, span + page);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, MatMulVariant,
    ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512,
                                         Isa::kAvx512Bf16, Isa::kAmxBf16),
                       ::testing::Values(1, 2)),
    [](const ::testing::TestParamInfo<std::tuple<Isa, int>>& info) {
      return absl::StrCat(IsaName(std::get<0>(info.param)), "_",
                          std::get<1>(info.param), "t");
    });

TEST(KernelIsa, NamesClampingAndDefault) {
  const Isa all[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16,
                     Isa::kAmxBf16};
  for (Isa isa : all) {
    EXPECT_EQ(ParseIsa(IsaName(isa)), isa);
    const Isa clamped = ClampIsa(isa);
    EXPECT_LE(clamped, isa);
    EXPECT_TRUE(IsaSupported(clamped));
    if (IsaSupported(isa)) {
      EXPECT_EQ(clamped, isa);
    }
  }
  EXPECT_FALSE(ParseIsa("amx").has_value());
  EXPECT_FALSE(ParseIsa("AVX2").has_value());
  EXPECT_FALSE(ParseIsa("").has_value());
  // The default keeps fp32 semantics; it is the best such variant.
  EXPECT_TRUE(IsaSupported(BestIsa()));
  EXPECT_LE(BestIsa(), Isa::kAvx512);
  EXPECT_EQ(BestIsa(), ClampIsa(Isa::kAvx512));
}

// A forced variant names the backend and picks the int4 kernel too: the
// highest int4 variant at or below it that this CPU has (amxbf16 has no
// int4 kernel of its own: avx512bf16 where the CPU has AVX512_BF16).
TEST(KernelIsa, ForcedVariantNamesTheBackendAndPicksInt4) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16,
                  Isa::kAmxBf16}) {
    CpuBackendOptions options;
    options.num_threads = 2;
    options.isa = isa;
    CpuBackend b(options);
    EXPECT_EQ(b.isa(), ClampIsa(isa));
    EXPECT_EQ(b.name(), absl::StrCat("cpu-", IsaName(ClampIsa(isa)), "-2t"));
    EXPECT_EQ(b.int4_isa(), ClampInt4Isa(isa));
    EXPECT_LE(b.int4_isa(), std::min(isa, Isa::kAvx512Bf16));
    EXPECT_TRUE(Int4IsaSupported(b.int4_isa()));
  }
  // The default keeps the int4 kernels' fp32 semantics.
  EXPECT_EQ(CpuBackend(CpuBackendOptions{2, true}).int4_isa(),
            IsaFromEnvironment() ? ClampInt4Isa(*IsaFromEnvironment())
                                 : BestInt4Isa());
}

// ---- Refusals: bad calls return InvalidArgument, never crash. ----------

class Refuses : public ::testing::Test {
 protected:
  Refuses() : b_({2, true}), s_(*b_.CreateStream()) {}
  void ExpectInvalid(const absl::Status& st) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  CpuBackend b_;
  std::unique_ptr<Stream> s_;
};

TEST_F(Refuses, MatMulBadDtypeShapeDeviceAlias) {
  std::vector<float> x(4 * 8), y(4 * 6), wf(6 * 8);
  std::vector<bf16> w(6 * 8), bias(5);
  Stream& s = *s_;
  ExpectInvalid(b_.MatMul(s, T(x, {4, 8}), T(wf, {6, 8}), {}, T(y, {4, 6})));
  ExpectInvalid(b_.MatMul(s, T(x, {4, 8}), T(w, {8, 6}), {}, T(y, {4, 6})));
  ExpectInvalid(b_.MatMul(s, T(x, {4, 8}), T(w, {6, 8}), {}, T(y, {6, 4})));
  ExpectInvalid(b_.MatMul(s, T(x, {32}), T(w, {6, 8}), {}, T(y, {4, 6})));
  ExpectInvalid(
      b_.MatMul(s, T(x, {4, 8}), T(w, {6, 8}), T(bias, {5}), T(y, {4, 6})));
  ExpectInvalid(b_.MatMul(s, T(x, {4, 8}),
                          Tensor(w.data(), DType::kBF16, {6, 8}, Device::kCuda),
                          {}, T(y, {4, 6})));
  ExpectInvalid(b_.MatMul(s, T(x, {4, 8}), Tensor(w.data(), DType::kI4, {6, 8}),
                          {}, T(y, {4, 6})));
  ExpectInvalid(b_.MatMul(s, T(x, {4, 8}), T(w, {6, 8}), {},
                          Tensor(x.data(), DType::kF32, {4, 6})));  // Alias.
  ExpectInvalid(b_.MatMul(s, Tensor(nullptr, DType::kF32, {4, 8}), T(w, {6, 8}),
                          {}, T(y, {4, 6})));
  // A stream of another backend.
  CpuBackend other({1, true});
  auto foreign = *other.CreateStream();
  ExpectInvalid(
      b_.MatMul(*foreign, T(x, {4, 8}), T(w, {6, 8}), {}, T(y, {4, 6})));
  EXPECT_TRUE(b_.MatMul(s, T(x, {4, 8}), T(w, {6, 8}), {}, T(y, {4, 6})).ok());
}

TEST_F(Refuses, IndexValuesOutOfRange) {
  Stream& s = *s_;
  std::vector<bf16> table(10 * 4);
  std::vector<float> out(2 * 4), x(3 * 4);
  std::vector<int32_t> bad_ids = {3, 10}, neg_ids = {-1, 0};
  ExpectInvalid(
      b_.Embedding(s, T(bad_ids, {2}), T(table, {10, 4}), T(out, {2, 4})));
  ExpectInvalid(
      b_.Embedding(s, T(neg_ids, {2}), T(table, {10, 4}), T(out, {2, 4})));
  ExpectInvalid(
      b_.GatherRows(s, T(x, {3, 4}), T(bad_ids, {2}), T(out, {2, 4})));
  std::vector<float> w(2);
  ExpectInvalid(b_.ScaleAddRows(s, T(out, {2, 4}), T(bad_ids, {2}), T(w, {2}),
                                T(x, {3, 4})));
  std::vector<float> rope(2 * 1 * 4);
  ExpectInvalid(
      b_.RopeRotateHalf(s, T(rope, {2, 1, 4}), T(neg_ids, {2}), 1e4f));
  std::vector<float> odd(2 * 1 * 5);
  std::vector<int32_t> pos = {0, 1};
  ExpectInvalid(b_.RopeRotateHalf(s, T(odd, {2, 1, 5}), T(pos, {2}), 1e4f));
  ExpectInvalid(b_.RopeRotateHalf(s, T(rope, {2, 1, 4}), T(pos, {2}), -1.0f));
}

TEST_F(Refuses, RouterAndExpertFfn) {
  Stream& s = *s_;
  std::vector<float> logits(2 * 8), w(2 * 9);
  std::vector<int32_t> ids(2 * 9);
  ExpectInvalid(b_.RouterTopK(s, T(logits, {2, 8}), 9, true, T(w, {2, 9}),
                              T(ids, {2, 9})));
  ExpectInvalid(b_.RouterTopK(s, T(logits, {2, 8}), 0, true, T(w, {2, 0}),
                              T(ids, {2, 0})));
  ExpectInvalid(b_.RouterTopK(s, T(logits, {2, 8}), 2, true, T(w, {2, 3}),
                              T(ids, {2, 2})));
  std::vector<float> x(3 * 16), out(3 * 16), ws(3 * 3 * 8);
  std::vector<bf16> blob(3 * 8 * 16);
  ExpectInvalid(b_.ExpertFfn(s, T(x, {3, 16}), T(blob, {3 * 8 * 16}), 7,
                             T(ws, {72}), T(out, {3, 16})));  // Wrong ffn.
  ExpectInvalid(b_.ExpertFfn(s, T(x, {3, 16}), T(blob, {3 * 8 * 16}), 8,
                             T(ws, {71}), T(out, {3, 16})));  // Small ws.
  ExpectInvalid(b_.ExpertFfn(s, T(x, {3, 16}), T(blob, {3 * 8 * 16}), 8,
                             T(ws, {72}), T(ws, {3, 16})));  // Out aliases ws.
  EXPECT_TRUE(b_.ExpertFfn(s, T(x, {3, 16}), T(blob, {3 * 8 * 16}), 8,
                           T(ws, {72}), T(out, {3, 16}))
                  .ok());
}

TEST_F(Refuses, ExpertFfnInt4) {
  Stream& s = *s_;
  Rng rng(18);
  QuantizedExpert e(32, 16, rng);
  std::vector<float> x(3 * 32), out(3 * 32), ws(3 * 3 * 16);
  std::vector<bf16> bf(e.layout.bytes / 2);
  auto run = [&](const Tensor& xt, const Tensor& blob,
                 const Int4ExpertLayout& layout, const Tensor& wst,
                 const Tensor& outt) {
    return b_.ExpertFfnInt4(s, xt, blob, layout, wst, outt);
  };
  auto expect_invalid_naming = [&](const absl::Status& st, const char* what) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
  };
  EXPECT_TRUE(
      run(T(x, {3, 32}), e.View(), e.layout, T(ws, {144}), T(out, {3, 32}))
          .ok());
  expect_invalid_naming(
      run(T(x, {3, 16}), e.View(), e.layout, T(ws, {144}), T(out, {3, 32})),
      "x");
  expect_invalid_naming(run(T(x, {3, 32}), T(bf, {e.layout.bytes / 2}),
                            e.layout, T(ws, {144}), T(out, {3, 32})),
                        "blob");
  expect_invalid_naming(
      run(T(x, {3, 32}), Tensor(e.blob.data, DType::kU8, {e.layout.bytes - 1}),
          e.layout, T(ws, {144}), T(out, {3, 32})),
      "blob");
  expect_invalid_naming(
      run(T(x, {3, 32}), Tensor(e.blob.data + 1, DType::kU8, {e.layout.bytes}),
          e.layout, T(ws, {144}), T(out, {3, 32})),
      "aligned");
  Int4ExpertLayout bad = e.layout;
  bad.down_q += 64;
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), bad, T(ws, {144}), T(out, {3, 32})),
      "layout");
  bad = e.layout;
  bad.group_in = 3;
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), bad, T(ws, {144}), T(out, {3, 32})),
      "layout");
  bad = e.layout;
  bad.scale_type = static_cast<Int4ScaleType>(7);
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), bad, T(ws, {144}), T(out, {3, 32})),
      "scale_type");
  bad = e.layout;
  bad.has_zeros = true;  // Zeros claimed, but no offsets (nor bytes) for them.
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), bad, T(ws, {144}), T(out, {3, 32})),
      "layout");
  CheckpointExpert z(32, 16, 32, 16, {Int4ScaleType::kF16, true}, rng);
  EXPECT_TRUE(
      run(T(x, {3, 32}), z.View(), z.layout, T(ws, {144}), T(out, {3, 32}))
          .ok());
  bad = z.layout;
  bad.down_zeros += 64;
  expect_invalid_naming(
      run(T(x, {3, 32}), z.View(), bad, T(ws, {144}), T(out, {3, 32})),
      "layout");
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), z.layout, T(ws, {144}), T(out, {3, 32})),
      "blob");  // The draft's blob is smaller.
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), e.layout, T(ws, {143}), T(out, {3, 32})),
      "workspace");
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), e.layout, T(ws, {144}), T(out, {2, 32})),
      "out");
  ExpectInvalid(run(T(x, {3, 32}), e.View(), e.layout, T(ws, {144}),
                    T(ws, {3, 32})));  // Out aliases the workspace.
  ExpectInvalid(
      run(T(x, {3, 32}),
          Tensor(e.blob.data, DType::kU8, {e.layout.bytes}, Device::kCuda),
          e.layout, T(ws, {144}), T(out, {3, 32})));
}

TEST_F(Refuses, KvCacheAndAttention) {
  Stream& s = *s_;
  const int64_t nb = 4, bs = 4, kvh = 2, hd = 8;
  std::vector<float> kp(nb * bs * kvh * hd), vp(kp.size());
  PagedKvCache c{T(kp, {nb, bs, kvh, hd}), T(vp, {nb, bs, kvh, hd})};
  std::vector<float> k(2 * kvh * hd), v(k.size());
  std::vector<int32_t> slots = {0, nb * bs};  // Second is one past the end.
  ExpectInvalid(
      b_.KvWrite(s, T(k, {2, kvh, hd}), T(v, {2, kvh, hd}), T(slots, {2}), c));
  PagedKvCache mixed{T(kp, {nb, bs, kvh, hd}), T(vp, {nb, bs, kvh, hd + 0})};
  mixed.v_pool = Tensor(vp.data(), DType::kF32, {nb, bs, hd, kvh});
  slots = {0, 1};
  ExpectInvalid(b_.KvWrite(s, T(k, {2, kvh, hd}), T(v, {2, kvh, hd}),
                           T(slots, {2}), mixed));

  const int64_t heads = 4;
  std::vector<float> q(2 * heads * hd), out(2 * heads * hd);
  std::vector<int32_t> qs = {0, 2}, pos = {3, 4}, table = {1, 2};
  auto run = [&](int64_t q_heads) {
    return b_.Attention(s, Tensor(q.data(), DType::kF32, {2, q_heads, hd}), c,
                        {T(qs, {2}), T(pos, {2}), T(table, {1, 2})},
                        Tensor(out.data(), DType::kF32, {2, q_heads * hd}));
  };
  EXPECT_TRUE(run(heads).ok());
  ExpectInvalid(run(3));  // Not a multiple of kv_heads.
  pos = {3, 8};           // Beyond the 2 blocks of the table.
  ExpectInvalid(run(heads));
  pos = {3, 4};
  table = {1, nb};  // Block id outside the pool.
  ExpectInvalid(run(heads));
  table = {1, 2};
  qs = {0, 1};  // Does not cover all query rows.
  ExpectInvalid(run(heads));
  qs = {0, 2};
  ExpectInvalid(b_.Attention(s, T(q, {2, heads, hd}), c,
                             {T(qs, {2}), T(pos, {2}), T(table, {2, 1})},
                             T(out, {2, heads * hd})));
}

}  // namespace
}  // namespace moeserve::kernels::cpu
