#include "engine/kv_cache.h"

#include <set>

#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.num_hidden_layers = 2;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  return c;
}

TEST(KvCache, GrowsByWholeBlocksAndReleases) {
  auto cache = KvCache::Create(SmallConfig(), 4, 16);
  ASSERT_TRUE(cache.ok()) << cache.status();
  BlockTable a, b;
  ASSERT_TRUE((*cache)->Grow(&a, 17).ok());
  EXPECT_EQ(a.size(), 2u);
  ASSERT_TRUE((*cache)->Grow(&a, 32).ok());  // still fits
  EXPECT_EQ(a.size(), 2u);
  ASSERT_TRUE((*cache)->Grow(&b, 32).ok());
  EXPECT_EQ((*cache)->free_blocks(), 0);
  std::set<int32_t> ids(a.begin(), a.end());
  ids.insert(b.begin(), b.end());
  EXPECT_EQ(ids.size(), 4u);  // no block handed out twice
  (*cache)->Release(&a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ((*cache)->free_blocks(), 2);
}

TEST(KvCache, TruncateFreesTrailingBlocksOnly) {
  auto cache = KvCache::Create(SmallConfig(), 6, 4);
  ASSERT_TRUE(cache.ok()) << cache.status();
  BlockTable a;
  ASSERT_TRUE((*cache)->Grow(&a, 17).ok());  // 5 blocks
  const BlockTable before = a;
  (*cache)->Truncate(&a, 9);  // positions 0..8: 3 blocks
  EXPECT_EQ(a, BlockTable(before.begin(), before.begin() + 3));
  EXPECT_EQ((*cache)->free_blocks(), 3);
  (*cache)->Truncate(&a, 12);  // still 3 blocks: nothing to free
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ((*cache)->free_blocks(), 3);
  // The freed blocks are handed out again, the last freed first.
  BlockTable b;
  ASSERT_TRUE((*cache)->Grow(&b, 4).ok());
  EXPECT_EQ(b.front(), before[3]);
  (*cache)->Truncate(&a, 0);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ((*cache)->free_blocks(), 5);
  (*cache)->Release(&b);
  EXPECT_EQ((*cache)->free_blocks(), 6);
}

TEST(KvCache, ExhaustionAllocatesNothing) {
  auto cache = KvCache::Create(SmallConfig(), 3, 8);
  ASSERT_TRUE(cache.ok());
  BlockTable a;
  ASSERT_TRUE((*cache)->Grow(&a, 8).ok());
  absl::Status st = (*cache)->Grow(&a, 8 * 4);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ((*cache)->free_blocks(), 2);
}

TEST(KvCache, LayersAreDisjointViews) {
  auto cache = KvCache::Create(SmallConfig(), 3, 8);
  ASSERT_TRUE(cache.ok());
  kernels::PagedKvCache l0 = (*cache)->layer(0), l1 = (*cache)->layer(1);
  EXPECT_EQ(l0.k_pool.dim(0), 3);
  EXPECT_EQ(l0.k_pool.dim(1), 8);
  EXPECT_EQ(l0.k_pool.dim(2), 2);
  EXPECT_EQ(l0.k_pool.dim(3), 4);
  const float* k0 = l0.k_pool.data<float>();
  EXPECT_EQ(l0.v_pool.data<float>(), k0 + 3 * 8 * 2 * 4);
  EXPECT_EQ(l1.k_pool.data<float>(), k0 + 2 * 3 * 8 * 2 * 4);
  EXPECT_EQ((*cache)->bytes(), 2u * 2 * 3 * 8 * 2 * 4 * sizeof(float));
}

TEST(KvCache, RefusesBadSizes) {
  EXPECT_FALSE(KvCache::Create(SmallConfig(), 0, 16).ok());
  EXPECT_FALSE(KvCache::Create(SmallConfig(), 4, 0).ok());
}

}  // namespace
}  // namespace moeserve::engine
