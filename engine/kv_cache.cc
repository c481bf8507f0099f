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
    const ModelConfig& config, int64_t num_blocks, int block_size,
    kernels::Backend* backend) {
  if (num_blocks <= 0 || num_blocks > INT32_MAX || block_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache: need num_blocks in [1, 2^31) and block_size > "
                     "0, got ",
                     num_blocks, " and ", block_size));
  }
  const kernels::Device device =
      backend != nullptr ? backend->device() : kernels::Device::kCpu;
  auto cache = std::unique_ptr<KvCache>(
      new KvCache(config, num_blocks, block_size, device));
  const int64_t bytes = cache->pool_floats_ * sizeof(float);
  if (backend == nullptr) {
    cache->host_pool_.resize(cache->pool_floats_);
    cache->pool_ = cache->host_pool_.data();
    return cache;
  }
  absl::StatusOr<std::unique_ptr<kernels::Buffer>> pool =
      backend->Allocate(bytes);
  if (!pool.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache of ", bytes, " bytes (", num_blocks,
                     " blocks): ", pool.status().message()));
  }
  cache->device_pool_ = *std::move(pool);
  cache->pool_ = static_cast<float*>(cache->device_pool_->data());
  // Zeroed like the host pool, so a kernel bug that reads an unwritten row
  // reads zeros on every backend rather than garbage on some.
  absl::StatusOr<std::unique_ptr<kernels::Stream>> stream =
      backend->CreateStream();
  if (!stream.ok()) return stream.status();
  absl::Status zero = backend->Zero(**stream, cache->pool_, bytes);
  if (zero.ok()) zero = (*stream)->Synchronize();
  if (!zero.ok()) return zero;
  return cache;
}

KvCache::KvCache(const ModelConfig& config, int64_t num_blocks, int block_size,
                 kernels::Device device)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      kv_heads_(config.num_key_value_heads),
      head_dim_(config.head_dim),
      pool_floats_(FloatsPerBlockPerLayer(config, block_size) * num_blocks *
                   config.num_hidden_layers),
      device_(device) {
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
  base::MutexLock lock(&mu_);
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
  base::MutexLock lock(&mu_);
  free_.insert(free_.end(), table->rbegin(), table->rend());
  table->clear();
}

void KvCache::Truncate(BlockTable* table, int64_t num_tokens) {
  const size_t keep = static_cast<size_t>(
      std::max<int64_t>(0, (num_tokens + block_size_ - 1) / block_size_));
  if (keep >= table->size()) return;
  base::MutexLock lock(&mu_);
  // Reverse order, as Release: the most recently taken block is reused first.
  free_.insert(free_.end(), table->rbegin(), table->rend() - keep);
  table->resize(keep);
}

int64_t KvCache::free_blocks() const {
  base::MutexLock lock(&mu_);
  return static_cast<int64_t>(free_.size());
}

kernels::PagedKvCache KvCache::layer(int layer) {
  const int64_t half = num_blocks_ * block_size_ * kv_heads_ * head_dim_;
  float* base = pool_ + 2 * half * layer;
  return kernels::PagedKvCache{
      kernels::Tensor(base, kernels::DType::kF32,
                      {num_blocks_, block_size_, kv_heads_, head_dim_},
                      device_),
      kernels::Tensor(base + half, kernels::DType::kF32,
                      {num_blocks_, block_size_, kv_heads_, head_dim_},
                      device_)};
}

}  // namespace moeserve::engine
