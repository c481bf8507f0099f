#include "engine/offload/link.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
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

// Records the order in which transfers start and holds the one of expert
// `gate` inside Move until Open(), so the test can queue behind it and look
// at the order the worker picks the rest in (no timing involved).
class GateTransport : public LinkTransport {
 public:
  GateTransport(size_t bytes, int gate) : bytes_(bytes), gate_(gate) {}
  absl::StatusOr<double> Move(int, ExpertId id, std::byte* dst,
                              kernels::Event*) override {
    base::MutexLock lock(&mu_);
    order_.push_back(id.expert);
    if (id.expert == gate_) {
      entered_ = true;
      cv_.SignalAll();
      while (!open_) cv_.Wait(&mu_);
    }
    std::memset(dst, id.expert, bytes_);
    return 0.0;
  }
  void WaitEntered() {
    base::MutexLock lock(&mu_);
    while (!entered_) cv_.Wait(&mu_);
  }
  void Open() {
    base::MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  std::vector<int> order() {
    base::MutexLock lock(&mu_);
    return order_;
  }

 private:
  const size_t bytes_;
  const int gate_;
  base::Mutex mu_;
  base::CondVar cv_;
  bool entered_ ABSL_GUARDED_BY(mu_) = false;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> order_ ABSL_GUARDED_BY(mu_);
};

// Completions counted; Wait(n) blocks until n ran.
class Completions {
 public:
  Link::Done Done(absl::StatusCode* code = nullptr) {
    return [this, code](absl::Status s) {
      base::MutexLock lock(&mu_);
      if (code != nullptr) *code = s.code();
      ++count_;
      cv_.SignalAll();
    };
  }
  void Wait(int n) {
    base::MutexLock lock(&mu_);
    while (count_ < n) cv_.Wait(&mu_);
  }

 private:
  base::Mutex mu_;
  base::CondVar cv_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

class LaneTest : public ::testing::Test {
 protected:
  static constexpr size_t kBytes = 256;
  // One worker; expert 0's transfer holds it until gate_->Open().
  void SetUp() override {
    auto t = std::make_unique<GateTransport>(kBytes, 0);
    gate_ = t.get();
    link_ = std::make_unique<Link>(std::move(t), kBytes, LinkOptions{});
    dst_.assign(16, std::vector<std::byte>(kBytes));
    blocker_ = link_->Submit({0, 0}, Dst(0), done_.Done());
    gate_->WaitEntered();  // The worker is busy: the rest stays queued.
  }
  std::byte* Dst(int e) { return dst_[e].data(); }
  TransferId Prefetch(int e, int priority, absl::StatusCode* code = nullptr) {
    return link_->Submit({0, e}, Dst(e), done_.Done(code), nullptr,
                         LinkLane::kPrefetch, priority);
  }
  TransferId Demand(int e, absl::StatusCode* code = nullptr) {
    return link_->Submit({0, e}, Dst(e), done_.Done(code));
  }

