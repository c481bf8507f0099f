#include "tests/matrix/pairwise.h"

#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace moeserve::testing {
namespace {

// Every pair of values of any two axes appears in some row, every row sets
// every axis to a valid value.
void ExpectCoversEveryPair(const std::vector<int>& sizes,
                           const std::vector<std::vector<int>>& rows) {
  std::set<std::tuple<int, int, int, int>> seen;
  for (const std::vector<int>& row : rows) {
    ASSERT_EQ(row.size(), sizes.size());
    for (size_t a = 0; a < row.size(); ++a) {
      ASSERT_GE(row[a], 0);
      ASSERT_LT(row[a], sizes[a]);
      for (size_t b = a + 1; b < row.size(); ++b) {
        seen.insert({a, row[a], b, row[b]});
      }
    }
  }
  for (size_t a = 0; a < sizes.size(); ++a) {
    for (size_t b = a + 1; b < sizes.size(); ++b) {
      for (int va = 0; va < sizes[a]; ++va) {
        for (int vb = 0; vb < sizes[b]; ++vb) {
          EXPECT_TRUE(seen.contains({a, va, b, vb}))
              << "axis " << a << "=" << va << " with axis " << b << "=" << vb;
        }
      }
    }
  }
}

TEST(PairwiseRowsTest, CoversEveryPairWithFarFewerRowsThanTheProduct) {
  // The spec invariance matrix's shape: model, drafter, policy, budget, k.
  const std::vector<int> sizes = {2, 6, 9, 3, 3};
  const auto rows = PairwiseRows(sizes, /*full=*/{1, 2});
  ExpectCoversEveryPair(sizes, rows);
  // Every drafter x policy at least once: 54 rows, and few more.
  std::set<std::pair<int, int>> full;
  for (const auto& row : rows) full.insert({row[1], row[2]});
  EXPECT_EQ(full.size(), 54u);
  EXPECT_LT(rows.size(), 70u);  // against 972 in full
}

TEST(PairwiseRowsTest, WithoutFullAxesStillCoversEveryPair) {
  const std::vector<int> sizes = {4, 9, 3, 2, 2};
  const auto rows = PairwiseRows(sizes);
  ExpectCoversEveryPair(sizes, rows);
  EXPECT_GE(rows.size(), 36u);  // 4 x 9 pairs need 36 rows at least
  EXPECT_LT(rows.size(), 50u);
}

TEST(PairwiseRowsTest, IsDeterministic) {
  EXPECT_EQ(PairwiseRows({3, 4, 2}, {0}), PairwiseRows({3, 4, 2}, {0}));
}

TEST(PairwiseRowsTest, OneAxisIsEveryValueAndABadSizeIsNoRow) {
  EXPECT_EQ(PairwiseRows({3}, {0}),
            (std::vector<std::vector<int>>{{0}, {1}, {2}}));
  EXPECT_TRUE(PairwiseRows({3, 0}).empty());
}

}  // namespace
}  // namespace moeserve::testing
