// Issue 16: client-visible messages carried absolute server paths and
// library source locations.
#include "server/client_message.h"

#include "gtest/gtest.h"

namespace moeserve::server {
namespace {

TEST(ForClient, AbsolutePathsBecomeTheirLastComponent) {
  EXPECT_EQ(ForClient("no model is loaded: NOT_FOUND: "
                      "/srv/moeserve/models/broken/config.json: cannot open"),
            "no model is loaded: NOT_FOUND: config.json: cannot open");
  EXPECT_EQ(ForClient("tensor in /a/b/model-00001.safetensors: \"x\" bad"),
            "tensor in model-00001.safetensors: \"x\" bad");
  EXPECT_EQ(ForClient("--model_dir=/home/op/m/ (\"/home/op/m/x.json\")"),
            "--model_dir=m (\"x.json\")");
  // Relative paths, ratios, field paths and plain words stay.
  EXPECT_EQ(ForClient("models/demo/config.json: 1/2 of sampling.top_p"),
            "models/demo/config.json: 1/2 of sampling.top_p");
  EXPECT_EQ(ForClient("a / b"), "a / b");
  EXPECT_EQ(ForClient(""), "");
}

TEST(ForClient, SourceLocationsAreDropped) {
  EXPECT_EQ(ForClient("INTERNAL: src/sentencepiece_processor.cc(1102) "
                      "[model_] Model is not initialized."),
            "INTERNAL: [model_] Model is not initialized.");
  EXPECT_EQ(ForClient("/build/grpc/src/core/lib/surface/call.cc:123: failed"),
            "failed");
  EXPECT_EQ(ForClient("at util.h:7 and normalizer.cpp(9)"), "at and ");
  // Not source locations: other extensions, no line number.
  EXPECT_EQ(ForClient("config.json: line 3"), "config.json: line 3");
  EXPECT_EQ(ForClient("see engine.cc for details"),
            "see engine.cc for details");
}

TEST(PublicModelName, IsTheDirectorysLastComponent) {
  EXPECT_EQ(PublicModelName("/srv/models/demo"), "demo");
  EXPECT_EQ(PublicModelName("models/demo/"), "demo");
  EXPECT_EQ(PublicModelName("demo"), "demo");
  EXPECT_EQ(PublicModelName("/"), "");
  EXPECT_EQ(PublicModelName(""), "");
}

}  // namespace
}  // namespace moeserve::server
