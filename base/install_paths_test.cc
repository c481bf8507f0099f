#include "base/install_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace moeserve::base {
namespace {

TEST(InstallPathsTest, ExecutableDirIsWhereThisTestRuns) {
  const std::string dir = ExecutableDir();
  ASSERT_FALSE(dir.empty());
  struct stat st;
  EXPECT_EQ(stat((dir + "/install_paths_test").c_str(), &st), 0) << dir;
}

TEST(InstallPathsTest, KeepsAbsoluteExistingAndUnknownPaths) {
  EXPECT_EQ(ResolveDataPath("/nonexistent/models/demo"),
            "/nonexistent/models/demo");
  EXPECT_EQ(ResolveDataPath("no/such/dir"), "no/such/dir");
  EXPECT_EQ(ResolveDataPath(""), "");
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr);
  ASSERT_EQ(chdir(tmp), 0);
  std::ofstream("here.txt") << "x";
  EXPECT_EQ(ResolveDataPath("here.txt"), "here.txt");
}

}  // namespace
}  // namespace moeserve::base
