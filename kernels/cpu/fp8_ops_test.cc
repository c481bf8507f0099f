// ExpertFfnFp8 on the CPU (matmul_fp8.h) against the dequantize-then-fp32
// reference (ref::ExpertFfnFp8), every fp8 kernel variant this CPU has
// (scalar, AVX2+F16C, AVX-512BW) x {1, 2} threads, at the shapes the bf16
// and int4 expert kernels are tested at (demo 256 x 96 and 256 x 128,
// m = 1, 3, 8, 17) with 128 x 128 blocks (partial edge tiles), per-channel
// and per-tensor scales, plus odd shapes and tiles that leave scalar tails.
// The dequantised weights are the reference's bit for bit (every one of the
// 256 codes is checked through the SIMD decode), so only fp32 summation
// differs: kTolDot. Also: rows independent of m and threads, NaN codes,
// ExpertFfnGrouped with fp8 experts, the Counting/Null backends, refusals.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/counting_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_fp8.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/fp8_expert.h"
#include "kernels/null_backend.h"
#include "kernels/tensor.h"
#include "kernels/testing/differential.h"

namespace moeserve::kernels::cpu {
namespace {

using ::moeserve::kernels::testing::Close;
using ::moeserve::kernels::testing::kTolDot;
using ::moeserve::kernels::testing::Rng;

Tensor T(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return Tensor(v.data(), DType::kF32, shape);
}

// layout.bytes of 64-byte aligned host memory (the op wants 16).
struct Fp8Blob {
  explicit Fp8Blob(int64_t bytes) : storage(bytes + 64) {
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((64 - base % 64) % 64);
  }
  std::byte* bytes() { return reinterpret_cast<std::byte*>(data); }
  std::vector<uint8_t> storage;
  uint8_t* data;
};

// A random bf16 expert, quantized to fp8 with the given tile.
struct Fp8Expert {
  Fp8Expert(int64_t hidden, int64_t ffn, int64_t br, int64_t bc, Rng& rng)
      : layout(*MakeFp8ExpertLayout(hidden, ffn, br, bc)),
        weights(rng.Bf16(3 * ffn * hidden, -0.1f, 0.1f)),
        blob(layout.bytes) {
    QuantizeExpertFp8(weights.data(), layout, blob.bytes());
  }
  Tensor View() { return Tensor(blob.data, DType::kU8, {layout.bytes}); }
  Fp8ExpertLayout layout;
  std::vector<bf16> weights;
  Fp8Blob blob;
};

struct Tile {
  int64_t rows, cols;
  const char* name;
};
constexpr Tile kBlock128{128, 128, "block128"};
constexpr Tile kChannel{1, kFp8Whole, "channel"};
constexpr Tile kTensor{kFp8Whole, kFp8Whole, "tensor"};

// A backend whose fp8 kernels are `isa` (scalar, avx2 or avx512).
CpuBackendOptions OptionsFor(Isa isa, int threads) {
  CpuBackendOptions o;
  o.num_threads = threads;
  o.use_simd = isa != Isa::kScalar;
  o.use_avx512 = isa == Isa::kAvx512;
  return o;
}

class Fp8Variant
    : public ::testing::TestWithParam<std::tuple<Isa, int /*threads*/>> {
 protected:
  void SetUp() override {
    if (isa() > BestFp8Isa()) {
      GTEST_SKIP() << "this CPU lacks the instructions of the "
                   << IsaName(isa()) << " fp8 kernels";
    }
    backend_ = std::make_unique<CpuBackend>(OptionsFor(isa(), threads()));
    ASSERT_EQ(backend_->fp8_isa(), isa());
    auto s = backend_->CreateStream();
    ASSERT_TRUE(s.ok());
    stream_ = std::move(*s);
  }
  Isa isa() const { return std::get<0>(GetParam()); }
  int threads() const { return std::get<1>(GetParam()); }

  void Run(Fp8Expert& e, int64_t m, Rng& rng) {
    const int64_t hidden = e.layout.hidden, ffn = e.layout.ffn;
    SCOPED_TRACE(absl::StrCat("m=", m, " hidden=", hidden, " ffn=", ffn,
                              " tile=", e.layout.block_rows, "x",
                              e.layout.block_cols));
    auto x = rng.F32(m * hidden);
    std::vector<float> ws(ExpertFfnWorkspaceElems(m, ffn), NAN);
    std::vector<float> got(m * hidden, NAN), want(m * hidden);
    absl::Status st = backend_->ExpertFfnFp8(
        *stream_, T(x, {m, hidden}), e.View(), e.layout,
        T(ws, {int64_t(ws.size())}), T(got, {m, hidden}));
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(stream_->Synchronize().ok());
    ref::ExpertFfnFp8(T(x, {m, hidden}), e.View(), e.layout,
                      T(want, {m, hidden}));
    EXPECT_TRUE(Close(got, want, kTolDot));
  }

  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Stream> stream_;
};

TEST_P(Fp8Variant, DemoShapesEveryGranularity) {
  Rng rng(31);
  for (auto [hidden, ffn] :
       {std::pair<int64_t, int64_t>{256, 96}, {256, 128}}) {
    for (Tile tile : {kBlock128, kChannel, kTensor}) {
      SCOPED_TRACE(tile.name);
      Fp8Expert e(hidden, ffn, tile.rows, tile.cols, rng);
      for (int64_t m : {1, 3, 8, 17}) Run(e, m, rng);
    }
  }
}

TEST_P(Fp8Variant, OddShapesAndTilesWithTails) {
  Rng rng(32);
  // Partial 128-blocks both ways (300 x 200); tiles of 48 columns (a 32-step
  // plus a 16-step on AVX-512, tails on neither) and of 40 (tails); sizes
  // that are no multiple of 8 or 16 anywhere.
  const std::tuple<int64_t, int64_t, int64_t, int64_t> cases[] = {
      {200, 300, 128, 128},        {144, 40, 128, 128},
      {200, 72, 16, 48},           {160, 80, 3, 40},
      {52, 37, 1, kFp8Whole},      {52, 37, 128, 128},
      {8, 5, kFp8Whole, kFp8Whole}};
  for (auto [hidden, ffn, br, bc] : cases) {
    Fp8Expert e(hidden, ffn, br, bc, rng);
    for (int64_t m : {1, 5, 17}) Run(e, m, rng);
  }
}

TEST_P(Fp8Variant, RowsDoNotDependOnTheBatch) {
  Rng rng(33);
  Fp8Expert e(256, 96, 128, 128, rng);
  const int64_t m = 17, hidden = 256, ffn = 96;
  auto x = rng.F32(m * hidden);
  std::vector<float> ws(ExpertFfnWorkspaceElems(m, ffn));
  std::vector<float> all(m * hidden), one(hidden);
  ASSERT_TRUE(backend_
                  ->ExpertFfnFp8(*stream_, T(x, {m, hidden}), e.View(),
                                 e.layout, T(ws, {int64_t(ws.size())}),
                                 T(all, {m, hidden}))
                  .ok());
  for (int64_t r = 0; r < m; ++r) {
    Tensor xr(x.data() + r * hidden, DType::kF32, {1, hidden});
    ASSERT_TRUE(backend_
                    ->ExpertFfnFp8(*stream_, xr, e.View(), e.layout,
                                   T(ws, {int64_t(ws.size())}),
                                   T(one, {1, hidden}))
                    .ok());
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * hidden,
                             hidden * sizeof(float)))
        << "row " << r;
  }
}

