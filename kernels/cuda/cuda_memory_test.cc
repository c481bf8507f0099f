// Tests of CudaBackend's memory API (kernels/backend.h): device and pinned
// host buffers, registered host memory, stream-ordered copies in every
// direction, Zero, and events ordering two streams. Every test skips with
// CudaBackend::Create()'s status on a machine without a CUDA device.
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_test_util.h"

namespace moeserve::kernels::cuda {
namespace {

using ::moeserve::kernels::cuda::test_util::BackendAndStream;
using ::moeserve::kernels::cuda::test_util::MakeBackend;

// Not a CudaStream: refused by every op.
class FakeStream final : public Stream {
 public:
  Device device() const override { return Device::kCuda; }
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

class CudaMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = MakeBackend();
    MOESERVE_SKIP_WITHOUT_CUDA(d.status());
    ASSERT_TRUE(d.ok()) << d.status();
    bs_ = std::move(*d);
  }
  CudaBackend& B() { return *bs_.backend; }
  Stream& S() { return *bs_.stream; }

  std::unique_ptr<Buffer> DeviceBuffer(int64_t bytes) {
    auto b = B().Allocate(bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(*b) : nullptr;
  }
  std::unique_ptr<Buffer> PinnedBuffer(int64_t bytes) {
    auto b = B().AllocateHost(bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(*b) : nullptr;
  }

  BackendAndStream bs_;
};

void Fill(Buffer& b, uint8_t seed) {
  auto* p = static_cast<uint8_t*>(b.data());
  for (int64_t i = 0; i < b.bytes(); ++i)
    p[i] = static_cast<uint8_t>(i * 7 + seed);
}

bool SameBytes(const Buffer& a, const Buffer& b) {
  return a.bytes() == b.bytes() &&
         std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST_F(CudaMemory, AllocationsAreAlignedAndSized) {
  auto d = DeviceBuffer(1000);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->bytes(), 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d->data()) % 256, 0u);
  auto h = PinnedBuffer(5000);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->bytes(), 5000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h->data()) % 4096, 0u);
  std::memset(h->data(), 1, 5000);  // Host-accessible.
}

TEST_F(CudaMemory, RefusesNonPositiveSizesAndReportsExhaustion) {
  for (int64_t bytes : {0, -1}) {
    EXPECT_TRUE(absl::IsInvalidArgument(B().Allocate(bytes).status()));
    EXPECT_TRUE(absl::IsInvalidArgument(B().AllocateHost(bytes).status()));
    std::vector<char> v(16);
    EXPECT_TRUE(absl::IsInvalidArgument(B().RegisterHost(v.data(), bytes)));
  }
  EXPECT_TRUE(absl::IsResourceExhausted(
      B().Allocate(int64_t{1} << 50).status()));  // 1 PiB.
  auto d = DeviceBuffer(64);
  ASSERT_NE(d, nullptr);
  std::vector<char> h(64);
  EXPECT_TRUE(
      absl::IsInvalidArgument(B().CopyToDevice(S(), d->data(), h.data(), -1)));
  EXPECT_TRUE(absl::IsInvalidArgument(B().Zero(S(), d->data(), -1)));
  // Zero bytes: nothing to do.
  EXPECT_TRUE(B().CopyToHost(S(), h.data(), d->data(), 0).ok());
  EXPECT_TRUE(B().Zero(S(), d->data(), 0).ok());
}

TEST_F(CudaMemory, CopiesInEveryDirectionAndZero) {
  const int64_t bytes = (int64_t{8} << 20) + 3;  // Not a multiple of 4.
  auto src = PinnedBuffer(bytes), dst = PinnedBuffer(bytes);
  auto a = DeviceBuffer(bytes), b = DeviceBuffer(bytes);
  ASSERT_TRUE(src && dst && a && b);
  Fill(*src, 1);
  std::memset(dst->data(), 0xee, bytes);
  ASSERT_TRUE(B().CopyToDevice(S(), a->data(), src->data(), bytes).ok());
  ASSERT_TRUE(B().CopyOnDevice(S(), b->data(), a->data(), bytes).ok());
  ASSERT_TRUE(B().CopyToHost(S(), dst->data(), b->data(), bytes).ok());
  ASSERT_TRUE(S().Synchronize().ok());
  EXPECT_TRUE(SameBytes(*src, *dst));

  // Zero a middle range of b.
  const int64_t from = 1001, len = 4097;
  ASSERT_TRUE(B().Zero(S(), static_cast<char*>(b->data()) + from, len).ok());
  ASSERT_TRUE(B().CopyToHost(S(), dst->data(), b->data(), bytes).ok());
  ASSERT_TRUE(S().Synchronize().ok());
  std::memset(static_cast<char*>(src->data()) + from, 0, len);
  EXPECT_TRUE(SameBytes(*src, *dst));
}

