#include "base/flag_help.h"

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, flag_help_test_port, 50051, "The port to listen on.");
ABSL_FLAG(std::string, flag_help_test_name, "", "A name.");

namespace moeserve::base {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ProgramHelp TestHelp() {
  return {.program = "prog",
          .summary = "does things",
          .groups = {{"Network", {"flag_help_test_port"}},
                     {"Other", {"flag_help_test_gone"}}},
          .version_details = [] {
            return std::vector<std::string>{"backends: cpu"};
          }};
}

TEST(FlagHelpTest, GroupsFlagsWithDefaultsAndHelp) {
  const std::string text = FormatHelp(TestHelp());
  EXPECT_THAT(text, HasSubstr("prog: does things"));
  EXPECT_THAT(text, HasSubstr("Network:\n  --flag_help_test_port (default: "
                              "50051)\n      The port to listen on.\n"));
  EXPECT_THAT(text, HasSubstr("--flag_help_test_gone  (not in this build)"));
}

TEST(FlagHelpTest, VersionNamesRevisionAndDetails) {
  const std::string text = FormatVersion(TestHelp());
  EXPECT_THAT(text, HasSubstr("prog 0."));
  EXPECT_THAT(text, HasSubstr("(git "));
  EXPECT_THAT(text, HasSubstr("\nbackends: cpu\n"));
}

TEST(FlagHelpTest, FindsUngroupedFlags) {
  EXPECT_THAT(UngroupedFlags(TestHelp(), "base/flag_help_test"),
              ElementsAre("flag_help_test_name"));
}

TEST(FlagHelpTest, HandlesHelpAndVersionOnly) {
  char prog[] = "prog", help[] = "--help", version[] = "--version",
       other[] = "--flag_help_test_port=1", dashdash[] = "--";
  char* with_help[] = {prog, other, help};
  EXPECT_EQ(HandleHelpAndVersion(3, with_help, TestHelp()), 0);
  char* with_version[] = {prog, version};
  EXPECT_EQ(HandleHelpAndVersion(2, with_version, TestHelp()), 0);
  char* plain[] = {prog, other};
  EXPECT_EQ(HandleHelpAndVersion(2, plain, TestHelp()), std::nullopt);
  char* after_dashdash[] = {prog, dashdash, help};
  EXPECT_EQ(HandleHelpAndVersion(3, after_dashdash, TestHelp()), std::nullopt);
}

}  // namespace
}  // namespace moeserve::base
