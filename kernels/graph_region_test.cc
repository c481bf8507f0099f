// Graph regions (Backend::RunGraph, issue 30 item 3) without a GPU: the
// bucket helper, the eager default of the CPU and null backends, and how a
// CountingBackend counts regions, eager and simulated. The CUDA recording
// itself is tested on a GPU (//engine:cuda_graphs_test).
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/counting_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/null_backend.h"

namespace moeserve::kernels {
namespace {

TEST(GraphBucket, IsTheNextPowerOfTwo) {
  EXPECT_EQ(GraphBucket(-3), 1);
  EXPECT_EQ(GraphBucket(0), 1);
  EXPECT_EQ(GraphBucket(1), 1);
  EXPECT_EQ(GraphBucket(2), 2);
  EXPECT_EQ(GraphBucket(3), 4);
  EXPECT_EQ(GraphBucket(16), 16);
  EXPECT_EQ(GraphBucket(17), 32);
  EXPECT_EQ(GraphBucket((int64_t{1} << 40) + 1), int64_t{1} << 41);
}

TEST(GraphKey, ComparesEveryField) {
  int a = 0, b = 0;
  const GraphKey k{&a, 3, {1, 1, 4, 0}};
  EXPECT_EQ(k, (GraphKey{&a, 3, {1, 1, 4, 0}}));
  EXPECT_NE(k, (GraphKey{&b, 3, {1, 1, 4, 0}}));
  EXPECT_NE(k, (GraphKey{&a, 2, {1, 1, 4, 0}}));
  EXPECT_NE(k, (GraphKey{&a, 3, {1, 1, 8, 0}}));
}

// Adds 1 to x[0] with one Add: what a region's body does.
struct AddOne {
  Backend& b;
  Stream& s;
  float* x;
  float one = 1.f;
  absl::Status operator()() const {
    Tensor t(x, DType::kF32, {1, 1}, Device::kCpu);
    Tensor o(const_cast<float*>(&one), DType::kF32, {1, 1}, Device::kCpu);
    return b.Add(s, t, o, t);
  }
};

TEST(GraphRegion, BackendsWithoutGraphsRunTheBodyEagerly) {
  cpu::CpuBackend cpu({.num_threads = 1});
  NullBackend null;
  for (Backend* b :
       {static_cast<Backend*>(&cpu), static_cast<Backend*>(&null)}) {
    SCOPED_TRACE(b->name());
    EXPECT_FALSE(b->SetGraphs(true));
    EXPECT_FALSE(b->graphs_enabled());
    std::unique_ptr<Stream> s = *b->CreateStream();
    int calls = 0;
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<GraphRun> run =
          b->RunGraph(*s, {b, 0, {}}, [&]() -> absl::Status {
            ++calls;
            return absl::OkStatus();
          });
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(*run, GraphRun::kEager);
    }
    EXPECT_EQ(calls, 3);
    // A body's error comes back.
    EXPECT_EQ(
        b->RunGraph(*s, {b, 0, {}}, [] { return absl::InternalError("body"); })
            .status()
            .message(),
        "body");
    b->DropGraphs(b);  // nothing to drop
  }
  // The CPU really ran the ops.
  std::unique_ptr<Stream> s = *cpu.CreateStream();
  float x = 0;
  AddOne body{cpu, *s, &x};
  {
    auto r = cpu.RunGraph(*s, {&cpu, 0, {}}, body);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  {
    auto r = cpu.RunGraph(*s, {&cpu, 0, {}}, body);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  EXPECT_EQ(x, 2.f);
}

TEST(GraphRegion, CountingOverAnEagerBackendCountsLaunches) {
  cpu::CpuBackend cpu({.num_threads = 1});
  CountingBackend counting(&cpu);  // no simulation
  EXPECT_FALSE(counting.SetGraphs(true));
  EXPECT_FALSE(counting.graphs_enabled());
  std::unique_ptr<Stream> s = *counting.CreateStream();
  float x = 0;
  AddOne body{counting, *s, &x};
  const BackendCounts before = counting.counts();
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<GraphRun> run = counting.RunGraph(*s, {&x, 0, {}}, body);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(*run, GraphRun::kEager);
  }
  const BackendCounts c = counting.counts().Minus(before);
  EXPECT_EQ(c.launches, 2);
  EXPECT_EQ(c.graph_launches, 0);
  EXPECT_EQ(c.graph_captures, 0);
  EXPECT_EQ(c.captured_ops, 0);
  EXPECT_EQ(x, 2.f);
}

TEST(GraphRegion, SimulatedGraphsCountOneLaunchPerRegion) {
  cpu::CpuBackend cpu({.num_threads = 1});
  CountingBackend counting(&cpu, {.simulate_graphs = true});
  EXPECT_FALSE(counting.graphs_enabled());  // until SetGraphs(true)
  EXPECT_TRUE(counting.SetGraphs(true));
  EXPECT_TRUE(counting.graphs_enabled());
  std::unique_ptr<Stream> s = *counting.CreateStream();
  float x = 0;
  int owner = 0;
  // A body of three ops.
  auto body = [&]() -> absl::Status {
    AddOne one{counting, *s, &x};
    for (int i = 0; i < 3; ++i) {
      if (absl::Status st = one(); !st.ok()) return st;
    }
    return absl::OkStatus();
  };
  const GraphKey key{&owner, 7, {1, 1, 1, 0}};
  BackendCounts before = counting.counts();
  absl::StatusOr<GraphRun> run = counting.RunGraph(*s, key, body);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(*run, GraphRun::kCaptured);
  BackendCounts c = counting.counts().Minus(before);
  EXPECT_EQ(c.launches, 1);
  EXPECT_EQ(c.graph_launches, 1);
  EXPECT_EQ(c.graph_captures, 1);
  EXPECT_EQ(c.captured_ops, 3);

  before = counting.counts();
  for (int i = 0; i < 4; ++i) {
    run = counting.RunGraph(*s, key, body);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(*run, GraphRun::kReplayed);
  }
  c = counting.counts().Minus(before);
  EXPECT_EQ(c.launches, 4);
  EXPECT_EQ(c.graph_launches, 4);
  EXPECT_EQ(c.graph_captures, 0);
  EXPECT_EQ(c.captured_ops, 0);
  // The inner backend ran the body every time: results are its own.
  EXPECT_EQ(x, 15.f);
  // Ops outside a region still count one each.
  before = counting.counts();
  ASSERT_TRUE((AddOne{counting, *s, &x}()).ok());
  EXPECT_EQ(counting.counts().Minus(before).launches, 1);

  // Another shape is another recording; a dropped owner records again.
  before = counting.counts();
  EXPECT_EQ(*counting.RunGraph(*s, {&owner, 7, {2, 2, 1, 0}}, body),
            GraphRun::kCaptured);
  counting.DropGraphs(&owner);
  EXPECT_EQ(*counting.RunGraph(*s, key, body), GraphRun::kCaptured);
  EXPECT_EQ(counting.counts().Minus(before).graph_captures, 2);

  // A failing body records nothing; its ops count as launches.
  before = counting.counts();
  const GraphKey bad{&owner, 8, {}};
  auto failing = [&]() -> absl::Status {
    AddOne{counting, *s, &x}().IgnoreError();
    return absl::InternalError("refused");
  };
  EXPECT_FALSE(counting.RunGraph(*s, bad, failing).ok());
  c = counting.counts().Minus(before);
  EXPECT_EQ(c.launches, 1);
  EXPECT_EQ(c.graph_captures, 0);
  EXPECT_EQ(*counting.RunGraph(*s, bad, body), GraphRun::kCaptured);

  // Off again: eager.
  EXPECT_FALSE(counting.SetGraphs(false));
  EXPECT_EQ(*counting.RunGraph(*s, key, body), GraphRun::kEager);
}

}  // namespace
}  // namespace moeserve::kernels
