// HangupWatch: notices clients that hang up while their connection waits.
//
// A non-streamed generation parks its HTTP connection until the answer is
// ready (unary_completion.h); libmicrohttpd does not poll a suspended
// connection, so a client that gives up would go unnoticed and the engine
// would generate up to max_tokens for nobody. The watch polls the sockets
// it is given for the peer's FIN or a reset (POLLRDHUP, POLLHUP, POLLERR;
// not for readable data, so a pipelined request does not count) and runs
// the socket's callback once when it sees one.
//
// One thread, started with the watch, sleeps in poll() on the watched
// sockets and an eventfd that Add, Remove and the destructor signal, so a
// hangup is seen at once and nothing runs while nothing happens. A socket
// closed while watched (POLLNVAL) counts as a hangup. A callback runs on
// that thread without the watch's lock held, and may run after Remove() of
// its key returned if it had already started: it must tolerate that (hold
// what it touches by shared_ptr). Thread-safe.
#ifndef MOESERVE_SERVER_OPENAI_HANGUP_WATCH_H_
#define MOESERVE_SERVER_OPENAI_HANGUP_WATCH_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "base/mutex.h"

namespace moeserve::server::openai {

class HangupWatch {
 public:
  HangupWatch();
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;
  ~HangupWatch();  // stops and joins the thread; no callback runs after

  // Watches `fd` under `key` (replacing what `key` had) until Remove(key)
  // or the hangup, when `on_hangup` runs (once).
  void Add(const void* key, int fd, std::function<void()> on_hangup)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const void* key) ABSL_LOCKS_EXCLUDED(mu_);

  int watched() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    int fd;
    std::function<void()> on_hangup;
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void WakeThread();

  const int wake_fd_;  // eventfd: the set changed, or stopping_
  mutable base::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<const void*, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after the fields above
};

}  // namespace moeserve::server::openai

#endif  // MOESERVE_SERVER_OPENAI_HANGUP_WATCH_H_
