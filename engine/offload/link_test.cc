#include "engine/offload/link.h"

#include <chrono>
#include <cstring>
#include <future>
#include <vector>

#include "base/mutex.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

// Fills the blob with the expert's number; fails expert 99.
class FakeTier : public SlowTier {
 public:
  explicit FakeTier(size_t bytes) : bytes_(bytes) {}
  std::string_view name() const override { return "fake"; }
  absl::Status Read(ExpertId id, std::byte* dst) override {
    if (id.expert == 99) return absl::DataLossError("fake: EIO");
    std::memset(dst, id.expert, bytes_);
    return absl::OkStatus();
  }

 private:
  const size_t bytes_;
};

TEST(LinkTest, CopiesInFifoOrderAndAccounts) {
  constexpr size_t kBytes = 4096;
  FakeTier tier(kBytes);
  Link link(&tier, kBytes, LinkOptions{});
  EXPECT_FALSE(link.emulation_on());
  std::vector<std::vector<std::byte>> dst(5, std::vector<std::byte>(kBytes));
  base::Mutex mu;
  std::vector<int> order;  // Under mu.
  std::vector<std::promise<void>> done(5);
  for (int i = 0; i < 5; ++i) {
    link.Submit({0, i}, dst[i].data(), [&, i](absl::Status s) {
      EXPECT_TRUE(s.ok());
      base::MutexLock lock(&mu);
      order.push_back(i);
      done[i].set_value();
    });
  }
  for (auto& d : done) d.get_future().wait();
  {
    base::MutexLock lock(&mu);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(dst[i][kBytes - 1], std::byte(i));
  EXPECT_EQ(link.bytes(), 5 * kBytes);
  EXPECT_EQ(link.transfers(), 5u);
  EXPECT_GE(link.busy_seconds(), 0.0);
}

TEST(LinkTest, FailedTransferReportsAndMovesNoAccountedBytes) {
  FakeTier tier(64);
  Link link(&tier, 64, LinkOptions{});
  std::vector<std::byte> dst(64);
  std::promise<absl::Status> result;
  link.Submit({0, 99}, dst.data(),
              [&](absl::Status s) { result.set_value(std::move(s)); });
  EXPECT_EQ(result.get_future().get().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(link.bytes(), 0u);
  EXPECT_EQ(link.failed_transfers(), 1u);
}

TEST(LinkTest, EmulationTakesAtLeastLatencyPlusBytesOverBandwidth) {
  constexpr size_t kBytes = 1 << 20;
  const LinkOptions opt{.gbps = 0.5, .latency_us = 3000};
  const double expected = 3000e-6 + kBytes / (0.5 * 1e9);  // ~5.1 ms
  FakeTier tier(kBytes);
  Link link(&tier, kBytes, opt);
  EXPECT_TRUE(link.emulation_on());
  std::vector<std::byte> dst(kBytes);
  for (int i = 0; i < 3; ++i) {
    std::promise<void> done;
    const auto start = std::chrono::steady_clock::now();
    link.Submit({0, 1}, dst.data(), [&](absl::Status) { done.set_value(); });
    done.get_future().wait();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    EXPECT_GE(took, expected);
  }
  EXPECT_GE(link.busy_seconds(), 3 * expected);
  EXPECT_EQ(link.bytes(), 3 * kBytes);
}

TEST(LinkTest, DestructorFinishesQueuedTransfers) {
  FakeTier tier(64);
  int completed = 0;
  std::vector<std::byte> dst(64 * 10);
  {
    Link link(&tier, 64, LinkOptions{.gbps = 1, .latency_us = 100});
    for (int i = 0; i < 10; ++i) {
      link.Submit({0, i}, dst.data() + 64 * i,
                  [&](absl::Status) { ++completed; });
    }
  }
  EXPECT_EQ(completed, 10);
}

}  // namespace
}  // namespace moeserve::engine
