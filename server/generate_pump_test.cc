// The pumps end a call as soon as its client is gone (OnCancel, a failed
// write), without waiting for the engine's last message: a server shutting
// down cancels every call, and an engine inside a step on a slow link may
// not push that message for seconds.
#include "server/generate_pump.h"

#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "gtest/gtest.h"

namespace moeserve::server {
namespace {

// An engine request that sends what the test queues, and nothing after a
// cancel (the engine is stuck in a step).
class StuckCall final : public GenerateCall {
 public:
  void SetListener(std::function<void()> on_ready) override {
    listener_ = std::move(on_ready);
  }
  bool Next(v1::GenerateResponse* response,
            absl::Status* final_status) override {
    if (queued_.empty()) return false;
    *response = queued_.front();
    queued_.pop_front();
    *final_status = absl::OkStatus();
    return true;
  }
  absl::Status Cancel() override {
    ++cancels_;
    return deadline_ ? absl::DeadlineExceededError("deadline")
                     : absl::CancelledError("client went away");
  }

  void Push(v1::GenerateResponse r) {
    queued_.push_back(std::move(r));
    if (listener_) listener_();
  }

  bool deadline_ = false;
  int cancels_ = 0;

 private:
  std::function<void()> listener_;
  std::deque<v1::GenerateResponse> queued_;
};

struct RecordingTransport final : StreamTransport, UnaryTransport {
  void StartWrite(const v1::GenerateResponse*) override { ++writes; }
  void Finish(const absl::Status& s) override {
    ASSERT_FALSE(status.has_value()) << "finished twice";
    status = s;
  }
  int writes = 0;
  std::optional<absl::Status> status;
};

v1::GenerateResponse Token() {
  v1::GenerateResponse r;
  r.add_token_ids(7);
  return r;
}

TEST(GeneratePumpTest, CancelFinishesAtOnceWithoutTheEngine) {
  RecordingTransport transport;
  auto call = std::make_unique<StuckCall>();
  StuckCall* raw = call.get();
  GenerateStreamPump pump(&transport);
  pump.Start(std::move(call));
  pump.OnCancel();
  ASSERT_TRUE(transport.status.has_value());
  EXPECT_EQ(transport.status->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(raw->cancels_, 1);
  raw->Push(Token());  // late engine output is not written
  EXPECT_EQ(transport.writes, 0);
  pump.Detach();
}

TEST(GeneratePumpTest, CancelDuringAWriteFinishesAfterIt) {
  RecordingTransport transport;
  auto call = std::make_unique<StuckCall>();
  StuckCall* raw = call.get();
  raw->deadline_ = true;
  GenerateStreamPump pump(&transport);
  pump.Start(std::move(call));
  raw->Push(Token());
  ASSERT_EQ(transport.writes, 1);
  pump.OnCancel();
  EXPECT_FALSE(transport.status.has_value());  // one write still in flight
  pump.OnWriteDone(false);
  ASSERT_TRUE(transport.status.has_value());
  EXPECT_EQ(transport.status->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(raw->cancels_, 1);  // cancelled once, not per reaction
  pump.Detach();
}

TEST(GeneratePumpTest, UnaryCancelFinishesAtOnce) {
  RecordingTransport transport;
  v1::GenerateUnaryResponse response;
  auto call = std::make_unique<StuckCall>();
  StuckCall* raw = call.get();
  GenerateUnaryPump pump(&transport, &response);
  pump.Start(std::move(call));
  raw->Push(Token());
  EXPECT_FALSE(transport.status.has_value());
  pump.OnCancel();
  ASSERT_TRUE(transport.status.has_value());
  EXPECT_EQ(transport.status->code(), absl::StatusCode::kCancelled);
  pump.Detach();
}

}  // namespace
}  // namespace moeserve::server
