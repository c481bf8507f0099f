// KvCache: the paged key/value cache of every layer, and the allocator of its
// blocks (vLLM's layout, see kernels/backend.h PagedKvCache).
//
// Owns one K and one V pool per layer, each F32[num_blocks, block_size,
// kv_heads, head_dim] in the memory of the backend given to Create (device
// memory on CUDA; host memory without a backend), and a free list of block ids
// shared by all layers: block b of a sequence holds positions [b*block_size,
// (b+1)*block_size) in every layer. A sequence owns a BlockTable (its block
// ids, in position order) and must Release() it when it finishes.
//
// Thread-safe: Grow/Release/free_blocks may be called from any thread. The
// pools themselves are written only by forward passes, which the scheduler
// serialises.
#ifndef MOESERVE_ENGINE_KV_CACHE_H_
#define MOESERVE_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "engine/model_config.h"
#include "kernels/backend.h"

namespace moeserve::engine {

using BlockTable = std::vector<int32_t>;

class KvCache {
 public:
  // REQUIRES: num_blocks > 0, block_size > 0. With a backend the pools are
  // allocated (and zeroed) by it, on its device; ResourceExhausted when they
  // do not fit.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(
      const ModelConfig& config, int64_t num_blocks, int block_size,
      kernels::Backend* backend = nullptr);

  // Number of blocks that fit in `bytes` for `config` (at least 1).
  static int64_t BlocksForBytes(const ModelConfig& config, int block_size,
                                uint64_t bytes);

  // Extends `table` so that it covers positions [0, num_tokens). Either
  // allocates every block needed or none: RESOURCE_EXHAUSTED when too few
  // blocks are free.
  absl::Status Grow(BlockTable* table, int64_t num_tokens)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Returns every block of `table` to the free list and clears it.
  void Release(BlockTable* table) ABSL_LOCKS_EXCLUDED(mu_);

  // Shrinks `table` to cover positions [0, num_tokens) only, returning the
  // trailing blocks no longer needed (the rollback of rejected speculative
  // positions). Keys and values left in a kept block past `num_tokens` are
  // stale; attention never reads past a sequence's length, and the next
  // forward overwrites them. REQUIRES: num_tokens >= 0.
  void Truncate(BlockTable* table, int64_t num_tokens) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t free_blocks() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  uint64_t bytes() const { return pool_floats_ * sizeof(float); }

  // REQUIRES: 0 <= layer < num_layers.
  kernels::PagedKvCache layer(int layer);

 private:
  KvCache(const ModelConfig& config, int64_t num_blocks, int block_size,
          kernels::Device device);

  const int64_t num_blocks_;
  const int block_size_;
  const int64_t kv_heads_;
  const int64_t head_dim_;
  const int64_t pool_floats_;
  const kernels::Device device_;
  // [layer][k|v][num_blocks, block_size, kv_heads, head_dim], one allocation:
  // device_pool_ when a backend allocated it, else host_pool_.
  std::unique_ptr<kernels::Buffer> device_pool_;
  std::vector<float> host_pool_;
  float* pool_ = nullptr;

  mutable base::Mutex mu_;
  std::vector<int32_t> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_KV_CACHE_H_
