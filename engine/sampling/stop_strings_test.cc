#include "engine/sampling/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

// Feeds `deltas` and returns everything emitted (and whether it stopped).
std::pair<std::string, bool> Feed(std::vector<std::string> stops,
                                  const std::vector<std::string>& deltas) {
  StopStringMatcher m(std::move(stops));
  std::string out;
  for (const std::string& d : deltas) {
    StopStringMatcher::Step s = m.Push(d);
    out += s.emit;
    if (s.stopped) return {out, true};
  }
  return {out + m.Flush(), false};
}

TEST(StopStringMatcher, StopInsideOneDelta) {
  EXPECT_EQ(Feed({"END"}, {"abcENDdef"}),
            std::make_pair(std::string("abc"), true));
}

TEST(StopStringMatcher, StopSpanningTokensIsNeverEmitted) {
  StopStringMatcher m({"\n\nQ:"});
  EXPECT_EQ(m.Push("Answer.").emit, "Answer.");
  EXPECT_EQ(m.Push("\n").emit, "");  // could be the stop: held
  EXPECT_EQ(m.Push("\nQ").emit, "");
  StopStringMatcher::Step s = m.Push(":");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.emit, "");
}

TEST(StopStringMatcher, HeldTextIsReleasedWhenItDiverges) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.Push("xab").emit, "x");
  EXPECT_EQ(m.Push("d").emit, "abd");
  EXPECT_EQ(m.Push("ab").emit, "");
  EXPECT_EQ(m.Flush(), "ab");
}

TEST(StopStringMatcher, EarliestOfSeveralStops) {
  EXPECT_EQ(Feed({"cd", "b"}, {"abcd"}),
            std::make_pair(std::string("a"), true));
}

TEST(StopStringMatcher, MultiByteStopsKeepUtf8Whole) {
  auto [out, stopped] = Feed({"世界"}, {"你好", "世", "界!"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "你好");
  auto [out2, stopped2] = Feed({"世界"}, {"你好", "世", "人"});
  EXPECT_FALSE(stopped2);
  EXPECT_EQ(out2, "你好世人");
}

TEST(StopStringMatcher, NoStopsPassesEverythingThrough) {
  StopStringMatcher m({});
  EXPECT_EQ(m.Push("abc").emit, "abc");
  EXPECT_EQ(m.Flush(), "");
}

}  // namespace
}  // namespace moeserve::engine
