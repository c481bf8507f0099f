#ifndef MOESERVE_ENGINE_SAFETENSORS_H_
#define MOESERVE_ENGINE_SAFETENSORS_H_

// Read-only access to safetensors files (https://github.com/huggingface/
// safetensors): an 8-byte little-endian header length N, N bytes of JSON
// header, then the data region.
//
// SafetensorsFile owns one file mapped read-only (or an in-memory copy of a
// buffer, for tests and fuzzing) and the validated tensor table. Tensor data
// pointers stay valid for the object's lifetime.
//
// Invariants after a successful Open/FromBuffer:
//   1. 8 + N <= file size and N <= kMaxHeaderBytes.
//   2. Every tensor has a known dtype, non-negative dims, and
//      begin <= end <= data region size with end - begin == numel * dsize.
//   3. Non-empty tensor regions do not overlap.
// Every refusal is an absl::Status (DataLoss for sizes that do not fit the
// file, InvalidArgument otherwise) naming the file, the tensor and the reason;
// no exception escapes.
//
// Thread-safety: immutable after construction; all const methods may be
// called concurrently.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/dtype.h"

namespace moeserve::engine {

// One tensor of a safetensors file.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // Points into the owning file's mapping.
  uint64_t byte_size = 0;
  uint64_t file_offset = 0;  // Absolute offset of the data in the file.
};

class SafetensorsFile {
 public:
  // Largest header accepted (the reference implementation's limit).
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  // Opens and mmaps `path` read-only, then validates it.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path);

  // Validates a copy of `bytes`; `name` stands for the path in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBuffer(
      absl::string_view bytes, std::string name = "<buffer>");
  // As FromBuffer, but takes the `size` bytes at `bytes` instead of copying
  // them (a large image built in memory, ModelWeights::FromMemory: a
  // new char[] needs no zeroing pass before it is filled).
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromOwnedBuffer(
      std::unique_ptr<char[]> bytes, uint64_t size,
      std::string name = "<buffer>");

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Open file descriptor for pread (-1 for FromBuffer objects).
  int fd() const { return fd_; }
  uint64_t file_size() const { return size_; }

  // Tensor names, sorted.
  std::vector<std::string> TensorNames() const;
  size_t num_tensors() const { return tensors_.size(); }
  // nullptr when the file has no tensor `name`.
  const TensorInfo* Find(absl::string_view name) const;
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }

 private:
  SafetensorsFile(std::string path) : path_(std::move(path)) {}
  absl::Status Parse();

  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;        // munmap'd in the destructor when set.
  std::unique_ptr<char[]> owned_;  // Backing bytes for FromBuffer.
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All safetensors shards of a Hugging Face model directory: either a single
// `model.safetensors` or every file named in `model.safetensors.index.json`'s
// weight_map. A tensor name present in two shards is an error, as is an
// index entry pointing to a shard that lacks the tensor.
//
// Owns the shard files. Thread-safety: immutable after Open.
class ShardedSafetensors {
 public:
  struct Located {
    const TensorInfo* info;
    int shard;  // Index into shard(i).
  };

  static absl::StatusOr<std::unique_ptr<ShardedSafetensors>> Open(
      const std::string& model_dir);

  // Builds from already-opened files (tests).
  static absl::StatusOr<std::unique_ptr<ShardedSafetensors>> FromFiles(
      std::vector<std::unique_ptr<SafetensorsFile>> files);

  std::optional<Located> Find(absl::string_view name) const;
  int num_shards() const { return static_cast<int>(files_.size()); }
  const SafetensorsFile& shard(int i) const { return *files_[i]; }
  // Every tensor name across shards, sorted.
  std::vector<std::string> TensorNames() const;

 private:
  ShardedSafetensors() = default;
  absl::Status Index();

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located, std::less<>> by_name_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_SAFETENSORS_H_
