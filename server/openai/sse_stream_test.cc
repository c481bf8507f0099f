// SseStream and UnaryCompletion against a fake engine call and a fake
// connection: parking, waking, the event stream, cancellation.
#include "server/openai/sse_stream.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/openai/connection_parking.h"
#include "server/openai/testing/fake_model_host.h"
#include "server/openai/unary_completion.h"

namespace moeserve::server::openai {
namespace {

using testing::FakeCallState;
using testing::FakeModelHost;
using ::testing::HasSubstr;
using ::testing::Not;

class FakeParking final : public ConnectionParking {
 public:
  void Park() override {
    EXPECT_FALSE(parked) << "parked twice";
    parked = true;
    ++parks;
  }
  void Wake() override {
    EXPECT_TRUE(parked) << "woken while not parked";
    parked = false;
    ++wakes;
  }
  bool parked = false;
  int parks = 0;
  int wakes = 0;
};

class SseStreamTest : public ::testing::Test {
 protected:
  std::unique_ptr<GenerateCall> StartCall() {
    absl::StatusOr<std::unique_ptr<GenerateCall>> call =
        host_.StartGenerate(v1::GenerateRequest(), absl::InfiniteFuture(), "c");
    EXPECT_TRUE(call.ok());
    return *std::move(call);
  }
  std::unique_ptr<SseStream> NewStream() {
    return std::make_unique<SseStream>(
        StreamEncoder({Endpoint::kChatCompletions, 1, "lru", "chatcmpl-x"},
                      false),
        &parking_, [this](const absl::Status& s) { finished_.push_back(s); });
  }
  // Reads until the stream parks or ends; appends to *out.
  ssize_t Drain(SseStream* stream, std::string* out, size_t chunk = 7) {
    std::vector<char> buf(chunk);
    for (;;) {
      const ssize_t n = stream->Read(buf.data(), buf.size());
      if (n <= 0) return n;
      out->append(buf.data(), static_cast<size_t>(n));
    }
  }

