#include "server/grpc_status.h"

#include <string>

#include "gtest/gtest.h"

namespace moeserve::server {
namespace {

TEST(ToGrpcStatus, MapsCodesOneToOne) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("x")).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::DeadlineExceededError("x")).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("sampling.top_p: bad"))
                .error_message(),
            "sampling.top_p: bad");
}

// Issue 16: the model's absolute path and a library's source location
// reached clients (the server log keeps them).
TEST(ToGrpcStatus, HidesServerPathsAndSourceLocations) {
  const grpc::Status st = ToGrpcStatus(absl::UnavailableError(
      "no model is loaded: INVALID_ARGUMENT: /srv/private/models/x/"
      "tokenizer.model: not a sentencepiece model: INTERNAL: "
      "src/sentencepiece_processor.cc(1102) [model_proto] bad"));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(),
            "no model is loaded: INVALID_ARGUMENT: tokenizer.model: not a "
            "sentencepiece model: INTERNAL: [model_proto] bad");
}

TEST(ToGrpcStatus, BoundsLongMessagesOnUtf8Boundary) {
  std::string message;
  while (message.size() < 3 * kMaxErrorMessageBytes) message += "é";
  grpc::Status st = ToGrpcStatus(absl::InternalError(message));
  EXPECT_LE(st.error_message().size(), kMaxErrorMessageBytes);
  EXPECT_EQ(st.error_message().substr(st.error_message().size() - 3), "...");
  const std::string body =
      st.error_message().substr(0, st.error_message().size() - 3);
  EXPECT_EQ(body.size() % 2, 0u);  // whole two-byte characters only
}

}  // namespace
}  // namespace moeserve::server
