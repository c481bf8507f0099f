#include "base/named_registry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::base {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(NamedRegistryTest, FindsWhatWasRegistered) {
  NamedRegistry<int> registry("widget");
  EXPECT_TRUE(registry.Register("b", 2));
  EXPECT_TRUE(registry.Register("a", 1));
  ASSERT_NE(registry.Find("a"), nullptr);
  EXPECT_EQ(*registry.Find("a"), 1);
  EXPECT_EQ(*registry.Find("b"), 2);
  EXPECT_EQ(registry.Find("c"), nullptr);
  EXPECT_EQ(registry.kind(), "widget");
}

TEST(NamedRegistryTest, NamesAreSorted) {
  NamedRegistry<std::string> registry("widget");
  EXPECT_THAT(registry.Names(), IsEmpty());
  registry.Register("zeta", "z");
  registry.Register("alpha", "a");
  registry.Register("mu", "m");
  EXPECT_THAT(registry.Names(), ElementsAre("alpha", "mu", "zeta"));
}

TEST(NamedRegistryTest, PointersStayValidAcrossLaterRegistrations) {
  NamedRegistry<std::string> registry("widget");
  registry.Register("first", "1");
  const std::string* first = registry.Find("first");
  for (int i = 0; i < 100; ++i) registry.Register(std::to_string(i), "x");
  EXPECT_EQ(first, registry.Find("first"));
  EXPECT_EQ(*first, "1");
}

TEST(NamedRegistryDeathTest, DuplicateNameAbortsNamingKindAndName) {
  NamedRegistry<int> registry("widget");
  registry.Register("twice", 1);
  EXPECT_DEATH(registry.Register("twice", 2),
               "moeserve: widget 'twice' registered twice");
}

}  // namespace
}  // namespace moeserve::base