  FakeModelHost host_;
  FakeParking parking_;
  std::vector<absl::Status> finished_;
};

TEST_F(SseStreamTest, ParksUntilTheEngineSpeaksAndEndsWithDone) {
  std::unique_ptr<SseStream> stream = NewStream();
  stream->Start(StartCall());
  std::shared_ptr<FakeCallState> call = host_.calls().at(0);
  std::string sse;
  // The role chunk goes at once, before the engine's first message.
  EXPECT_EQ(Drain(stream.get(), &sse), 0);
  EXPECT_TRUE(parking_.parked);
  EXPECT_THAT(sse, HasSubstr("\"role\":\"assistant\""));
  EXPECT_THAT(sse, HasSubstr("\"id\":\"chatcmpl-x\""));
  EXPECT_THAT(sse, Not(HasSubstr("content\":\"H")));

  call->PushText("Hel");
  EXPECT_FALSE(parking_.parked);
  EXPECT_EQ(Drain(stream.get(), &sse), 0);  // parked again
  EXPECT_THAT(sse, HasSubstr("\"content\":\"Hel\""));

  call->PushText("lo", v1::STOP_SEQUENCE);
  EXPECT_EQ(Drain(stream.get(), &sse), SseStream::kEnd);
  EXPECT_THAT(sse, HasSubstr("\"content\":\"lo\""));
  EXPECT_THAT(sse, HasSubstr("\"finish_reason\":\"stop\""));
  ASSERT_GE(sse.size(), 14u);
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
  EXPECT_EQ(parking_.parks, parking_.wakes + 0);
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_TRUE(finished_[0].ok());
  stream->Close(true);
  EXPECT_FALSE(call->cancelled());
}

TEST_F(SseStreamTest, MessagesWaitingAtStartAreSentAtOnce) {
  std::unique_ptr<SseStream> stream = NewStream();
  std::unique_ptr<GenerateCall> c = StartCall();
  std::shared_ptr<FakeCallState> call = host_.calls().at(0);
  call->PushText("a");
  call->PushText("b", v1::LENGTH);
  stream->Start(std::move(c));
  std::string sse;
  EXPECT_EQ(Drain(stream.get(), &sse, 4096), SseStream::kEnd);
  EXPECT_EQ(parking_.parks, 0);
  EXPECT_THAT(sse, HasSubstr("\"finish_reason\":\"length\""));
}

TEST_F(SseStreamTest, ClientGoneCancelsTheEngineRequest) {
  std::unique_ptr<SseStream> stream = NewStream();
  stream->Start(StartCall());
  std::shared_ptr<FakeCallState> call = host_.calls().at(0);
  call->PushText("a");
  std::string sse;
  Drain(stream.get(), &sse);
  stream->Close(false);  // the connection broke
  EXPECT_TRUE(call->cancelled());
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(finished_[0].code(), absl::StatusCode::kCancelled);
  call->PushText("late");  // no listener any more: nothing happens
  stream.reset();
  EXPECT_TRUE(call->released());
}

// The drain is over: the stream ends as a stream (an error event, then
// [DONE]), its engine request is cancelled, and nothing follows [DONE].
TEST_F(SseStreamTest, ShutdownEndsWithAnErrorEventAndDone) {
  std::unique_ptr<SseStream> stream = NewStream();
  stream->Start(StartCall());
  std::string sse;
  EXPECT_EQ(Drain(stream.get(), &sse), 0);
  stream->Shutdown();
  EXPECT_FALSE(parking_.parked);
  EXPECT_TRUE(host_.calls().at(0)->cancelled());
  sse.clear();
  EXPECT_EQ(Drain(stream.get(), &sse), SseStream::kEnd);
  EXPECT_THAT(sse, HasSubstr("data: {\"error\""));
  EXPECT_THAT(sse, HasSubstr("shutting down"));
  EXPECT_TRUE(absl::EndsWith(sse, "data: [DONE]\n\n")) << sse;
  host_.calls().at(0)->PushText("late");  // after [DONE]: dropped
  std::string more;
  EXPECT_EQ(Drain(stream.get(), &more), SseStream::kEnd);
  EXPECT_EQ(more, "");
  stream->Close(true);
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(finished_[0].code(), absl::StatusCode::kUnavailable);
}

TEST_F(SseStreamTest, ClosedBeforeStartCountsNothing) {
  std::unique_ptr<SseStream> stream = NewStream();
  stream->Close(false);
  stream.reset();
  EXPECT_TRUE(finished_.empty());
}

TEST_F(SseStreamTest, SeveralChoicesInterleaveAndEndTogether) {
  auto stream = std::make_unique<SseStream>(
      StreamEncoder({Endpoint::kCompletions, 1, "lru", "cmpl-x"}, true, 2),
      &parking_, [this](const absl::Status& s) { finished_.push_back(s); });
  std::vector<std::unique_ptr<GenerateCall>> calls;
  calls.push_back(StartCall());
  calls.push_back(StartCall());
  stream->Start(std::move(calls));
  std::shared_ptr<FakeCallState> a = host_.calls().at(0);
  std::shared_ptr<FakeCallState> b = host_.calls().at(1);
  std::string sse;
  EXPECT_EQ(Drain(stream.get(), &sse), 0);
  a->PushText("A1");
  b->PushText("B1");
  a->PushText("A2");  // waits in the call until A1 was read
  EXPECT_EQ(Drain(stream.get(), &sse), 0);
  EXPECT_THAT(sse, HasSubstr(R"("index":0,"logprobs":null,"text":"A1")"));
  EXPECT_THAT(sse, HasSubstr(R"("index":1,"logprobs":null,"text":"B1")"));
  EXPECT_THAT(sse, HasSubstr(R"("text":"A2")"));
  a->PushText("", v1::LENGTH);
  EXPECT_EQ(Drain(stream.get(), &sse), 0);  // B still runs: no [DONE]
  EXPECT_THAT(sse, Not(HasSubstr("[DONE]")));
  EXPECT_THAT(sse, Not(HasSubstr(R"("choices":[])")));  // no usage yet
  EXPECT_TRUE(finished_.empty());
  b->PushText("B2", v1::STOP_SEQUENCE);
  EXPECT_EQ(Drain(stream.get(), &sse), SseStream::kEnd);
  EXPECT_THAT(sse, HasSubstr(R"("choices":[])"));  // the one usage chunk
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_TRUE(finished_[0].ok());
  stream->Close(true);
}

TEST_F(SseStreamTest, SeveralChoicesAllCancelledWhenTheClientGoes) {
  auto stream = std::make_unique<SseStream>(
      StreamEncoder({Endpoint::kCompletions, 1, "lru", "cmpl-x"}, false, 2),
      &parking_, [this](const absl::Status& s) { finished_.push_back(s); });
  std::vector<std::unique_ptr<GenerateCall>> calls;
  calls.push_back(StartCall());
  calls.push_back(StartCall());
  stream->Start(std::move(calls));
  std::string sse;
  EXPECT_EQ(Drain(stream.get(), &sse), 0);
  stream->ClientGone();  // the hangup watch saw the socket close
  EXPECT_TRUE(host_.calls().at(0)->cancelled());
  EXPECT_TRUE(host_.calls().at(1)->cancelled());
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(finished_[0].code(), absl::StatusCode::kCancelled);
  stream->Close(false);
  stream.reset();
  EXPECT_TRUE(host_.calls().at(0)->released());
  EXPECT_TRUE(host_.calls().at(1)->released());
}

TEST_F(SseStreamTest, UnaryWaitsForEveryChoice) {
  UnaryCompletion unary(&parking_, 2);
  std::vector<std::unique_ptr<GenerateCall>> calls;
  calls.push_back(StartCall());
  calls.push_back(StartCall());
  unary.Start(std::move(calls));
  absl::Status status;
  EXPECT_FALSE(unary.DoneOrPark(&status));
  host_.calls().at(1)->PushText("b", v1::LENGTH);
  EXPECT_TRUE(parking_.parked);  // choice 0 still runs
  host_.calls().at(0)->PushText("a", v1::EOS_TOKEN);
  EXPECT_FALSE(parking_.parked);
  ASSERT_TRUE(unary.DoneOrPark(&status));
  EXPECT_TRUE(status.ok());
  ASSERT_EQ(unary.responses().size(), 2u);
  EXPECT_EQ(unary.responses()[0].text(), "a");
  EXPECT_EQ(unary.responses()[1].text(), "b");
  unary.Close();
}

TEST_F(SseStreamTest, UnaryParksUntilDone) {
  UnaryCompletion unary(&parking_);
  unary.Start(StartCall());
  std::shared_ptr<FakeCallState> call = host_.calls().at(0);
  absl::Status status;
  EXPECT_FALSE(unary.DoneOrPark(&status));
  EXPECT_TRUE(parking_.parked);
  call->PushText("a");
  EXPECT_TRUE(parking_.parked);
  call->PushText("b", v1::LENGTH);
  EXPECT_FALSE(parking_.parked);
  ASSERT_TRUE(unary.DoneOrPark(&status));
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(unary.response().text(), "ab");
  EXPECT_EQ(unary.response().finish_reason(), v1::LENGTH);
  EXPECT_EQ(unary.response().usage().completion_tokens(), 2u);
  unary.Close();
  EXPECT_FALSE(call->cancelled());
}

TEST_F(SseStreamTest, UnaryClosedEarlyCancels) {
  auto unary = std::make_unique<UnaryCompletion>(&parking_);
  unary->Start(StartCall());
  absl::Status status;
  EXPECT_FALSE(unary->DoneOrPark(&status));
  unary->Shutdown();
  EXPECT_FALSE(parking_.parked);
  ASSERT_TRUE(unary->DoneOrPark(&status));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  unary->Close();
  EXPECT_TRUE(host_.calls().at(0)->cancelled());
  unary.reset();
  EXPECT_TRUE(host_.calls().at(0)->released());
}

}  // namespace
}  // namespace moeserve::server::openai
