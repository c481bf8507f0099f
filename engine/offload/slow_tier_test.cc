#include "engine/offload/slow_tier.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/offload/test_util.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

using testing::FixtureDir;
using testing::LoadFixture;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};

std::unique_ptr<std::byte, FreeDeleter> Buffer(size_t bytes) {
  return std::unique_ptr<std::byte, FreeDeleter>(
      static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
}

void ExpectEveryExpertMatches(SlowTier* tier, const ModelWeights& packed) {
  const size_t bytes = packed.expert({0, 0}).bytes;
  auto buf = Buffer(bytes);
  for (int l = 0; l < packed.num_layers(); ++l) {
    for (int e = 0; e < packed.num_experts(); ++e) {
      std::memset(buf.get(), 0xAB, bytes);
      ASSERT_TRUE(tier->Read({l, e}, buf.get()).ok()) << l << "," << e;
      EXPECT_EQ(std::memcmp(buf.get(), packed.expert({l, e}).data, bytes), 0)
          << tier->name() << " expert (" << l << ", " << e << ")";
    }
  }
}

TEST(SlowTierTest, HostTierCopiesPackedBlobs) {
  auto packed = LoadFixture(true);
  auto host = NewHostSlowTier(packed.get());
  ASSERT_TRUE(host.ok()) << host.status();
  ExpectEveryExpertMatches(host->get(), *packed);
}

TEST(SlowTierTest, HostTierRefusesUnpackedWeights) {
  auto unpacked = LoadFixture(false);
  auto host = NewHostSlowTier(unpacked.get());
  EXPECT_EQ(host.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SlowTierTest, DiskTierBytesEqualHostTierBytes) {
  auto packed = LoadFixture(true);
  auto unpacked = LoadFixture(false);
  for (bool direct : {true, false}) {
    auto disk = NewDiskSlowTier(unpacked.get(), {.direct_io = direct});
    ASSERT_TRUE(disk.ok()) << disk.status();
    ExpectEveryExpertMatches(disk->get(), *packed);
  }
}

TEST(SlowTierTest, DiskTierShortReadIsDataLossNamingTheFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / "truncated";
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(FixtureDir())) {
    fs::copy_file(f.path(), dir / f.path().filename(),
                  fs::copy_options::overwrite_existing);
  }
  auto w = ModelWeights::Load(dir.string(), {.pack_experts = false});
  ASSERT_TRUE(w.ok()) << w.status();
  // Cut the file 10 bytes before the end of the expert that ends last.
  auto end_of = [](const ExpertBlob& b) {
    return std::max({b.gate_source.file_offset + b.gate_source.bytes,
                     b.up_source.file_offset + b.up_source.bytes,
                     b.down_source.file_offset + b.down_source.bytes});
  };
  ExpertId victim;
  uint64_t end = 0;
  for (int l = 0; l < (*w)->num_layers(); ++l) {
    for (int e = 0; e < (*w)->num_experts(); ++e) {
      if (end_of((*w)->expert({l, e})) > end) {
        end = end_of((*w)->expert({l, e}));
        victim = {l, e};
      }
    }
  }
  const ExpertBlob* last = &(*w)->expert(victim);
  const std::string path = (*w)->shard_path(0);
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(end - 10)), 0);
  for (bool direct : {true, false}) {
    auto disk = NewDiskSlowTier(w->get(), {.direct_io = direct});
    ASSERT_TRUE(disk.ok()) << disk.status();
    auto buf = Buffer(last->bytes);
    absl::Status s = (*disk)->Read(victim, buf.get());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace moeserve::engine
