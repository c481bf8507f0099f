// Issue 16: moeserve_engine_info's model_dir label carried the server's
// absolute model path.
#include "server/server_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ServerMetrics, ModelDirLabelIsTheDirectoryNameOnly) {
  metrics::Registry registry;
  ServerOptions options;
  options.model_dir = "/srv/private/checkpoints/demo/";
  absl::StatusOr<std::unique_ptr<ServerMetrics>> m =
      ServerMetrics::Create(&registry, options, [] { return true; });
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string text = registry.Serialize();
  EXPECT_THAT(text, HasSubstr("model_dir=\"demo\""));
  EXPECT_THAT(text, Not(HasSubstr("/srv/private")));
}

}  // namespace
}  // namespace moeserve::server