// Every code through the kernel's decode: x = identity, so y[r, j] is
// weight (j, r) alone (one product, the other terms exact zeros): the
// dequantised weight bit for bit, for all 254 finite codes in every
// position of a 32-column step and in the scalar tails.
TEST_P(Fp8Variant, EveryCodeDecodesExactly) {
  for (int64_t k : {256, 270}) {
    const int64_t n = 6;
    Fp8Blob q(n * k);
    std::vector<float> scales = {0.0123f, -3.5f, 1e-30f, 7.0f};  // [2, 2]
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < k; ++c) {
        uint8_t code = static_cast<uint8_t>((c + 37 * j) % 256);
        if ((code & 0x7f) == 0x7f) code = 0x41;
        q.data[j * k + c] = code;
      }
    }
    const Fp8Matrix w{q.data, scales.data(), n, k, 4, (k + 1) / 2};
    std::vector<float> x(k * k, 0.0f), y(k * n, NAN);
    for (int64_t r = 0; r < k; ++r) x[r * k + r] = 1.0f;
    ThreadPool pool(threads());
    MatMulFp8(pool, isa(), x.data(), k, w, nullptr, y.data());
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const float want = Fp8At(w, j, r);
        ASSERT_EQ(y[r * n + j], want)
            << "k " << k << " weight (" << j << ", " << r << ") code "
            << int{q.data[j * k + r]} << ": " << y[r * n + j] << " vs " << want;
      }
    }
  }
}

