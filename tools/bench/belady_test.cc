#include "tools/bench/belady.h"

#include <vector>

#include "gtest/gtest.h"

namespace moeserve::bench {
namespace {

using engine::ExpertId;

constexpr ExpertId A{0, 0}, B{0, 1}, C{1, 0}, D{1, 1};

// A B C A B D A with 2 slots, by hand (next use in brackets):
//   A miss {A}; B miss {A,B}; C miss, evict B (A[3] < B[4]) {A,C};
//   A hit; B miss, evict C (never again) {A,B}; D miss, evict B (never)
//   {A,D}; A hit. 2 hits of 7.
TEST(BeladyTest, HandComputedColdStart) {
  const std::vector<ExpertId> trace = {A, B, C, A, B, D, A};
  const OracleHits h = BeladyHits(trace, 2, /*warm_start=*/false);
  EXPECT_EQ(h.accesses, 7u);
  EXPECT_EQ(h.hits, 2u);
  EXPECT_DOUBLE_EQ(h.hit_rate(), 2.0 / 7);
}

// Same trace starting with {A, B} resident: A hit, B hit, then as above from
// C on (C miss evicts B; A hit; B miss evicts C; D miss evicts B; A hit).
TEST(BeladyTest, HandComputedWarmStart) {
  const std::vector<ExpertId> trace = {A, B, C, A, B, D, A};
  EXPECT_EQ(BeladyHits(trace, 2, /*warm_start=*/true).hits, 4u);
}

// The loop that defeats LRU (0 hits with 2 slots): A B C A B C A B C.
//   A m, B m, C m evict B (A[3] < B[4]) {A,C}; A hit {A[6],C[5]};
//   B m evict A {B[7],C[5]}; C hit {B[7],C[8]}; A m evict C {A,B};
//   B hit; C m. 3 hits of 9.
TEST(BeladyTest, LoopThatDefeatsLru) {
  const std::vector<ExpertId> trace = {A, B, C, A, B, C, A, B, C};
  EXPECT_EQ(BeladyHits(trace, 2, false).hits, 3u);
}

// Experts are (layer, expert) pairs: the same expert index in two layers is
// two experts.
TEST(BeladyTest, LayerIsPartOfTheKey) {
  const std::vector<ExpertId> trace = {A, C, A, C};  // (0,0), (1,0)
  EXPECT_EQ(BeladyHits(trace, 1, false).hits, 0u);
  EXPECT_EQ(BeladyHits(trace, 2, false).hits, 2u);
}

TEST(BeladyTest, EnoughSlotsMissOnlyFirstUses) {
  const std::vector<ExpertId> trace = {A, B, C, D, A, B, C, D, D};
  EXPECT_EQ(BeladyHits(trace, 4, false).hits, 5u);
  EXPECT_EQ(BeladyHits(trace, 4, true).hits, 9u);
  EXPECT_EQ(BeladyHits(trace, 8, false).hits, 5u);
}

TEST(BeladyTest, EmptyTrace) {
  const OracleHits h = BeladyHits({}, 3, true);
  EXPECT_EQ(h.accesses, 0u);
  EXPECT_EQ(h.hit_rate(), 0);
}

}  // namespace
}  // namespace moeserve::bench
