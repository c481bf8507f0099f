// CudaBackend's graph regions (Backend::RunGraph, issue 30 item 3) on a
// GPU: a body is captured once per key and replayed without being called,
// reading inputs refreshed in device memory between replays; graphs off
// runs it eagerly; a body that fails records nothing; a body the capture
// cannot take (a sync) runs eagerly from then on; a region inside a region
// is refused; cuBLASLt GEMMs record and replay bit for bit. Every test
// skips without a CUDA device. The whole-model check is
// //engine:cuda_graphs_test.
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_test_util.h"

namespace moeserve::kernels::cuda {
namespace {

using ::moeserve::kernels::cuda::test_util::BackendAndStream;
using ::moeserve::kernels::cuda::test_util::DeviceBuf;
using ::moeserve::kernels::cuda::test_util::MakeBackend;

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i);
  return v;
}

class CudaGraphRegion : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = MakeBackend({.graphs = true});
    MOESERVE_SKIP_WITHOUT_CUDA(d.status());
    ASSERT_TRUE(d.ok()) << d.status();
    bs_ = std::move(*d);
  }
  CudaBackend& B() { return *bs_.backend; }
  Stream& S() { return *bs_.stream; }

  // out = a + b, then out += b: two launches.
  absl::Status AddTwice(const DeviceBuf<float>& a, const DeviceBuf<float>& b,
                        const DeviceBuf<float>& out) {
    const Tensor ta = a.View({4, 8}), tb = b.View({4, 8}),
                 to = out.View({4, 8});
    if (absl::Status st = B().Add(S(), ta, tb, to); !st.ok()) return st;
    return B().Add(S(), to, tb, to);
  }

  BackendAndStream bs_;
};

TEST_F(CudaGraphRegion, RecordsOnceAndReplaysWithFreshInputs) {
  ASSERT_TRUE(B().graphs_enabled());
  DeviceBuf<float> a(Iota(32, 1.f)), b(Iota(32, -3.f)), out(Iota(32, 0.f));
  int calls = 0;
  auto body = [&]() -> absl::Status {
    ++calls;
    return AddTwice(a, b, out);
  };
  const int owner = 0;
  const GraphKey key{&owner, 1, {4, 0, 0, 0}};
  absl::StatusOr<GraphRun> run = B().RunGraph(S(), key, body);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(*run, GraphRun::kCaptured);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(B().graph_count(), 1);
  ASSERT_TRUE(S().Synchronize().ok());
  std::vector<float> want(32);
  for (int i = 0; i < 32; ++i)
    want[i] = 1.f + 0.25f * i + 2 * (-3.f + 0.25f * i);
  EXPECT_EQ(out.ToHost(), want);

  // New inputs in the same device memory; the replay reads them.
  a.Upload(Iota(32, 100.f));
  run = B().RunGraph(S(), key, body);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(*run, GraphRun::kReplayed);
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(S().Synchronize().ok());
  for (int i = 0; i < 32; ++i) {
    want[i] = 100.f + 0.25f * i + 2 * (-3.f + 0.25f * i);
  }
  EXPECT_EQ(out.ToHost(), want);

  // Another key records again; dropping the owner frees both.
  EXPECT_EQ(*B().RunGraph(S(), {&owner, 2, {}}, body), GraphRun::kCaptured);
  EXPECT_EQ(B().graph_count(), 2);
  ASSERT_TRUE(S().Synchronize().ok());
  B().DropGraphs(&owner);
  EXPECT_EQ(B().graph_count(), 0);
  EXPECT_EQ(*B().RunGraph(S(), key, body), GraphRun::kCaptured);
  ASSERT_TRUE(S().Synchronize().ok());
  B().DropGraphs(&owner);
}

TEST_F(CudaGraphRegion, OffRunsEagerly) {
  DeviceBuf<float> a(Iota(32, 1.f)), b(Iota(32, 2.f)), out(Iota(32, 0.f));
  EXPECT_FALSE(B().SetGraphs(false));
  EXPECT_FALSE(B().graphs_enabled());
  int calls = 0;
  auto body = [&]() -> absl::Status {
    ++calls;
    return AddTwice(a, b, out);
  };
  const GraphKey key{this, 0, {}};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<GraphRun> run = B().RunGraph(S(), key, body);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(*run, GraphRun::kEager);
  }
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(B().graph_count(), 0);
  EXPECT_TRUE(B().SetGraphs(true));
  EXPECT_EQ(*B().RunGraph(S(), key, body), GraphRun::kCaptured);
  ASSERT_TRUE(S().Synchronize().ok());
  B().DropGraphs(this);
}

