// The drafter registry: every drafter of :all_drafters registered, and the
// fast-memory trait the builder and moeserve_engine_info read instead of a
// drafter's name.
#include "engine/spec_decode/drafter_registry.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/spec_decode/quantized_experts.h"
#include "engine/testing/golden.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine::spec_decode {
namespace {

using ::testing::IsSupersetOf;

using ::moeserve::engine::testing::Runfile;

TEST(DrafterRegistryTest, EveryDrafterRegisteredAndSorted) {
  const std::vector<std::string> names = RegisteredDrafters();
  EXPECT_THAT(names, IsSupersetOf({"external", "int4", "self"}));
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string& name : names) {
    EXPECT_NE(FindDrafter(name), nullptr) << name;
    EXPECT_NE(FindDrafterTraits(name), nullptr) << name;
  }
  EXPECT_EQ(FindDrafter("none"), nullptr);  // "none" is no drafter
  EXPECT_EQ(FindDrafterTraits("none"), nullptr);
}

TEST(DrafterRegistryTest, FastMemoryIsTheInt4PoolOnly) {
  absl::StatusOr<ModelConfig> config =
      LoadModelConfig(Runfile("tests/golden/mixtral_tiny"));
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<uint64_t> pool = QuantizedExperts::BytesFor(*config);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_GT(*pool, 0u);
  EXPECT_TRUE(DrafterUsesFastMemory("int4"));
  EXPECT_EQ(*DrafterFastMemoryBytes("int4", *config), *pool);
  for (const char* name : {"self", "external", "none", "no_such_drafter"}) {
    EXPECT_FALSE(DrafterUsesFastMemory(name)) << name;
    absl::StatusOr<uint64_t> bytes = DrafterFastMemoryBytes(name, *config);
    ASSERT_TRUE(bytes.ok()) << name << ": " << bytes.status();
    EXPECT_EQ(*bytes, 0u) << name;
  }
}

TEST(DrafterRegistryDeathTest, DuplicateNameAborts) {
  EXPECT_DEATH(internal::RegisterDrafter("int4", nullptr),
               "moeserve: drafter 'int4' registered twice");
}

}  // namespace
}  // namespace moeserve::engine::spec_decode
