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

enum class Client {
  kComplete,
  kCancel,
  kDeadline,
  kUnary,
  kUnaryDeadline,
  kAborted
};

// One call as gRPC would run it: reactions posted to the executor, never run
// inline from the pump (which calls the transport with its lock held).
class FakeCall final : public server::StreamTransport,
                       public server::UnaryTransport,
                       public std::enable_shared_from_this<FakeCall> {
 public:
  FakeCall(Executor* executor, server::EngineHost* host, Client kind,
           std::string id)
      : executor_(executor), host_(host), kind_(kind), id_(std::move(id)) {}

  bool unary() const {
    return kind_ == Client::kUnary || kind_ == Client::kUnaryDeadline;
  }

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

  // Waits for OnDone; returns the status, the tokens and the finish reason.
  void Wait(absl::Status* status, int* tokens, v1::FinishReason* finish) {
    base::MutexLock lock(&mu_);
    done_cv_.Wait(
        &mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; });
    *status = status_;
    if (unary()) {
      *tokens = unary_response_.token_ids_size();
      *finish = unary_response_.finish_reason();
    } else {
      *tokens = tokens_;
      *finish = finish_;
    }
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
    if (abort_now) EXPECT_TRUE(host_->Abort(id_));
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

double Metric(const metrics::Registry& registry, const std::string& name,
              const std::vector<std::string>& labels) {
  return server::testing::SumOfSamples(registry, name, labels);
}

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
  const Client kinds[] = {Client::kComplete,      Client::kCancel,
                          Client::kDeadline,      Client::kUnary,
                          Client::kUnaryDeadline, Client::kAborted};
  std::map<Client, int> sent;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::shared_ptr<FakeCall>> calls;
    std::vector<std::thread> starters;  // gRPC's threads start calls
    for (int c = 0; c < kClients; ++c) {
      const Client kind = kinds[c % std::size(kinds)];
      ++sent[kind];
      const std::string id = absl::StrCat("r", round, "_", c);
      calls.push_back(
          std::make_shared<FakeCall>(&executor, host->get(), kind, id));
      starters.emplace_back([&, kind, id, call = calls.back().get(), c] {
        const bool long_run =
            kind != Client::kComplete && kind != Client::kUnary;
        v1::GenerateRequest r;
        r.set_request_id(id);
        r.add_prompt_token_ids(1);
        r.add_prompt_token_ids(4 + c);
        r.mutable_sampling()->set_max_new_tokens(long_run ? 400 : 12);
        r.mutable_sampling()->set_ignore_eos(true);
        const bool timed =
            kind == Client::kDeadline || kind == Client::kUnaryDeadline;
        const absl::Time deadline = timed ? absl::Now() + absl::Milliseconds(40)
                                          : absl::InfiniteFuture();
        auto generate = (*host)->StartGenerate(r, deadline);
        ASSERT_TRUE(generate.ok()) << generate.status();
        call->Start(*std::move(generate), deadline);
      });
    }
    for (std::thread& t : starters) t.join();
    for (int c = 0; c < kClients; ++c) {
      absl::Status status;
      int tokens = 0;
      v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
      calls[c]->Wait(&status, &tokens, &finish);
      SCOPED_TRACE(absl::StrCat("client ", c));
      switch (kinds[c % std::size(kinds)]) {
        case Client::kComplete:
          EXPECT_TRUE(status.ok()) << status;
          EXPECT_EQ(finish, v1::LENGTH);
          EXPECT_EQ(tokens, 12);
          break;
        case Client::kUnary:
          EXPECT_TRUE(status.ok()) << status;
          EXPECT_EQ(tokens, 12);
          break;
        case Client::kCancel:
          EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
          break;
        case Client::kDeadline:
        case Client::kUnaryDeadline:
          EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded)
              << status;
          break;
        case Client::kAborted:
          EXPECT_TRUE(status.ok()) << status;
          EXPECT_EQ(finish, v1::CANCELLED);
          EXPECT_LT(tokens, 400);
          break;
      }
    }
  }
  // Every request ends in the scheduler with its resources freed; the
  // gauges follow the last event by one scheduler step.
  const int total = kRounds * kClients;
  auto settled = [&] {
    return Metric(registry, "moeserve_request_success_total", {}) == total &&
           Metric(registry, "moeserve_num_requests_running", {}) == 0 &&
           Metric(registry, "moeserve_num_requests_waiting", {}) == 0;
  };
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (!settled() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(settled());
  EXPECT_EQ(Metric(registry, "moeserve_request_success_total",
                   {"finished_reason=\"deadline\""}),
            sent[Client::kDeadline] + sent[Client::kUnaryDeadline]);
  EXPECT_EQ(Metric(registry, "moeserve_request_success_total",
                   {"finished_reason=\"cancelled\""}),
            sent[Client::kCancel] + sent[Client::kAborted]);
  EXPECT_EQ(Metric(registry, "moeserve_request_success_total",
                   {"finished_reason=\"length\""}),
            sent[Client::kComplete] + sent[Client::kUnary]);
}

}  // namespace
}  // namespace moeserve
