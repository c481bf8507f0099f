// The engine <-> transport hand-off under ThreadSanitizer
// (`bazel test --config=tsan //server:serving_handoff_test`, run by the
// README test command): the same pumps the gRPC reactors use
// (server/generate_pump.h), driven by a transport that behaves as gRPC's
// callback API does (writes complete later on transport threads, one in
// flight per call; OnCancel when the client cancels or its deadline passes;
// OnDone once everything is over) but that TSan sees whole: Debian's gRPC is
// not TSan-instrumented, and its inline templates synchronised through its
// uninstrumented core make TSan report hundreds of races that are not
// (server/grpc_handoff_test runs the real gRPC path, without TSan).
//
// Everything below the transport is the server's real code: EngineHost,
// GenerateCall, RequestStream, two engine instances' schedulers, the
// offloaded expert tier and the metrics. Clients finish, cancel mid-stream,
// run out their deadline and are aborted by id, all at once, several rounds
// over; afterwards every engine is idle and every request was counted under
// the finish reason it should have.
#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
#include "gtest/gtest.h"
#include "metrics/registry.h"
#include "server/engine_host.h"
#include "server/generate_pump.h"
#include "server/server_options.h"
#include "server/testing/handoff_fixture.h"

namespace moeserve {
namespace {

using Clock = std::chrono::steady_clock;

// Every client here is one caller (server/caller_identity.h).
constexpr char kCaller[] = "peer:handoff";

// Transport threads: run tasks at or after their due time, like gRPC's
// callback executor and timers.
class Executor {
 public:
  explicit Executor(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~Executor() {
    {
      base::MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    for (std::thread& t : threads_) t.join();
  }

  void Post(std::function<void()> task, Clock::duration delay = {}) {
    {
      base::MutexLock lock(&mu_);
      tasks_.push({Clock::now() + delay, seq_++, std::move(task)});
    }
    cv_.SignalAll();
  }

 private:
  struct Task {
    Clock::time_point due;
    uint64_t seq;
    std::function<void()> run;
    bool operator>(const Task& o) const {
      return due != o.due ? due > o.due : seq > o.seq;
    }
  };

  void Run() {
    while (true) {
      std::function<void()> run;
      {
        base::MutexLock lock(&mu_);
        while (true) {
          if (stop_ && tasks_.empty()) return;
          if (!tasks_.empty() && tasks_.top().due <= Clock::now()) break;
          const Clock::time_point wake =
              tasks_.empty() ? Clock::now() + std::chrono::milliseconds(50)
                             : tasks_.top().due;
          cv_.WaitUntil(&mu_, wake, [] { return false; });
        }
        run = std::move(const_cast<Task&>(tasks_.top()).run);
        tasks_.pop();
      }
      run();
    }
  }

  base::Mutex mu_;
  base::CondVar cv_;
  std::priority_queue<Task, std::vector<Task>, std::greater<Task>> tasks_
      ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

using server::testing::Client;
using server::testing::Outcome;

// One call as gRPC would run it: reactions posted to the executor, never run
// inline from the pump (which calls the transport with its lock held).
class FakeCall final : public server::StreamTransport,
                       public server::UnaryTransport,
                       public std::enable_shared_from_this<FakeCall> {
 public:
  FakeCall(Executor* executor, server::EngineHost* host, Client kind,
           std::string id)
      : executor_(executor), host_(host), kind_(kind), id_(std::move(id)) {}

  bool unary() const { return server::testing::IsUnary(kind_); }

  void Start(std::unique_ptr<server::GenerateCall> call, absl::Time deadline) {
    if (unary()) {
      unary_pump_ =
          std::make_unique<server::GenerateUnaryPump>(this, &unary_response_);
      unary_pump_->Start(std::move(call));
    } else {
      stream_pump_ = std::make_unique<server::GenerateStreamPump>(this);
      stream_pump_->Start(std::move(call));
    }
    if (deadline != absl::InfiniteFuture()) {  // gRPC's deadline timer
      executor_->Post(
          [self = shared_from_this()] {
            self->React([&self] { self->pump()->OnCancel(); });
          },
          absl::ToChronoNanoseconds(deadline - absl::Now()));
    }
  }

  // StreamTransport: gRPC serialises the message at StartWrite.
  void StartWrite(const v1::GenerateResponse* response) override {
    v1::GenerateResponse copy = *response;
    executor_->Post([self = shared_from_this(), copy = std::move(copy)] {
      self->React([&self, &copy] { self->Delivered(copy); });
    });
  }

  // Both transports.
  void Finish(const absl::Status& status) override {
    {
      base::MutexLock lock(&mu_);
      status_ = status;
      finished_ = true;
    }
    executor_->Post([self = shared_from_this()] { self->MaybeDone(); });
  }

  // Waits for OnDone; returns what the client saw.
  Outcome Wait() {
    base::MutexLock lock(&mu_);
    done_cv_.Wait(
        &mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; });
    if (unary()) {
      return {status_.code(), unary_response_.finish_reason(),
              unary_response_.token_ids_size()};
    }
    return {status_.code(), finish_, tokens_};
  }

 private:
  server::PumpBase* pump() {
    return unary() ? static_cast<server::PumpBase*>(unary_pump_.get())
                   : stream_pump_.get();
  }

  // A write reached the client.
  void Delivered(const v1::GenerateResponse& r) {
    bool cancel_now = false, abort_now = false, client_gone;
    {
      base::MutexLock lock(&mu_);
      tokens_ += r.token_ids_size();
      if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        finish_ = r.finish_reason();
      }
      if (tokens_ >= 2 && !acted_) {
        acted_ = true;
        cancel_now = kind_ == Client::kCancel;
        abort_now = kind_ == Client::kAborted;
      }
      if (cancel_now) client_cancelled_ = true;
      client_gone = client_cancelled_;
    }
    if (abort_now) {
      EXPECT_TRUE(host_->Abort(kCaller, id_));
    }
    stream_pump_->OnWriteDone(!client_gone);
    if (cancel_now)
      executor_->Post([self = shared_from_this()] {
        self->React([&self] { self->pump()->OnCancel(); });
      });
  }

  // Runs a reaction unless OnDone already ran; counts it in flight.
  void React(const std::function<void()>& reaction) {
    {
      base::MutexLock lock(&mu_);
      if (done_) return;
      ++in_flight_;
    }
    reaction();
    {
      base::MutexLock lock(&mu_);
      --in_flight_;
    }
    MaybeDone();
  }

  // OnDone: once finished and no reaction is running.
  void MaybeDone() {
    {
      base::MutexLock lock(&mu_);
      if (!finished_ || in_flight_ > 0 || done_ || detaching_) return;
      detaching_ = true;
    }
    pump()->Detach();
    base::MutexLock lock(&mu_);
    done_ = true;
    done_cv_.SignalAll();  // under mu_: the waiter may free the CondVar
  }

  Executor* const executor_;
  server::EngineHost* const host_;
  const Client kind_;
  const std::string id_;
  std::unique_ptr<server::GenerateStreamPump> stream_pump_;
  std::unique_ptr<server::GenerateUnaryPump> unary_pump_;
  v1::GenerateUnaryResponse unary_response_;  // the pump's until Finish

  base::Mutex mu_;
  base::CondVar done_cv_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int tokens_ ABSL_GUARDED_BY(mu_) = 0;
  v1::FinishReason finish_ ABSL_GUARDED_BY(mu_) = v1::FINISH_REASON_UNSPECIFIED;
  bool acted_ ABSL_GUARDED_BY(mu_) = false;
  bool client_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool detaching_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(ServingHandOffTest, FinishCancelDeadlineAndAbortAllAtOnce) {
  absl::StatusOr<server::ServerOptions> options =
      server::testing::HandOffOptions();
  ASSERT_TRUE(options.ok()) << options.status();
  metrics::Registry registry;
  absl::StatusOr<std::unique_ptr<server::EngineHost>> host =
      server::EngineHost::Create(*options, &registry,
                                 server::testing::HandOffTokenizer(*options));
  ASSERT_TRUE(host.ok()) << host.status();
  Executor executor(3);

  constexpr int kRounds = 3;
  constexpr int kClients = 12;
  const auto& kinds = server::testing::kClientKinds;
  std::map<Client, int> sent;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::shared_ptr<FakeCall>> calls;
    std::vector<std::thread> starters;  // gRPC's threads start calls
    for (int c = 0; c < kClients; ++c) {
      const int i = round * kClients + c;
      const Client kind = kinds[c % std::size(kinds)];
      ++sent[kind];
      const v1::GenerateRequest r = server::testing::HandOffRequest(i, kind);
      calls.push_back(std::make_shared<FakeCall>(&executor, host->get(), kind,
                                                 r.request_id()));
      starters.emplace_back([&, r, kind, call = calls.back().get()] {
        const absl::Duration d = server::testing::DeadlineFor(kind);
        const absl::Time deadline = absl::Now() + d;  // infinite stays so
        auto generate = (*host)->StartGenerate(r, deadline, kCaller);
        ASSERT_TRUE(generate.ok()) << generate.status();
        call->Start(*std::move(generate), deadline);
      });
    }
    for (std::thread& t : starters) t.join();
    for (int c = 0; c < kClients; ++c) {
      SCOPED_TRACE(absl::StrCat("client ", c));
      server::testing::ExpectOutcome(kinds[c % std::size(kinds)],
                                     calls[c]->Wait());
    }
  }
  // Every request ends in the scheduler with its resources freed.
  server::testing::ExpectAllCounted(registry, sent);
}

}  // namespace
}  // namespace moeserve
