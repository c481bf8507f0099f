#include "metrics/exposition.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace moeserve::metrics::internal {
namespace {

TEST(FormatValueTest, IntegersHaveNoExponent) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(1000000), "1000000");
  EXPECT_EQ(FormatValue(123456789012345), "123456789012345");
}

TEST(FormatValueTest, FractionsRoundTrip) {
  EXPECT_EQ(FormatValue(0.001), "0.001");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatValue(1e-9), "1e-09");
  EXPECT_EQ(std::stod(FormatValue(1.0 / 3)), 1.0 / 3);
}

TEST(FormatValueTest, HugeValuesUseExponent) {
  EXPECT_EQ(FormatValue(1e300), "1e+300");
}

TEST(FormatValueTest, SpecialValues) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(FormatValue(kInf), "+Inf");
  EXPECT_EQ(FormatValue(-kInf), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(EscapeTest, LabelValueEscapesBackslashQuoteNewline) {
  std::string out;
  AppendEscapedLabelValue("a\\b\"c\nd\te", &out);
  EXPECT_EQ(out, "a\\\\b\\\"c\\nd\te");
}

TEST(EscapeTest, HelpEscapesBackslashAndNewlineOnly) {
  std::string out;
  AppendEscapedHelp("a\\b\"c\nd", &out);
  EXPECT_EQ(out, "a\\\\b\"c\\nd");
}

TEST(RenderLabelsTest, KeepsDeclaredOrder) {
  EXPECT_EQ(RenderLabels({"z", "a"}, {"1", "x\"y"}), "z=\"1\",a=\"x\\\"y\"");
  EXPECT_EQ(RenderLabels({}, {}), "");
}

TEST(AppendSampleTest, OmitsBracesWithoutLabels) {
  std::string out;
  AppendSample("m", "", 1.5, &out);
  AppendSample("m", "a=\"b\"", 2, &out);
  EXPECT_EQ(out, "m 1.5\nm{a=\"b\"} 2\n");
}

TEST(ValidateTest, MetricNames) {
  EXPECT_TRUE(ValidateMetricName("moeserve_x_total").ok());
  EXPECT_TRUE(ValidateMetricName("ns:rule_1").ok());
  EXPECT_TRUE(ValidateMetricName("_x").ok());
  EXPECT_FALSE(ValidateMetricName("").ok());
  EXPECT_FALSE(ValidateMetricName("1abc").ok());
  EXPECT_FALSE(ValidateMetricName("a-b").ok());
  EXPECT_FALSE(ValidateMetricName("a b").ok());
  EXPECT_FALSE(ValidateMetricName("__reserved").ok());
}

TEST(ValidateTest, LabelNames) {
  EXPECT_TRUE(ValidateLabelNames({"policy", "_x", "a1"}).ok());
  EXPECT_TRUE(ValidateLabelNames({}).ok());
  EXPECT_FALSE(ValidateLabelNames({"a:b"}).ok());
  EXPECT_FALSE(ValidateLabelNames({"1a"}).ok());
  EXPECT_FALSE(ValidateLabelNames({""}).ok());
  EXPECT_FALSE(ValidateLabelNames({"__name__"}).ok());
  EXPECT_FALSE(ValidateLabelNames({"a", "a"}).ok());
}

}  // namespace
}  // namespace moeserve::metrics::internal
