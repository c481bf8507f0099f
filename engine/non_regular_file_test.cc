// Issue 29: a FIFO given as a model file blocked the loader until SIGTERM
// (opening a FIFO for reading waits for a writer). Every model file the
// loader opens (config.json, generation_config.json, model.safetensors,
// tokenizer.model, tokenizer.json) that is not a regular file is refused at
// once, naming the path. A watchdog opens each FIFO for writing after 30 s,
// so a loader that blocks fails this test instead of hanging it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/safetensors.h"
#include "engine/testing/model_writer.h"
#include "engine/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moeserve::engine {
namespace {

using ::testing::HasSubstr;

// Makes `path` a FIFO; while alive, a thread unblocks a reader stuck on it
// after 30 s (and the test then fails on the message).
class Fifo {
 public:
  explicit Fifo(std::string path) : path_(std::move(path)) {
    unlink(path_.c_str());
    EXPECT_EQ(mkfifo(path_.c_str(), 0600), 0) << path_;
    watchdog_ = std::thread([this] {
      for (int i = 0; i < 300 && !done_.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (done_.load()) return;
      // A writer that opens and closes: a blocked reader gets EOF.
      const int fd = open(path_.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) close(fd);
    });
  }
  ~Fifo() {
    done_.store(true);
    watchdog_.join();
  }

 private:
  const std::string path_;
  std::atomic<bool> done_{false};
  std::thread watchdog_;
};

void ExpectRefused(const absl::Status& status, const std::string& path) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(path + ": not a regular file (a FIFO)"));
}

TEST(NonRegularFileTest, FifoConfigJsonIsRefusedAtOnce) {
  const std::string dir = testing::MakeTempDir();
  Fifo fifo(dir + "/config.json");
  ExpectRefused(LoadModelConfig(dir).status(), dir + "/config.json");
  ExpectRefused(ModelWeights::Load(dir).status(), dir + "/config.json");
}

TEST(NonRegularFileTest, FifoGenerationConfigIsRefusedAtOnce) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteTinyModel(dir, testing::TinyMixtralConfig()).ok());
  Fifo fifo(dir + "/generation_config.json");
  ExpectRefused(LoadModelConfig(dir).status(), dir + "/generation_config.json");
}

TEST(NonRegularFileTest, FifoSafetensorsIsRefusedAtOnce) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(testing::WriteTinyModel(dir, testing::TinyMixtralConfig()).ok());
  Fifo fifo(dir + "/model.safetensors");
  ExpectRefused(SafetensorsFile::Open(dir + "/model.safetensors").status(),
                dir + "/model.safetensors");
  ExpectRefused(ModelWeights::Load(dir).status(), dir + "/model.safetensors");
}

TEST(NonRegularFileTest, FifoTokenizerFilesAreRefusedAtOnce) {
  const std::string dir = testing::MakeTempDir();
  {
    Fifo fifo(dir + "/tokenizer.model");
    ExpectRefused(Tokenizer::LoadFromModelDir(dir).status(),
                  dir + "/tokenizer.model");
  }
  unlink((dir + "/tokenizer.model").c_str());
  Fifo fifo(dir + "/tokenizer.json");
  ExpectRefused(Tokenizer::LoadFromModelDir(dir).status(),
                dir + "/tokenizer.json");
}

TEST(NonRegularFileTest, DirectoryIsNamedAsSuch) {
  const std::string dir = testing::MakeTempDir();
  ASSERT_EQ(mkdir((dir + "/config.json").c_str(), 0700), 0);
  const absl::Status status = LoadModelConfig(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("config.json: not a regular file (a directory)"));
}

}  // namespace
}  // namespace moeserve::engine
