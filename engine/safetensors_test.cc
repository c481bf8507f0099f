#include "engine/safetensors.h"

#include <cstring>

#include "engine/testing/model_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

using ::testing::HasSubstr;
using testing::RawSafetensors;
using testing::SerializeSafetensors;
using testing::TestTensor;

absl::Status ParseStatus(const std::string& bytes) {
  return SafetensorsFile::FromBuffer(bytes, "t.safetensors").status();
}

void ExpectRefused(const std::string& bytes, absl::StatusCode code,
                   const std::string& substr) {
  absl::Status s = ParseStatus(bytes);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(s.message(), HasSubstr(substr));
  EXPECT_THAT(s.message(), HasSubstr("t.safetensors"));
}

TEST(SafetensorsTest, ParsesValidFile) {
  std::vector<TestTensor> ts = {
      {"a", "BF16", {2, 3}, std::string(12, 'a')},
      {"b", "F32", {4}, std::string(16, 'b')},
      {"empty", "I64", {0, 5}, ""},
  };
  auto f = SafetensorsFile::FromBuffer(SerializeSafetensors(ts));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->TensorNames(), (std::vector<std::string>{"a", "b", "empty"}));
  const TensorInfo* b = (*f)->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kF32);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(b->byte_size, 16u);
  EXPECT_EQ(std::memcmp(b->data, std::string(16, 'b').data(), 16), 0);
  const TensorInfo* a = (*f)->Find("a");
  EXPECT_EQ(b->file_offset, a->file_offset + 12);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->Find("missing"), nullptr);
}

TEST(SafetensorsTest, FileOffsetIsAbsolute) {
  std::string header =
      R"({"x":{"dtype":"U8","shape":[3],"data_offsets":[1,4]}})";
  std::string bytes = RawSafetensors(header, "zABC");
  auto f = SafetensorsFile::FromBuffer(bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  const TensorInfo* x = (*f)->Find("x");
  EXPECT_EQ(x->file_offset, 8 + header.size() + 1);
  EXPECT_EQ(bytes.substr(x->file_offset, 3), "ABC");
}

TEST(SafetensorsTest, RefusesTruncatedFile) {
  ExpectRefused("abc", absl::StatusCode::kDataLoss, "truncated");
}

TEST(SafetensorsTest, RefusesHeaderLengthBeyondFile) {
  std::string bytes = RawSafetensors("{}", "");
  bytes[0] = 100;
  ExpectRefused(bytes, absl::StatusCode::kDataLoss, "beyond file size");
}

TEST(SafetensorsTest, RefusesHugeHeaderLength) {
  std::string bytes = RawSafetensors("{}", "");
  bytes[7] = 1;
  ExpectRefused(bytes, absl::StatusCode::kInvalidArgument, "exceeds the limit");
}

TEST(SafetensorsTest, RefusesNonJsonHeader) {
  ExpectRefused(RawSafetensors("{not json", ""),
                absl::StatusCode::kInvalidArgument, "not valid JSON");
  ExpectRefused(RawSafetensors("[1]", ""), absl::StatusCode::kInvalidArgument,
                "not a JSON object");
}

TEST(SafetensorsTest, RefusesDeepNesting) {
  ExpectRefused(RawSafetensors(std::string(100000, '['), ""),
                absl::StatusCode::kInvalidArgument, "nested deeper");
}

TEST(SafetensorsTest, RefusesOffsetsOutOfRange) {
  ExpectRefused(
      RawSafetensors(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                     "1234"),
      absl::StatusCode::kDataLoss,
      "tensor \"w\": data_offsets end 8 out of range");
  ExpectRefused(
      RawSafetensors(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[3,2]}})",
                     "1234"),
      absl::StatusCode::kInvalidArgument, "begin 3 > end 2");
}

TEST(SafetensorsTest, RefusesOverlappingTensors) {
  ExpectRefused(
      RawSafetensors(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},
          "b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                     "123456"),
      absl::StatusCode::kInvalidArgument, "overlaps tensor \"a\"");
}