TEST_F(CudaMemory, RegisteredHostMemoryCopiesAsynchronously) {
  const int64_t bytes = int64_t{1} << 20;
  std::vector<uint8_t> in(bytes), out(bytes, 0);
  std::iota(in.begin(), in.end(), 0);
  ASSERT_TRUE(B().RegisterHost(in.data(), bytes).ok());
  ASSERT_TRUE(B().RegisterHost(out.data(), bytes).ok());
  auto d = DeviceBuffer(bytes);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(B().CopyToDevice(S(), d->data(), in.data(), bytes).ok());
  ASSERT_TRUE(B().CopyToHost(S(), out.data(), d->data(), bytes).ok());
  ASSERT_TRUE(S().Synchronize().ok());
  EXPECT_EQ(in, out);
  B().UnregisterHost(in.data());
  B().UnregisterHost(out.data());
}

TEST_F(CudaMemory, EventsOrderTwoStreamsAndTime) {
  auto s2_or = B().CreateStream();
  ASSERT_TRUE(s2_or.ok()) << s2_or.status();
  Stream& s2 = **s2_or;
  auto start = B().CreateEvent(), done = B().CreateEvent();
  ASSERT_TRUE(start.ok() && done.ok());
  // Never recorded: complete, and waiting on it waits for nothing.
  EXPECT_TRUE((*done)->Synchronize().ok());
  EXPECT_TRUE(B().WaitEvent(s2, **done).ok());

  // Stream 1 produces 64 MiB (long enough that stream 2 would read stale
  // data without the wait); stream 2 waits for the event, then reads.
  const int64_t bytes = int64_t{64} << 20;
  auto src = PinnedBuffer(bytes), dst = PinnedBuffer(bytes);
  auto a = DeviceBuffer(bytes), b = DeviceBuffer(bytes);
  ASSERT_TRUE(src && dst && a && b);
  Fill(*src, 3);
  std::memset(dst->data(), 0, bytes);
  ASSERT_TRUE(B().Zero(s2, b->data(), bytes).ok());
  ASSERT_TRUE(s2.Synchronize().ok());
  ASSERT_TRUE(B().RecordEvent(S(), **start).ok());
  ASSERT_TRUE(B().CopyToDevice(S(), a->data(), src->data(), bytes).ok());
  ASSERT_TRUE(B().CopyOnDevice(S(), b->data(), a->data(), bytes).ok());
  ASSERT_TRUE(B().RecordEvent(S(), **done).ok());
  ASSERT_TRUE(B().WaitEvent(s2, **done).ok());
  ASSERT_TRUE(B().CopyToHost(s2, dst->data(), b->data(), bytes).ok());
  ASSERT_TRUE(s2.Synchronize().ok());
  EXPECT_TRUE(SameBytes(*src, *dst));

  ASSERT_TRUE((*done)->Synchronize().ok());
  auto secs = (*done)->SecondsSince(**start);
  ASSERT_TRUE(secs.ok()) << secs.status();
  EXPECT_GE(*secs, 0.0);
  EXPECT_LT(*secs, 10.0);
}

TEST_F(CudaMemory, RefusesStreamsAndEventsOfOtherBackends) {
  auto other = MakeBackend();
  ASSERT_TRUE(other.ok()) << other.status();
  auto mine = B().CreateEvent(), theirs = other->backend->CreateEvent();
  ASSERT_TRUE(mine.ok() && theirs.ok());
  auto d = DeviceBuffer(64);
  ASSERT_NE(d, nullptr);
  std::vector<char> h(64);
  FakeStream fake;
  Stream& their_stream = *other->stream;
  for (Stream* s : {static_cast<Stream*>(&fake), &their_stream}) {
    EXPECT_TRUE(
        absl::IsInvalidArgument(B().CopyToDevice(*s, d->data(), h.data(), 64)));
    EXPECT_TRUE(
        absl::IsInvalidArgument(B().CopyToHost(*s, h.data(), d->data(), 64)));
    EXPECT_TRUE(
        absl::IsInvalidArgument(B().CopyOnDevice(*s, d->data(), d->data(), 0)));
    EXPECT_TRUE(absl::IsInvalidArgument(B().Zero(*s, d->data(), 64)));
    EXPECT_TRUE(absl::IsInvalidArgument(B().RecordEvent(*s, **mine)));
    EXPECT_TRUE(absl::IsInvalidArgument(B().WaitEvent(*s, **mine)));
  }
  EXPECT_TRUE(absl::IsInvalidArgument(B().RecordEvent(S(), **theirs)));
  EXPECT_TRUE(absl::IsInvalidArgument(B().WaitEvent(S(), **theirs)));
  ASSERT_TRUE(B().RecordEvent(S(), **mine).ok());
  ASSERT_TRUE(other->backend->RecordEvent(their_stream, **theirs).ok());
  ASSERT_TRUE((*mine)->Synchronize().ok());
  ASSERT_TRUE((*theirs)->Synchronize().ok());
  EXPECT_TRUE(
      absl::IsInvalidArgument((*mine)->SecondsSince(**theirs).status()));
}

}  // namespace
}  // namespace moeserve::kernels::cuda
