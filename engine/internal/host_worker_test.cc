// HostWorker runs posted jobs one at a time in Post order on its own
// thread, Wait returns each job's status oldest first, and a job's writes
// are visible after its Wait (also under TSan: deploy/run_tests.sh).
#include "engine/internal/host_worker.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine {
namespace {

TEST(HostWorkerTest, RunsJobsInPostOrderOffTheCallersThread) {
  HostWorker worker;
  std::vector<int> order;  // written by the jobs, read after their Waits
  std::vector<std::thread::id> threads;
  for (int i = 0; i < 3; ++i) {
    worker.Post([&order, &threads, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      return i == 1 ? absl::InternalError("job 1") : absl::OkStatus();
    });
  }
  EXPECT_EQ(worker.in_flight(), 3);
  EXPECT_TRUE(worker.Wait().ok());
  const absl::Status second = worker.Wait();
  EXPECT_EQ(second.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(second.message(), "job 1");
  EXPECT_TRUE(worker.Wait().ok());
  EXPECT_EQ(worker.in_flight(), 0);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(threads.size(), 3u);
  EXPECT_NE(threads[0], std::this_thread::get_id());
  EXPECT_EQ(threads[0], threads[2]);
}

TEST(HostWorkerTest, WaitWithoutAJobIsRefused) {
  HostWorker worker;
  EXPECT_EQ(worker.Wait().code(), absl::StatusCode::kFailedPrecondition);
  worker.Post([] { return absl::OkStatus(); });
  EXPECT_TRUE(worker.Wait().ok());
  EXPECT_EQ(worker.Wait().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HostStreamTest, NeedsTwoBackendsAndAHostOnTheCpu) {
  kernels::cpu::CpuBackend cpu({.num_threads = 1});
  absl::StatusOr<std::unique_ptr<kernels::Stream>> none =
      HostStream(&cpu, nullptr, "host experts");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), ::testing::HasSubstr("host experts"));
  EXPECT_TRUE(HostStream(&cpu, &cpu, "host experts").ok());
}

}  // namespace
}  // namespace moeserve::engine