TEST_P(Fp8Variant, NanCodeReachesOnlyItsColumn) {
  const int64_t n = 5, k = 64, m = 3;
  Fp8Blob q(n * k);
  std::memset(q.data, 0x38, n * k);  // 1.0
  q.data[2 * k + 40] = 0x7f;         // NaN in weight row 2.
  q.data[4 * k + 63] = 0xff;         // -NaN in weight row 4, last column.
  std::vector<float> scales(n, 0.5f);
  const Fp8Matrix w{q.data, scales.data(), n, k, 1, k};
  std::vector<float> x(m * k, 0.25f), y(m * n);
  ThreadPool pool(threads());
  MatMulFp8(pool, isa(), x.data(), m, w, nullptr, y.data());
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      if (j == 2 || j == 4) {
        EXPECT_TRUE(std::isnan(y[r * n + j])) << r << ", " << j;
      } else {
        EXPECT_EQ(y[r * n + j], 0.125f * k) << r << ", " << j;
      }
    }
  }
}

// Grouped fp8 experts (the base class's per-group loop) give each row what
// ExpertFfnFp8 gives it alone, bit for bit.
TEST_P(Fp8Variant, GroupedMatchesPerExpert) {
  Rng rng(34);
  const int64_t hidden = 256, ffn = 96, n = 5;
  std::vector<std::unique_ptr<Fp8Expert>> experts;
  for (int i = 0; i < 3; ++i) {
    experts.push_back(std::make_unique<Fp8Expert>(hidden, ffn, 128, 128, rng));
  }
  auto x = rng.F32(n * hidden);
  std::vector<int32_t> rows = {0, 3, 4, 1, 1, 2, 0};
  const std::vector<ExpertGroup> groups = {{experts[0]->blob.data, 0, 3},
                                           {experts[1]->blob.data, 3, 0},
                                           {experts[2]->blob.data, 3, 4}};
  const int64_t pairs = rows.size();
  std::vector<float> ws(GroupedExpertWorkspaceElems(pairs, ffn, hidden));
  std::vector<float> out(pairs * hidden, NAN);
  GroupedExperts call;
  call.x = T(x, {n, hidden});
  call.rows = Tensor(rows.data(), DType::kI32, {pairs});
  call.groups = groups;
  call.fp8 = &experts[0]->layout;
  absl::Status st = backend_->ExpertFfnGrouped(
      *stream_, call, T(ws, {int64_t(ws.size())}), T(out, {pairs, hidden}));
  ASSERT_TRUE(st.ok()) << st;
  std::vector<float> one(hidden), w1(ExpertFfnWorkspaceElems(1, ffn));
  for (const ExpertGroup& g : groups) {
    Fp8Expert& e = *experts[&g - groups.data()];
    for (int64_t p = g.begin; p < g.begin + g.count; ++p) {
      Tensor xr(x.data() + rows[p] * hidden, DType::kF32, {1, hidden});
      ASSERT_TRUE(backend_
                      ->ExpertFfnFp8(*stream_, xr, e.View(), e.layout,
                                     T(w1, {int64_t(w1.size())}),
                                     T(one, {1, hidden}))
                      .ok());
      EXPECT_EQ(0, std::memcmp(one.data(), out.data() + p * hidden,
                               hidden * sizeof(float)))
          << "pair " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, Fp8Variant,
    ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2,
                                         Isa::kAvx512),
                       ::testing::Values(1, 2)),
    [](const ::testing::TestParamInfo<std::tuple<Isa, int>>& info) {
      return absl::StrCat(IsaName(std::get<0>(info.param)), "_",
                          std::get<1>(info.param), "t");
    });

TEST(Fp8Isa, ForcedVariantCapsFp8) {
  CpuBackendOptions o;
  o.isa = Isa::kAvx2;
  EXPECT_LE(CpuBackend(o).fp8_isa(), Isa::kAvx2);
  o.isa = Isa::kAmxBf16;  // Clamped: the fp8 kernels stop at avx512.
  EXPECT_EQ(CpuBackend(o).fp8_isa(), BestFp8Isa());
  EXPECT_EQ(CpuBackend(OptionsFor(Isa::kScalar, 1)).fp8_isa(), Isa::kScalar);
}

// Mixtral-sized (4096 x 14336) at decode m = 1 on the best variant.
TEST(ExpertFfnFp8, MixtralShapeAtM1) {
  Rng rng(35);
  Fp8Expert e(4096, 14336, 128, 128, rng);
  CpuBackend b(OptionsFor(BestFp8Isa(), 2));
  auto s = b.CreateStream();
  ASSERT_TRUE(s.ok());
  auto x = rng.F32(4096);
  std::vector<float> ws(ExpertFfnWorkspaceElems(1, 14336)), got(4096),
      want(4096);
  ASSERT_TRUE(b.ExpertFfnFp8(**s, T(x, {1, 4096}), e.View(), e.layout,
                             T(ws, {int64_t(ws.size())}), T(got, {1, 4096}))
                  .ok());
  ref::ExpertFfnFp8(T(x, {1, 4096}), e.View(), e.layout, T(want, {1, 4096}));
  EXPECT_TRUE(Close(got, want, kTolDot));
}

