#include "engine/offload/slow_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {
namespace {

constexpr size_t kDirectAlign = 4096;  // Covers 512 B and 4 KiB sectors.

size_t AlignDown(size_t v) { return v / kDirectAlign * kDirectAlign; }
size_t AlignUp(size_t v) { return AlignDown(v + kDirectAlign - 1); }

class HostSlowTier final : public SlowTier {
 public:
  explicit HostSlowTier(const ModelWeights* weights) : weights_(weights) {}
  std::string_view name() const override { return "host"; }
  absl::Status Read(ExpertId id, std::byte* dst) override {
    const ExpertBlob& blob = weights_->expert(id);
    std::memcpy(dst, blob.data, blob.bytes);
    return absl::OkStatus();
  }
  // Blobs are laid out back to back in layer-major order
  // (engine/model_weights.h).
  std::span<const std::byte> HostArena() const override {
    const ExpertBlob& first = weights_->expert({0, 0});
    return {first.data, static_cast<size_t>(weights_->num_layers()) *
                            weights_->num_experts() * first.bytes};
  }
  const std::byte* HostBlob(ExpertId id) const override {
    return weights_->expert(id).data;
  }

 private:
  const ModelWeights* const weights_;
};

struct ShardFds {
  int buffered = -1;
  int direct = -1;  // -1 when O_DIRECT is off or refused at open.
};

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, FreeDeleter>;

class DiskSlowTier final : public SlowTier {
 public:
  DiskSlowTier(const ModelWeights* weights, std::vector<ShardFds> fds,
               bool direct)
      : weights_(weights), fds_(std::move(fds)), direct_(direct) {}
  ~DiskSlowTier() override {
    for (const ShardFds& f : fds_) {
      if (f.buffered >= 0) close(f.buffered);
      if (f.direct >= 0) close(f.direct);
    }
  }
  std::string_view name() const override { return "disk"; }
  absl::Status Read(ExpertId id, std::byte* dst) override;

 private:
  absl::Status ReadMatrix(const ExpertSource& src, std::byte* dst);
  // 1 = done, 0 = O_DIRECT refused (EINVAL), error otherwise.
  absl::StatusOr<bool> ReadDirect(const ExpertSource& src, std::byte* dst);
  absl::Status ReadBuffered(const ExpertSource& src, std::byte* dst);
  void DisableDirect(const std::string& why);

  const ModelWeights* const weights_;
  const std::vector<ShardFds> fds_;
  std::atomic<bool> direct_;
};

absl::Status DataLoss(const std::string& path, const ExpertSource& src,
                      const std::string& why) {
  return absl::DataLossError(absl::StrCat("reading expert bytes [",
                                          src.file_offset, ", +", src.bytes,
                                          ") of ", path, ": ", why));
}

// Reads exactly [off, off + len) unless EOF comes first; returns bytes read
// or -errno.
ssize_t PreadFull(int fd, std::byte* dst, size_t len, uint64_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t r = pread(fd, dst + done, len - done, off + done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

absl::Status DiskSlowTier::Read(ExpertId id, std::byte* dst) {
  const ExpertBlob& b = weights_->expert(id);
  std::memset(dst, 0, b.bytes);  // Padding between matrices reads as zero.
  if (absl::Status s = ReadMatrix(b.gate_source, dst + b.gate_offset);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadMatrix(b.up_source, dst + b.up_offset); !s.ok()) {
    return s;
  }
  return ReadMatrix(b.down_source, dst + b.down_offset);
}

absl::Status DiskSlowTier::ReadMatrix(const ExpertSource& src, std::byte* dst) {
  if (direct_.load(std::memory_order_relaxed) && fds_[src.shard].direct >= 0) {
    absl::StatusOr<bool> done = ReadDirect(src, dst);
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
  }
  return ReadBuffered(src, dst);
}

absl::StatusOr<bool> DiskSlowTier::ReadDirect(const ExpertSource& src,
                                              std::byte* dst) {
  const uint64_t begin = AlignDown(src.file_offset);
  const size_t len = AlignUp(src.file_offset + src.bytes) - begin;
  AlignedBuffer bounce(
      static_cast<std::byte*>(std::aligned_alloc(kDirectAlign, len)));
  if (bounce == nullptr) {
    return absl::ResourceExhaustedError("no memory for O_DIRECT bounce");
  }
  ssize_t r = PreadFull(fds_[src.shard].direct, bounce.get(), len, begin);
  const std::string& path = weights_->shard_path(src.shard);
  if (r == -EINVAL) {
    DisableDirect(absl::StrCat("pread of ", path, " failed with EINVAL"));
    return false;
  }
  if (r < 0) return DataLoss(path, src, std::strerror(static_cast<int>(-r)));
  // O_DIRECT may stop short at EOF; only the wanted part must be there.
  const size_t skip = src.file_offset - begin;
  if (static_cast<size_t>(r) < skip + src.bytes) {
    return DataLoss(path, src, "short read");
  }
  std::memcpy(dst, bounce.get() + skip, src.bytes);
  return true;
}

absl::Status DiskSlowTier::ReadBuffered(const ExpertSource& src,
                                        std::byte* dst) {
  ssize_t r =
      PreadFull(fds_[src.shard].buffered, dst, src.bytes, src.file_offset);
  const std::string& path = weights_->shard_path(src.shard);
  if (r < 0) return DataLoss(path, src, std::strerror(static_cast<int>(-r)));
  if (static_cast<size_t>(r) < src.bytes) {
    return DataLoss(path, src, "short read");
  }
  return absl::OkStatus();
}

void DiskSlowTier::DisableDirect(const std::string& why) {
  if (direct_.exchange(false)) {
    spdlog::info("disk slow tier: O_DIRECT refused ({}); using buffered pread",
                 why);
  }
}

absl::Status OpenError(const std::string& path) {
  const std::string msg =
      absl::StrCat("disk slow tier: open ", path, ": ", std::strerror(errno));
  if (errno == ENOENT) return absl::NotFoundError(msg);
  if (errno == EACCES) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SlowTier>> NewHostSlowTier(
    const ModelWeights* weights) {
  if (weights->num_layers() > 0 && weights->num_experts() > 0 &&
      weights->expert({0, 0}).data == nullptr) {
    return absl::FailedPreconditionError(
        "host slow tier needs packed experts (LoadOptions.pack_experts)");
  }
  return std::make_unique<HostSlowTier>(weights);
}

absl::StatusOr<std::unique_ptr<SlowTier>> NewDiskSlowTier(
    const ModelWeights* weights, const DiskSlowTierOptions& options) {
  std::vector<ShardFds> fds(weights->files().num_shards());
  bool direct = options.direct_io;
  for (int i = 0; i < static_cast<int>(fds.size()); ++i) {
    const std::string& path = weights->shard_path(i);
    fds[i].buffered = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fds[i].buffered < 0) {
      absl::Status s = OpenError(path);
      for (const ShardFds& f : fds) {
        if (f.buffered >= 0) close(f.buffered);
        if (f.direct >= 0) close(f.direct);
      }
      return s;
    }
    if (!direct) continue;
    fds[i].direct = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fds[i].direct < 0) {
      // One log line; the whole tier goes buffered.
      spdlog::info(
          "disk slow tier: O_DIRECT refused for {} ({}); using buffered pread",
          path, std::strerror(errno));
      direct = false;
      for (ShardFds& f : fds) {
        if (f.direct >= 0) close(f.direct);
        f.direct = -1;
      }
    }
  }
  return std::make_unique<DiskSlowTier>(weights, std::move(fds), direct);
}

}  // namespace moeserve::engine