  GateTransport* gate_ = nullptr;
  Completions done_;
  std::unique_ptr<Link> link_;
  std::vector<std::vector<std::byte>> dst_;
  TransferId blocker_ = 0;
};

TEST_F(LaneTest, DemandOvertakesQueuedPrefetchesWhichGoByPriority) {
  Prefetch(1, 0);
  Prefetch(2, 5);
  Prefetch(3, 5);
  Demand(4);
  Prefetch(5, 1);
  Demand(6);
  EXPECT_EQ(link_->queued_transfers(), 6);
  gate_->Open();
  done_.Wait(7);
  // Demand FIFO first, then prefetches: higher priority first, FIFO within.
  EXPECT_EQ(gate_->order(), (std::vector<int>{0, 4, 6, 2, 3, 5, 1}));
  EXPECT_EQ(link_->transfers(), 7u);
  EXPECT_EQ(link_->bytes(), 7 * kBytes);
  EXPECT_EQ(link_->queued_transfers(), 0);
}

TEST_F(LaneTest, CancelledTransferCompletesCancelledAndMovesNothing) {
  absl::StatusCode code = absl::StatusCode::kOk;
  const TransferId p = Prefetch(1, 0, &code);
  const TransferId d = Demand(2);
  EXPECT_TRUE(link_->Cancel(p));
  // Its completion ran before Cancel returned.
  EXPECT_EQ(code, absl::StatusCode::kCancelled);
  EXPECT_FALSE(link_->Cancel(p));         // Gone.
  EXPECT_FALSE(link_->Cancel(blocker_));  // Started: runs to its end.
  EXPECT_FALSE(link_->Cancel(12345));     // Unknown.
  EXPECT_EQ(link_->queued_transfers(), 1);
  gate_->Open();
  done_.Wait(3);
  EXPECT_FALSE(link_->Cancel(d));  // Finished.
  EXPECT_EQ(gate_->order(), (std::vector<int>{0, 2}));
  EXPECT_EQ(dst_[1][0], std::byte(0));  // Never written.
  EXPECT_EQ(link_->transfers(), 2u);
  EXPECT_EQ(link_->bytes(), 2 * kBytes);
  EXPECT_EQ(link_->cancelled_transfers(), 1u);
  EXPECT_EQ(link_->failed_transfers(), 0u);
}

TEST_F(LaneTest, PromotedPrefetchJoinsTheBackOfTheDemandLane) {
  Prefetch(1, 9);
  const TransferId low = Prefetch(2, 0);
  const TransferId d = Demand(3);
  EXPECT_TRUE(link_->Promote(low));
  EXPECT_FALSE(link_->Promote(low));       // Already in the demand lane.
  EXPECT_FALSE(link_->Promote(d));         // A demand transfer.
  EXPECT_FALSE(link_->Promote(blocker_));  // Started.
  Demand(4);
  gate_->Open();
  done_.Wait(5);
  EXPECT_EQ(gate_->order(), (std::vector<int>{0, 3, 2, 4, 1}));
}

TEST_F(LaneTest, BatchIsQueuedAtOnceInItsLanes) {
  std::vector<Link::Request> batch;
  batch.push_back({.id = {0, 1},
                   .dst = Dst(1),
                   .done = done_.Done(),
                   .lane = LinkLane::kPrefetch,
                   .priority = 0});
  batch.push_back({.id = {0, 2}, .dst = Dst(2), .done = done_.Done()});
  batch.push_back({.id = {0, 3},
                   .dst = Dst(3),
                   .done = done_.Done(),
                   .lane = LinkLane::kPrefetch,
                   .priority = 7});
  batch.push_back({.id = {0, 4}, .dst = Dst(4), .done = done_.Done()});
  const std::vector<TransferId> ids = link_->SubmitBatch(std::move(batch));
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_LT(ids[0], ids[1]);
  EXPECT_LT(ids[2], ids[3]);
  EXPECT_EQ(link_->queued_transfers(), 4);
  EXPECT_TRUE(link_->SubmitBatch({}).empty());
  EXPECT_TRUE(link_->Cancel(ids[2]));
  gate_->Open();
  done_.Wait(5);
  EXPECT_EQ(gate_->order(), (std::vector<int>{0, 2, 4, 1}));
  for (int e : {1, 2, 4}) EXPECT_EQ(dst_[e][kBytes - 1], std::byte(e));
  EXPECT_EQ(link_->bytes(), 4 * kBytes);
  EXPECT_EQ(link_->cancelled_transfers(), 1u);
}

// Cancel and Promote race the workers from several threads: every
// completion runs exactly once, and every transfer is either moved or
// cancelled (the TSan run checks the locking).
TEST(LinkTest, ConcurrentSubmitCancelPromoteAccountsEveryTransfer) {
  constexpr size_t kBytes = 64;
  constexpr int kThreads = 4, kPer = 200;
  FakeTier tier(kBytes);
  std::atomic<int> ok{0}, cancelled{0}, other{0};
  // Each transfer its own destination (untouched by others until done).
  std::vector<std::byte> dst(kBytes * kThreads * kPer);
  {
    Link link(&tier, kBytes, LinkOptions{.num_workers = 2});
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPer; ++i) {
          const TransferId id = link.Submit(
              {0, t}, dst.data() + kBytes * (t * kPer + i),
              [&](absl::Status s) {
                (s.ok() ? ok : absl::IsCancelled(s) ? cancelled : other)++;
              },
              nullptr, i % 2 ? LinkLane::kPrefetch : LinkLane::kDemand, i % 5);
          if (i % 3 == 0) link.Promote(id);
          if (i % 4 == 0) link.Cancel(id);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(link.cancelled_transfers(),
              static_cast<uint64_t>(cancelled.load()));
  }  // The destructor drains the rest.
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ok.load() + cancelled.load(), kThreads * kPer);
}

// Two workers share one emulated wire: n transfers take at least
// n x bytes / rate of wall time (more workers cannot invent bandwidth).
TEST(LinkTest, WorkersShareOneEmulatedWire) {
  constexpr size_t kBytes = 1 << 20;
  constexpr int kN = 8;
  const LinkOptions opt{.gbps = 0.5, .latency_us = 0, .num_workers = 2};
  const double per = kBytes / (0.5 * 1e9);  // ~2.1 ms
  FakeTier tier(kBytes);
  Link link(&tier, kBytes, opt);
  std::vector<std::vector<std::byte>> dst(kN, std::vector<std::byte>(kBytes));
  Completions done;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kN; ++i) link.Submit({0, i}, dst[i].data(), done.Done());
  done.Wait(kN);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GE(took, kN * per);  // Guaranteed; the upper side is not asserted.
  EXPECT_GE(link.busy_seconds(), kN * per);
  EXPECT_EQ(link.bytes(), kN * kBytes);
}

}  // namespace
}  // namespace moeserve::engine