// ---- Refusals and the wrapper backends.

TEST(ExpertFfnFp8, RefusesBadCalls) {
  CpuBackend b({2, true});
  auto sp = b.CreateStream();
  ASSERT_TRUE(sp.ok());
  Stream& s = **sp;
  Rng rng(36);
  Fp8Expert e(32, 16, 128, 128, rng);
  std::vector<float> x(3 * 32), out(3 * 32), ws(3 * 3 * 16);
  std::vector<bf16> bf(e.layout.bytes / 2);
  auto run = [&](const Tensor& xt, const Tensor& blob,
                 const Fp8ExpertLayout& layout, const Tensor& wst,
                 const Tensor& outt) {
    return b.ExpertFfnFp8(s, xt, blob, layout, wst, outt);
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
  expect_invalid_naming(
      run(T(x, {3, 32}), Tensor(bf.data(), DType::kBF16, {e.layout.bytes / 2}),
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
  Fp8ExpertLayout bad = e.layout;
  bad.down_q += 64;
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), bad, T(ws, {144}), T(out, {3, 32})),
      "layout");
  bad = e.layout;
  bad.block_cols = 0;
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), bad, T(ws, {144}), T(out, {3, 32})),
      "layout");
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), e.layout, T(ws, {143}), T(out, {3, 32})),
      "workspace");
  expect_invalid_naming(
      run(T(x, {3, 32}), e.View(), e.layout, T(ws, {144}), T(out, {2, 32})),
      "out");
  EXPECT_EQ(run(T(x, {3, 32}), e.View(), e.layout, T(ws, {144}), T(ws, {3, 32}))
                .code(),
            absl::StatusCode::kInvalidArgument);  // Out aliases workspace.
  EXPECT_EQ(
      run(T(x, {3, 32}),
          Tensor(e.blob.data, DType::kU8, {e.layout.bytes}, Device::kCuda),
          e.layout, T(ws, {144}), T(out, {3, 32}))
          .code(),
      absl::StatusCode::kInvalidArgument);

  // Grouped: both layouts, a misaligned blob.
  Int4ExpertLayout int4;
  std::vector<int32_t> rows = {0};
  std::vector<float> gws(GroupedExpertWorkspaceElems(1, 16, 32)), gout(32);
  const ExpertGroup group{e.blob.data + 1, 0, 1};
  GroupedExperts call;
  call.x = T(x, {3, 32});
  call.rows = Tensor(rows.data(), DType::kI32, {1});
  call.groups = {&group, 1};
  call.fp8 = &e.layout;
  expect_invalid_naming(
      b.ExpertFfnGrouped(s, call, T(gws, {int64_t(gws.size())}),
                         T(gout, {1, 32})),
      "fp8 blob must be 16-byte aligned");
  call.int4 = &int4;
  expect_invalid_naming(
      b.ExpertFfnGrouped(s, call, T(gws, {int64_t(gws.size())}),
                         T(gout, {1, 32})),
      "both");
}

TEST(ExpertFfnFp8, CountingAndNullBackends) {
  Rng rng(37);
  Fp8Expert e(32, 16, 1, kFp8Whole, rng);
  std::vector<float> x(2 * 32), out(2 * 32), ws(2 * 3 * 16);
  CpuBackend cpu({1, true});
  CountingBackend counting(&cpu);
  auto s = counting.CreateStream();
  ASSERT_TRUE(s.ok());
  const int64_t before = counting.counts().launches;
  ASSERT_TRUE(counting
                  .ExpertFfnFp8(**s, T(x, {2, 32}), e.View(), e.layout,
                                T(ws, {96}), T(out, {2, 32}))
                  .ok());
  EXPECT_EQ(counting.counts().launches, before + 1);

  NullBackend null;
  auto ns = null.CreateStream();
  ASSERT_TRUE(ns.ok());
  EXPECT_TRUE(null.ExpertFfnFp8(**ns, T(x, {2, 32}), e.View(), e.layout,
                                T(ws, {96}), T(out, {2, 32}))
                  .ok());
  EXPECT_EQ(null.ExpertFfnFp8(**ns, T(x, {2, 32}), e.View(), e.layout,
                              T(ws, {95}), T(out, {2, 32}))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moeserve::kernels::cpu
