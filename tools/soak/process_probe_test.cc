#include "tools/soak/process_probe.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace moeserve::soak {
namespace {

TEST(ProcessProbeTest, SeesThisProcessGrow) {
  absl::StatusOr<ProcessSample> before = SampleProcess(getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GT(before->rss_bytes, 0);
  EXPECT_GE(before->hwm_bytes, before->rss_bytes);
  EXPECT_GE(before->open_fds, 3);  // stdin, stdout, stderr at least

  // One more thread and one more descriptor must show.
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  bool release = false;
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  });
  absl::StatusOr<ProcessSample> during = SampleProcess(getpid());
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_one();
  thread.join();
  std::fclose(file);
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->threads, before->threads + 1);
  EXPECT_EQ(during->open_fds, before->open_fds + 1);
}

TEST(ProcessProbeTest, AGoneProcessIsNotFound) {
  // pid_max is at most 2^22: this pid cannot exist.
  absl::StatusOr<ProcessSample> sample = SampleProcess((1 << 22) + 1);
  EXPECT_EQ(sample.status().code(), absl::StatusCode::kNotFound)
      << sample.status();
}

}  // namespace
}  // namespace moeserve::soak
