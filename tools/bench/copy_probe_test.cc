#include "tools/bench/copy_probe.h"

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::bench {
namespace {

TEST(CopyProbeTest, TimesEveryCopyOnTheCpuBackend) {
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  absl::StatusOr<CopyProbe> p = MeasurePinnedCopy(&cpu, 1 << 20, 8);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bytes_per_copy, 1 << 20);
  EXPECT_EQ(p->copies, 8);
  EXPECT_EQ(p->buffers, 8);  // 8 MiB fit the ring's budget
  EXPECT_GT(p->event_seconds, 0);
  EXPECT_GE(p->wall_seconds, p->event_seconds);
  EXPECT_NEAR(p->event_gbps, 8.0 * (1 << 20) / p->event_seconds / 1e9, 1e-9);
}

TEST(CopyProbeTest, RefusesEmptyCopies) {
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  EXPECT_FALSE(MeasurePinnedCopy(&cpu, 0).ok());
  EXPECT_FALSE(MeasurePinnedCopy(&cpu, 64, 0).ok());
}

}  // namespace
}  // namespace moeserve::bench
