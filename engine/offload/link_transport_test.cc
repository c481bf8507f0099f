// The device transport's logic (copy streams, page-locked arena or staging
// buffer, release events, event-timed busy time) run on the CPU backend,
// whose "device" memory is host memory: every blob must arrive byte for byte
// as SlowTier::Read writes it, from the host tier (registered arena, direct
// copy) and the disk tier (staging buffer). A CUDA run of the same path is
// covered by //tests:policy_invariance_test and //tests:cuda_parity_test.
#include "engine/offload/link_transport.h"

#include <cstring>
#include <vector>

#include "engine/offload/test_util.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine {
namespace {

void ExpectEveryBlobArrives(SlowTier* slow, const ModelWeights& w) {
  kernels::cpu::CpuBackend backend({.num_threads = 1});
  const size_t bytes = w.expert({0, 0}).bytes;
  absl::StatusOr<std::unique_ptr<LinkTransport>> t =
      NewDeviceTransport(&backend, slow, bytes, /*num_workers=*/2);
  ASSERT_TRUE(t.ok()) << t.status();
  auto slot = *backend.Allocate(static_cast<int64_t>(bytes));
  auto stream = *backend.CreateStream();
  auto released = *backend.CreateEvent();
  ASSERT_TRUE(backend.RecordEvent(*stream, *released).ok());
  std::vector<std::byte> want(bytes);
  for (int l = 0; l < w.num_layers(); ++l) {
    for (int e = 0; e < w.num_experts(); ++e) {
      ASSERT_TRUE(slow->Read({l, e}, want.data()).ok());
      std::byte* dst = static_cast<std::byte*>(slot->data());
      std::memset(dst, 0xab, bytes);
      absl::StatusOr<double> busy =
          (*t)->Move(e % 2, {l, e}, dst, e % 2 ? released.get() : nullptr);
      ASSERT_TRUE(busy.ok()) << busy.status();
      EXPECT_GE(*busy, 0.0);
      EXPECT_EQ(std::memcmp(dst, want.data(), bytes), 0) << l << "," << e;
    }
  }
}

TEST(DeviceTransport, HostTierCopiesFromTheRegisteredArena) {
  std::unique_ptr<ModelWeights> w = testing::LoadFixture(/*pack=*/true);
  auto slow = *NewHostSlowTier(w.get());
  ASSERT_FALSE(slow->HostArena().empty());
  ExpectEveryBlobArrives(slow.get(), *w);
}

TEST(DeviceTransport, DiskTierGoesThroughTheStagingBuffer) {
  std::unique_ptr<ModelWeights> w = testing::LoadFixture(/*pack=*/false);
  auto slow = *NewDiskSlowTier(w.get());
  ASSERT_TRUE(slow->HostArena().empty());
  ExpectEveryBlobArrives(slow.get(), *w);
}

TEST(DeviceTransport, TwoTransportsShareOneArenaRegistration) {
  std::unique_ptr<ModelWeights> w = testing::LoadFixture(/*pack=*/true);
  auto slow = *NewHostSlowTier(w.get());
  kernels::cpu::CpuBackend backend({.num_threads = 1});
  const size_t bytes = w->expert({0, 0}).bytes;
  auto a = NewDeviceTransport(&backend, slow.get(), bytes, 1);
  auto b = NewDeviceTransport(&backend, slow.get(), bytes, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  a->reset();  // the other still copies from the arena
  auto slot = *backend.Allocate(static_cast<int64_t>(bytes));
  EXPECT_TRUE(
      (*b)->Move(0, {0, 0}, static_cast<std::byte*>(slot->data()), nullptr)
          .ok());
}

}  // namespace
}  // namespace moeserve::engine
