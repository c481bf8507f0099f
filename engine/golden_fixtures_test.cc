// Loads the random-weight Hugging Face fixtures in tests/golden/ (written by
// tools/demo_model/make_fixtures.py): config, every weight, expert packing and
// the tokenizer, for each architecture. A fixture directory that is absent
// from the runfiles is skipped, so the test can be wired before they land.

#include <sys/stat.h>

#include <cstring>

#include "engine/architecture.h"
#include "engine/model_weights.h"
#include "engine/tokenizer.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

class GoldenFixtureTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string Dir() const { return std::string("tests/golden/") + GetParam(); }
  bool Present() const {
    struct stat st;
    return stat((Dir() + "/config.json").c_str(), &st) == 0;
  }
};

TEST_P(GoldenFixtureTest, LoadsWeightsAndPacksExperts) {
  // The fixtures are committed (tests/golden): a missing one is a defect.
  ASSERT_TRUE(Present()) << Dir() << "/config.json is missing";
  auto w = ModelWeights::Load(Dir());
  ASSERT_TRUE(w.ok()) << w.status();
  const ModelWeights& m = **w;
  EXPECT_EQ(m.config().model_type,
            GetParam() == std::string("mixtral_tiny") ? "mixtral" : GetParam());
  EXPECT_TRUE(m.unexpected_tensors().empty()) << m.unexpected_tensors().front();
  for (int layer = 0; layer < m.num_layers(); ++layer) {
    for (int e = 0; e < m.num_experts(); ++e) {
      const ExpertBlob& b = m.expert({layer, e});
      ExpertTensorNames n = m.config().architecture->ExpertNames(layer, e);
      const TensorInfo* down = m.files().Find(n.down)->info;
      EXPECT_EQ(std::memcmp(b.data + b.down_offset, down->data, b.down_bytes),
                0);
      EXPECT_EQ(b.down_source.file_offset, down->file_offset);
    }
  }
}

TEST_P(GoldenFixtureTest, TokenizerRoundTrips) {
  ASSERT_TRUE(Present()) << Dir() << "/config.json is missing";
  auto tok = Tokenizer::LoadFromModelDir(Dir());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "Once upon a time, héllo → 世界 ✓";
  auto ids = (*tok)->Encode(text, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*(*tok)->Decode(*ids), text);
  IncrementalDetokenizer detok(tok->get());
  std::string joined;
  for (int32_t id : *ids) joined += *detok.Next(id);
  joined += *detok.Flush();
  EXPECT_EQ(joined, text);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenFixtureTest,
                         ::testing::Values("mixtral_tiny", "qwen2_moe",
                                           "qwen3_moe", "olmoe"));

}  // namespace
}  // namespace moeserve::engine
