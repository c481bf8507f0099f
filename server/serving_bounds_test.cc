// The bounds flags: defaults, and out-of-range values refused naming the
// flag (the binary then exits 2 before serving).
#include "server/serving_bounds.h"

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(int, max_open_streams);
ABSL_DECLARE_FLAG(int, max_streams_per_connection);
ABSL_DECLARE_FLAG(int, grpc_max_threads);

namespace moeserve::server {
namespace {

using ::testing::HasSubstr;

TEST(ServingBoundsTest, DefaultsAreTheDocumentedOnes) {
  absl::FlagSaver saver;
  absl::StatusOr<ServingBounds> b = ServingBoundsFromFlags();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->max_open_streams, 1024);
  EXPECT_EQ(b->max_streams_per_connection, 100);
  EXPECT_EQ(b->grpc_max_threads, 16);
}

TEST(ServingBoundsTest, OutOfRangeNamesTheFlag) {
  struct Case {
    absl::Flag<int>* flag;
    int value;
    const char* name;
  };
  for (const Case& c :
       {Case{&FLAGS_max_open_streams, 0, "--max_open_streams"},
        Case{&FLAGS_max_streams_per_connection, 70000,
             "--max_streams_per_connection"},
        Case{&FLAGS_grpc_max_threads, 2, "--grpc_max_threads"}}) {
    absl::FlagSaver saver;
    absl::SetFlag(c.flag, c.value);
    absl::StatusOr<ServingBounds> b = ServingBoundsFromFlags();
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr(c.name));
  }
}

}  // namespace
}  // namespace moeserve::server
