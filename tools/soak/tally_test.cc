#include "tools/soak/tally.h"

#include "gtest/gtest.h"

namespace moeserve::soak {
namespace {

TEST(TallyTest, CountsByActionAndCodeAndKeepsUnexpectedSamples) {
  Tally tally;
  tally.Record(Action::kStream, grpc::Status::OK, true, 5);
  tally.Record(Action::kStream,
               grpc::Status(grpc::StatusCode::INTERNAL, "boom"), false, 0);
  // Shedding is never unexpected.
  tally.Record(Action::kUnary,
               grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"),
               false, 0);
  tally.Record(Action::kInvalid,
               grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "top_p"), true,
               0);
  EXPECT_EQ(tally.calls(), 4);
  EXPECT_EQ(tally.unexpected(), 1);
  EXPECT_EQ(tally.tokens(), 5);
  const nlohmann::json j = tally.ToJson();
  EXPECT_EQ(j["by_action"]["stream"]["OK"], 1);
  EXPECT_EQ(j["by_action"]["stream"]["INTERNAL"], 1);
  EXPECT_EQ(j["by_action"]["unary"]["RESOURCE_EXHAUSTED"], 1);
  EXPECT_EQ(j["by_action"]["invalid"]["INVALID_ARGUMENT"], 1);
  ASSERT_EQ(j["unexpected_samples"].size(), 1u);
  EXPECT_EQ(j["unexpected_samples"][0], "stream: INTERNAL: boom");
}

TEST(TallyTest, NamesActions) {
  EXPECT_STREQ(ActionName(Action::kStream), "stream");
  EXPECT_STREQ(ActionName(Action::kDisconnect), "disconnect");
}

}  // namespace
}  // namespace moeserve::soak