TEST(SafetensorsTest, RefusesUnknownDtype) {
  ExpectRefused(
      RawSafetensors(
          R"({"w":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]}})", "1"),
      absl::StatusCode::kInvalidArgument, "tensor \"w\": unsupported dtype");
}

TEST(SafetensorsTest, RefusesShapeByteSizeMismatch) {
  ExpectRefused(
      RawSafetensors(
          R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", "1234"),
      absl::StatusCode::kInvalidArgument, "shape/byte size mismatch");
}

TEST(SafetensorsTest, RefusesOverflowingShape) {
  ExpectRefused(
      RawSafetensors(
          R"({"w":{"dtype":"F64","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})",
          "1234"),
      absl::StatusCode::kInvalidArgument, "overflows");
}

TEST(SafetensorsTest, RefusesBadShapeEntries) {
  ExpectRefused(
      RawSafetensors(
          R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""),
      absl::StatusCode::kInvalidArgument, "\"shape\" entries");
  ExpectRefused(
      RawSafetensors(
          R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})", ""),
      absl::StatusCode::kInvalidArgument, "\"shape\" entries");
}

TEST(SafetensorsTest, RefusesBadMetadata) {
  ExpectRefused(RawSafetensors(R"({"__metadata__":{"k":1}})", ""),
                absl::StatusCode::kInvalidArgument, "__metadata__");
}

TEST(SafetensorsTest, OpenReadsFileAndReportsMissing) {
  const std::string dir = testing::MakeTempDir();
  std::vector<TestTensor> ts = {{"a", "U8", {3}, "xyz"}};
  ASSERT_TRUE(
      testing::WriteFile(dir + "/m.safetensors", SerializeSafetensors(ts))
          .ok());
  auto f = SafetensorsFile::Open(dir + "/m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_GE((*f)->fd(), 0);
  EXPECT_EQ(std::string(static_cast<const char*>((*f)->Find("a")->data), 3),
            "xyz");
  auto missing = SafetensorsFile::Open(dir + "/nope.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(testing::WriteFile(dir + "/empty.safetensors", "").ok());
  EXPECT_EQ(SafetensorsFile::Open(dir + "/empty.safetensors").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ShardedSafetensorsTest, FindsTensorsAcrossShards) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteFile(dir + "/s1.safetensors",
                                 SerializeSafetensors({{"a", "U8", {1}, "1"}}))
                  .ok());
  ASSERT_TRUE(testing::WriteFile(dir + "/s2.safetensors",
                                 SerializeSafetensors({{"b", "U8", {1}, "2"}}))
                  .ok());
  ASSERT_TRUE(
      testing::WriteFile(
          dir + "/model.safetensors.index.json",
          R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})")
          .ok());
  auto s = ShardedSafetensors::Open(dir);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->num_shards(), 2);
  auto b = (*s)->Find("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*s)->shard(b->shard).path(), dir + "/s2.safetensors");
  EXPECT_FALSE((*s)->Find("c").has_value());
}

TEST(ShardedSafetensorsTest, RefusesDuplicateAcrossShards) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(*SafetensorsFile::FromBuffer(
      SerializeSafetensors({{"a", "U8", {1}, "1"}}), "s1"));
  files.push_back(*SafetensorsFile::FromBuffer(
      SerializeSafetensors({{"a", "U8", {1}, "2"}}), "s2"));
  absl::Status s = ShardedSafetensors::FromFiles(std::move(files)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("\"a\" appears in two shards"));
}

TEST(ShardedSafetensorsTest, RefusesIndexPathTraversal) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteFile(dir + "/model.safetensors.index.json",
                                 R"({"weight_map":{"a":"../x.safetensors"}})")
                  .ok());
  absl::Status s = ShardedSafetensors::Open(dir).status();
  EXPECT_THAT(s.message(), HasSubstr("must be a file name"));
}

TEST(ShardedSafetensorsTest, MissingModelFileIsNotFound) {
  EXPECT_EQ(ShardedSafetensors::Open(testing::MakeTempDir()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace moeserve::engine