TEST_F(CudaGraphRegion, FailingBodyRecordsNothing) {
  DeviceBuf<float> a(Iota(32, 1.f)), b(Iota(32, 2.f)), out(Iota(32, 0.f));
  const GraphKey key{this, 0, {}};
  auto bad = [&]() -> absl::Status {
    // Shapes that do not match: InvalidArgument before any launch.
    return B().Add(S(), a.View({4, 8}), b.View({8, 4}), out.View({4, 8}));
  };
  absl::StatusOr<GraphRun> run = B().RunGraph(S(), key, bad);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(B().graph_count(), 0);
  // The stream left capture: a good body records under the same key.
  EXPECT_EQ(*B().RunGraph(S(), key, [&] { return AddTwice(a, b, out); }),
            GraphRun::kCaptured);
  ASSERT_TRUE(S().Synchronize().ok());
  B().DropGraphs(this);
}

TEST_F(CudaGraphRegion, UnrecordableBodyRunsEagerlyFromThenOn) {
  DeviceBuf<float> a(Iota(32, 1.f)), b(Iota(32, 2.f)), out(Iota(32, 0.f));
  int calls = 0;
  // A sync inside the body: stream capture cannot take it.
  auto body = [&]() -> absl::Status {
    ++calls;
    if (absl::Status st = AddTwice(a, b, out); !st.ok()) return st;
    return S().Synchronize();
  };
  const GraphKey key{this, 5, {}};
  absl::StatusOr<GraphRun> run = B().RunGraph(S(), key, body);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(*run, GraphRun::kEager);
  EXPECT_EQ(calls, 2);  // the failed capture, then eagerly
  std::vector<float> want(32);
  for (int i = 0; i < 32; ++i)
    want[i] = 1.f + 0.25f * i + 2 * (2.f + 0.25f * i);
  EXPECT_EQ(out.ToHost(), want);
  run = B().RunGraph(S(), key, body);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(*run, GraphRun::kEager);
  EXPECT_EQ(calls, 3);
  // Later launches are not poisoned by the failed capture.
  ASSERT_TRUE(AddTwice(a, b, out).ok());
  ASSERT_TRUE(S().Synchronize().ok());
  B().DropGraphs(this);
}

TEST_F(CudaGraphRegion, RegionInsideARegionIsRefused) {
  DeviceBuf<float> a(Iota(32, 1.f)), b(Iota(32, 2.f)), out(Iota(32, 0.f));
  auto inner = [&] { return AddTwice(a, b, out); };
  auto outer = [&]() -> absl::Status {
    return B().RunGraph(S(), {this, 2, {}}, inner).status();
  };
  absl::StatusOr<GraphRun> run = B().RunGraph(S(), {this, 1, {}}, outer);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kFailedPrecondition)
      << run.status();
  EXPECT_EQ(B().graph_count(), 0);
  ASSERT_TRUE(S().Synchronize().ok());
}

// MatMul on cuBLASLt (m >= lt_min_m) and on the GEMV, recorded and
// replayed, against the same ops run eagerly on a backend without graphs.
TEST(CudaGraphRegionLt, MatMulRecordsAndReplaysBitForBit) {
  for (int64_t m : {1, 16, 40}) {
    SCOPED_TRACE(m);
    auto on = MakeBackend({.lt_min_m = 16, .graphs = true});
    MOESERVE_SKIP_WITHOUT_CUDA(on.status());
    ASSERT_TRUE(on.ok()) << on.status();
    auto off = MakeBackend({.lt_min_m = 16});
    ASSERT_TRUE(off.ok()) << off.status();
    const int64_t k = 256, n = 384;
    std::vector<uint16_t> w(n * k);
    for (int64_t i = 0; i < n * k; ++i) {
      // bf16 bits of small values of both signs.
      w[i] = static_cast<uint16_t>(0x3c00 + (i * 37) % 512) |
             static_cast<uint16_t>((i % 3 == 0) ? 0x8000 : 0);
    }
    DeviceBuf<uint16_t> dw(w);
    DeviceBuf<float> x(Iota(m * k, -7.f)), y_on(std::vector<float>(m * n)),
        y_off(std::vector<float>(m * n));
    auto matmul = [&](BackendAndStream& bs, DeviceBuf<float>& y) {
      return bs.backend->MatMul(*bs.stream, x.View({m, k}),
                                dw.View(DType::kBF16, {n, k}), Tensor(),
                                y.View({m, n}));
    };
    const GraphKey key{&x, 0, {m, 0, 0, 0}};
    for (int round = 0; round < 3; ++round) {
      x.Upload(Iota(m * k, -7.f + round));
      absl::StatusOr<GraphRun> run = on->backend->RunGraph(
          *on->stream, key, [&] { return matmul(*on, y_on); });
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(*run, round == 0 ? GraphRun::kCaptured : GraphRun::kReplayed);
      ASSERT_TRUE(matmul(*off, y_off).ok());
      ASSERT_TRUE(on->stream->Synchronize().ok());
      ASSERT_TRUE(off->stream->Synchronize().ok());
      EXPECT_EQ(y_on.ToHost(), y_off.ToHost()) << "round " << round;
    }
    on->backend->DropGraphs(&x);
  }
}

}  // namespace
}  // namespace moeserve::kernels::cuda
