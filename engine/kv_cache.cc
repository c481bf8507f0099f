#include "engine/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moeserve::engine {
namespace {

int64_t FloatsPerBlockPerLayer(const ModelConfig& c, int block_size) {
  return 2 * static_cast<int64_t>(block_size) * c.num_key_value_heads *
         c.head_dim;
}

}  // namespace

int64_t KvCache::BlocksForBytes(const ModelConfig& config, int block_size,
                                uint64_t bytes) {
  const int64_t per_block = FloatsPerBlockPerLayer(config, block_size) *
                            config.num_hidden_layers * sizeof(float);
  return std::max<int64_t>(1, static_cast<int64_t>(bytes) / per_block);
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(
    const ModelConfig& config, int64_t num_blocks, int block_size) {
  if (num_blocks <= 0 || num_blocks > INT32_MAX || block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache: need num_blocks in [1, 2^31) and block_size > "
                     "0, got ",
                     num_blocks, " and ", block_size));
  }
  return std::unique_ptr<KvCache>(new KvCache(config, num_blocks, block_size));
}

KvCache::KvCache(const ModelConfig& config, int64_t num_blocks, int block_size)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      kv_heads_(config.num_key_value_heads),
      head_dim_(config.head_dim),
      num_layers_(static_cast<int>(config.num_hidden_layers)),
      pool_(static_cast<size_t>(FloatsPerBlockPerLayer(config, block_size) *
                                num_blocks * config.num_hidden_layers)) {
  free_.resize(num_blocks);
  // Hand out low ids first (pop from the back).
  for (int64_t i = 0; i < num_blocks; ++i) {
    free_[i] = static_cast<int32_t>(num_blocks - 1 - i);
  }
}

absl::Status KvCache::Grow(BlockTable* table, int64_t num_tokens) {
  const int64_t needed = (num_tokens + block_size_ - 1) / block_size_ -
                         static_cast<int64_t>(table->size());
  if (needed <= 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (needed > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: ", needed, " more blocks needed, ",
                     free_.size(), " free of ", num_blocks_));
  }
  for (int64_t i = 0; i < needed; ++i) {
    table->push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

void KvCache::Release(BlockTable* table) {
  absl::MutexLock lock(&mu_);
  free_.insert(free_.end(), table->rbegin(), table->rend());
  table->clear();
}

int64_t KvCache::free_blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(free_.size());
}

kernels::PagedKvCache KvCache::layer(int layer) {
  const int64_t half = num_blocks_ * block_size_ * kv_heads_ * head_dim_;
  float* base = pool_.data() + 2 * half * layer;
  return kernels::PagedKvCache{
      kernels::Tensor(base, kernels::DType::kF32,
                      {num_blocks_, block_size_, kv_heads_, head_dim_}),
      kernels::Tensor(base + half, kernels::DType::kF32,
                      {num_blocks_, block_size_, kv_heads_, head_dim_})};
}

}  // namespace moeserve::engine
