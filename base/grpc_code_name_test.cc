#include "base/grpc_code_name.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace moeserve {
namespace {

TEST(GrpcCodeName, NamesEveryCodeOnce) {
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::INVALID_ARGUMENT),
               "INVALID_ARGUMENT");
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED),
               "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::UNAVAILABLE), "UNAVAILABLE");
  EXPECT_STREQ(GrpcCodeName(grpc::StatusCode::UNAUTHENTICATED),
               "UNAUTHENTICATED");
  std::set<std::string> names;
  for (int c = 0; c <= 16; ++c) {
    names.insert(GrpcCodeName(static_cast<grpc::StatusCode>(c)));
  }
  EXPECT_EQ(names.size(), 17u);
}

TEST(GrpcCodeName, UnknownValuesAreUnknown) {
  EXPECT_STREQ(GrpcCodeName(static_cast<grpc::StatusCode>(17)), "UNKNOWN");
  EXPECT_STREQ(GrpcCodeName(static_cast<grpc::StatusCode>(-1)), "UNKNOWN");
  EXPECT_STREQ(GrpcCodeName(static_cast<grpc::StatusCode>(99)), "UNKNOWN");
}

}  // namespace
}  // namespace moeserve
