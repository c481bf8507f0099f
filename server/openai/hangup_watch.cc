#include "server/openai/hangup_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace moeserve::server::openai {

HangupWatch::HangupWatch()
    : wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      thread_([this] { Run(); }) {}

HangupWatch::~HangupWatch() {
  {
    base::MutexLock lock(&mu_);
    stopping_ = true;
  }
  WakeThread();
  thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HangupWatch::WakeThread() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);
}

void HangupWatch::Add(const void* key, int fd,
                      std::function<void()> on_hangup) {
  {
    base::MutexLock lock(&mu_);
    entries_[key] = Entry{fd, std::move(on_hangup)};
  }
  WakeThread();
}

void HangupWatch::Remove(const void* key) {
  // Destroyed after the lock is released: the callback may hold the last
  // reference to something whose destructor takes other locks.
  std::function<void()> removed;
  {
    base::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    removed = std::move(it->second.on_hangup);
    entries_.erase(it);
  }
  WakeThread();  // stop polling its fd, which may be reused
}

int HangupWatch::watched() const {
  base::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

void HangupWatch::Run() {
  std::vector<pollfd> fds;
  std::vector<const void*> keys;
  std::vector<std::function<void()>> hung_up;
  for (;;) {
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    keys.assign(1, nullptr);
    {
      base::MutexLock lock(&mu_);
      if (stopping_) return;
      for (const auto& [key, entry] : entries_) {
        // Not POLLIN: data from the client (a pipelined request) is not a
        // hangup. POLLHUP, POLLERR and POLLNVAL are reported regardless.
        fds.push_back(pollfd{entry.fd, POLLRDHUP, 0});
        keys.push_back(key);
      }
    }
    if (wake_fd_ < 0) return;  // no eventfd: the watch is off
    if (poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof count);
    }
    hung_up.clear();
    {
      base::MutexLock lock(&mu_);
      for (size_t i = 1; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) ==
            0) {
          continue;
        }
        auto it = entries_.find(keys[i]);
        // Removed (or replaced by another socket) while we polled.
        if (it == entries_.end() || it->second.fd != fds[i].fd) continue;
        hung_up.push_back(std::move(it->second.on_hangup));
        entries_.erase(it);
      }
    }
    for (const std::function<void()>& f : hung_up) f();
    hung_up.clear();  // now, not after the next poll: they hold references
  }
}

}  // namespace moeserve::server::openai
