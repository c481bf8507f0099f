#include "base/plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::base {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(PluginLoaderTest, AMissingPluginIsAnInstallProblemNamingFileAndPaths) {
  unsetenv("MOESERVE_TEST_PLUGIN");
  std::string error;
  void* handle = OpenPlugin({.file = "libmoeserve_no_such_plugin.so",
                             .package_dir = "engine",
                             .env_var = "MOESERVE_TEST_PLUGIN",
                             .dlopen_flags = RTLD_NOW | RTLD_LOCAL},
                            &error);
  EXPECT_EQ(handle, nullptr);
  EXPECT_THAT(error, StartsWith("install problem: cannot load the plugin "
                                "libmoeserve_no_such_plugin.so (not found"));
  EXPECT_THAT(error,
              HasSubstr("/../lib/moeserve/libmoeserve_no_such_plugin.so"));
  EXPECT_THAT(error, HasSubstr("set MOESERVE_TEST_PLUGIN"));
}

TEST(PluginLoaderTest, TheEnvironmentVariableNamesThePath) {
  // Any real shared library stands in for a plugin here.
  const char* libm = "/lib/x86_64-linux-gnu/libm.so.6";
  setenv("MOESERVE_TEST_PLUGIN", libm, 1);
  std::string error;
  void* handle = OpenPlugin({.file = "libmoeserve_no_such_plugin.so",
                             .package_dir = "engine",
                             .env_var = "MOESERVE_TEST_PLUGIN",
                             .dlopen_flags = RTLD_NOW | RTLD_LOCAL},
                            &error);
  unsetenv("MOESERVE_TEST_PLUGIN");
  ASSERT_NE(handle, nullptr) << error;
  EXPECT_NE(PluginSymbol(handle, "cos", &error), nullptr);
  EXPECT_EQ(PluginSymbol(handle, "moeserve_missing", &error), nullptr);
  EXPECT_EQ(error, "missing symbol moeserve_missing");
}

}  // namespace
}  // namespace moeserve::base
