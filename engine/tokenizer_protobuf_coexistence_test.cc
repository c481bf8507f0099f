// Regression test: the tokenizer works in a process that also uses the system
// protobuf runtime (as the gRPC server does). Linked normally, Debian's
// libsentencepiece (which bundles protobuf 3.14) crashed such a process in
// static initialisation; the plugin loaded with deep binding keeps them apart.
#include <google/protobuf/descriptor.pb.h>

#include <string>

#include "engine/tokenizer.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

TEST(TokenizerWithProtobuf, BothRuntimesWork) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer runtimes refuse RTLD_DEEPBIND, the flag that keeps the two
  // protobuf runtimes apart; sanitized builds cannot host both at once.
  GTEST_SKIP() << "RTLD_DEEPBIND is unavailable under ASan/TSan";
#endif
  google::protobuf::FileDescriptorProto proto;
  proto.set_name("moeserve.proto");
  std::string wire;
  ASSERT_TRUE(proto.SerializeToString(&wire));

  const std::string path = std::string(getenv("TEST_SRCDIR")) +
                           "/moeserve/engine/testdata/test_tokenizer.model";
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode("héllo 世界", true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  absl::StatusOr<std::string> text =
      (*tok)->Decode(std::vector<int32_t>(ids->begin() + 1, ids->end()));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "héllo 世界");

  google::protobuf::FileDescriptorProto back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.name(), "moeserve.proto");
}

}  // namespace
}  // namespace moeserve::engine
