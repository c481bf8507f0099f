#include "server/openai/hangup_watch.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace moeserve::server::openai {
namespace {

// A connected pair of stream sockets: [0] is watched, [1] plays the client.
struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  void CloseClient() {
    close(fd[1]);
    fd[1] = -1;
  }
  int fd[2] = {-1, -1};
};

TEST(HangupWatchTest, AClientThatClosesIsReportedOnce) {
  HangupWatch watch;
  SocketPair s;
  std::atomic<int> calls{0};
  absl::Notification hung_up;
  watch.Add(&s, s.fd[0], [&] {
    ++calls;
    hung_up.Notify();
  });
  EXPECT_EQ(watch.watched(), 1);
  s.CloseClient();
  ASSERT_TRUE(hung_up.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(watch.watched(), 0);  // reported entries leave the watch
}

TEST(HangupWatchTest, AHalfCloseCounts) {
  HangupWatch watch;
  SocketPair s;
  absl::Notification hung_up;
  watch.Add(&s, s.fd[0], [&] { hung_up.Notify(); });
  ASSERT_EQ(shutdown(s.fd[1], SHUT_WR), 0);  // the client's FIN
  EXPECT_TRUE(hung_up.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(HangupWatchTest, DataFromTheClientIsNotAHangup) {
  HangupWatch watch;
  SocketPair s;
  std::atomic<int> calls{0};
  watch.Add(&s, s.fd[0], [&] { ++calls; });
  ASSERT_EQ(write(s.fd[1], "GET / HTTP/1.1\r\n", 16), 16);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(watch.watched(), 1);
  // Only the socket that hung up is reported.
  SocketPair other;
  absl::Notification hung_up;
  watch.Add(&other, other.fd[0], [&] { hung_up.Notify(); });
  other.CloseClient();
  ASSERT_TRUE(hung_up.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(watch.watched(), 1);
}

TEST(HangupWatchTest, RemovedSocketsAreNotReported) {
  HangupWatch watch;
  SocketPair s;
  std::atomic<int> calls{0};
  watch.Add(&s, s.fd[0], [&] { ++calls; });
  watch.Remove(&s);
  EXPECT_EQ(watch.watched(), 0);
  s.CloseClient();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(calls.load(), 0);
  watch.Remove(&s);  // again: nothing
}

TEST(HangupWatchTest, CallbacksAreReleasedOnceRunOrRemoved) {
  HangupWatch watch;
  SocketPair a, b;
  auto held = std::make_shared<int>(0);
  absl::Notification hung_up;
  watch.Add(&a, a.fd[0], [held, &hung_up] { hung_up.Notify(); });
  watch.Add(&b, b.fd[0], [held] {});
  EXPECT_EQ(held.use_count(), 3);
  a.CloseClient();
  ASSERT_TRUE(hung_up.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The run callback is dropped without waiting for the next poll round.
  for (int i = 0; i < 200 && held.use_count() > 2; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(held.use_count(), 2);
  watch.Remove(&b);
  EXPECT_EQ(held.use_count(), 1);
}

TEST(HangupWatchTest, StopsWithSocketsStillWatched) {
  SocketPair s;
  std::atomic<int> calls{0};
  {
    HangupWatch watch;
    watch.Add(&s, s.fd[0], [&] { ++calls; });
  }  // joins without waiting for a hangup
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace moeserve::server::openai
