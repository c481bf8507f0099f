#include "base/plugin_loader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

TEST(PluginLoaderTest, ABrokenPluginAtTheEnvironmentPathIsAnErrorNotAFallback) {
  // A file that is not a shared object where the variable points, and a
  // loadable copy where the search would look (a runfiles tree of our own).
  const std::string dir = getenv("TEST_TMPDIR");
  const std::string broken = dir + "/libmoeserve_broken.so";
  FILE* f = fopen(broken.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("not an ELF file\n", f);
  fclose(f);
  const std::string runfiles = dir + "/runfiles";
  ASSERT_EQ(system(("mkdir -p " + runfiles + "/moeserve/engine && cp " +
                    "/lib/x86_64-linux-gnu/libm.so.6 " + runfiles +
                    "/moeserve/engine/libmoeserve_broken.so")
                       .c_str()),
            0);
  const char* old_runfiles = getenv("RUNFILES_DIR");
  const std::string saved = old_runfiles ? old_runfiles : "";
  setenv("RUNFILES_DIR", runfiles.c_str(), 1);
  const PluginSpec spec = {.file = "libmoeserve_broken.so",
                           .package_dir = "engine",
                           .env_var = "MOESERVE_TEST_PLUGIN",
                           .dlopen_flags = RTLD_NOW | RTLD_LOCAL};
  std::string error;
  // Without the variable, the search finds the good copy.
  unsetenv("MOESERVE_TEST_PLUGIN");
  EXPECT_NE(OpenPlugin(spec, &error), nullptr) << error;
  // With it, the broken file is the answer, and the error names it.
  setenv("MOESERVE_TEST_PLUGIN", broken.c_str(), 1);
  EXPECT_EQ(OpenPlugin(spec, &error), nullptr);
  unsetenv("MOESERVE_TEST_PLUGIN");
  if (old_runfiles) {
    setenv("RUNFILES_DIR", saved.c_str(), 1);
  } else {
    unsetenv("RUNFILES_DIR");
  }
  EXPECT_THAT(error, StartsWith("install problem: cannot load the plugin "
                                "libmoeserve_broken.so (" +
                                broken + ": "));
  EXPECT_THAT(error, HasSubstr("set MOESERVE_TEST_PLUGIN"));
}

}  // namespace
}  // namespace moeserve::base
