#include "engine/spec_decode/quantized_experts.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/quant/int4_import.h"
#include "engine/spec_decode/expert_matrices.h"

namespace moeserve::engine::spec_decode {

absl::StatusOr<uint64_t> QuantizedExperts::BytesFor(const ModelConfig& c) {
  // An int4 checkpoint's pool is its own experts, in its layout (the scale
  // type, bf16 or f16, does not change the size).
  MOESERVE_ASSIGN_OR_RETURN(
      kernels::Int4ExpertLayout layout,
      c.quantization.int4()
          ? quant::Int4CheckpointLayout(c.quantization, c.hidden_size,
                                        c.expert_intermediate_size,
                                        kernels::Int4ScaleType::kF16)
          : kernels::MakeInt4ExpertLayout(c.hidden_size,
                                          c.expert_intermediate_size));
  return static_cast<uint64_t>(layout.bytes) * c.num_hidden_layers *
         c.num_experts;
}

namespace {

// Quantizes experts [first, first + count) (linear index layer * E + expert)
// into `out` (count blobs of layout.bytes, in order) on `threads` threads,
// each taking every threads-th expert with its own staging buffer. Each
// expert's int4 blob depends on that expert alone, so the result is the
// same for any thread count.
absl::Status QuantizeRange(const ModelWeights& weights,
                           const kernels::Int4ExpertLayout& layout,
                           int64_t first, int64_t count, int threads,
                           std::byte* out) {
  const ModelConfig& c = weights.config();
  const size_t matrix_bytes =
      static_cast<size_t>(c.hidden_size) * c.expert_intermediate_size * 2;
  const int workers =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, count)));
  std::vector<absl::Status> errors(workers);
  auto work = [&](int w) {
    // The expert's bf16 matrices side by side: the packed layout
    // QuantizeExpertInt4 reads.
    std::vector<std::byte> packed(3 * matrix_bytes);
    std::vector<uint16_t> dequantized;
    for (int64_t i = w; i < count; i += workers) {
      const int64_t index = first + i;
      if (weights.int4_layout() != nullptr) {
        // An int4 checkpoint: its own expert is the draft's, as it is.
        const ExpertBlob& blob =
            weights.expert({static_cast<int>(index / c.num_experts),
                            static_cast<int>(index % c.num_experts)});
        std::memcpy(out + i * layout.bytes, blob.data, layout.bytes);
        continue;
      }
      absl::StatusOr<ExpertMatrices> m = LocateExpertMatrices(
          weights, static_cast<int>(index / c.num_experts),
          static_cast<int>(index % c.num_experts), matrix_bytes, &dequantized);
      if (!m.ok()) {
        errors[w] = m.status();
        return;
      }
      for (int k = 0; k < 3; ++k) {
        std::memcpy(packed.data() + k * matrix_bytes, m->m[k], matrix_bytes);
      }
      kernels::QuantizeExpertInt4(
          reinterpret_cast<const kernels::bf16*>(packed.data()), layout,
          out + i * layout.bytes);
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(work, w);
  work(0);
  for (std::thread& t : pool) t.join();
  for (absl::Status& st : errors) MOESERVE_RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<QuantizedExperts>> QuantizedExperts::Create(
    const ModelWeights& weights, kernels::Backend* backend, int threads) {
  const ModelConfig& c = weights.config();
  // An int4 checkpoint drafts with its own experts in their own layout.
  MOESERVE_ASSIGN_OR_RETURN(
      kernels::Int4ExpertLayout layout,
      weights.int4_layout() != nullptr
          ? absl::StatusOr<kernels::Int4ExpertLayout>(*weights.int4_layout())
          : kernels::MakeInt4ExpertLayout(c.hidden_size,
                                          c.expert_intermediate_size));
  const int64_t per_expert = layout.bytes;
  const int64_t experts =
      static_cast<int64_t>(c.num_hidden_layers) * c.num_experts;
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> arena,
                            backend->Allocate(per_expert * experts));
  if (threads <= 0) {
    threads = static_cast<int>(
        std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 32));
  }
  std::byte* base = static_cast<std::byte*>(arena->data());
  if (backend->device() == kernels::Device::kCpu) {
    MOESERVE_RETURN_IF_ERROR(
        QuantizeRange(weights, layout, 0, experts, threads, base));
  } else {
    // A batch of consecutive experts at a time through host staging (their
    // blobs are consecutive in the arena too: one copy per batch).
    MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                              backend->CreateStream());
    const int64_t batch = 4 * static_cast<int64_t>(threads);
    std::vector<std::byte> staged(static_cast<size_t>(batch * per_expert));
    for (int64_t first = 0; first < experts; first += batch) {
      const int64_t count = std::min(batch, experts - first);
      MOESERVE_RETURN_IF_ERROR(
          QuantizeRange(weights, layout, first, count, threads, staged.data()));
      MOESERVE_RETURN_IF_ERROR(
          backend->CopyToDevice(*stream, base + first * per_expert,
                                staged.data(), count * per_expert));
      // The staging buffer is reused for the next batch.
      MOESERVE_RETURN_IF_ERROR(stream->Synchronize());
    }
  }
  return std::unique_ptr<QuantizedExperts>(
      new QuantizedExperts(c, layout, std::move(arena), backend->device()));
}

QuantizedExperts::QuantizedExperts(const ModelConfig& config,
                                   kernels::Int4ExpertLayout layout,
                                   std::unique_ptr<kernels::Buffer> arena,
                                   kernels::Device device)
    : num_layers_(config.num_hidden_layers),
      num_experts_(config.num_experts),
      layout_(layout),
      arena_(std::move(arena)),
      device_(device) {}

absl::StatusOr<const std::byte*> QuantizedExperts::Acquire(ExpertId id) {
  if (id.layer < 0 || id.layer >= num_layers_ || id.expert < 0 ||
      id.expert >= num_experts_) {
    return absl::OutOfRangeError(absl::StrCat("int4 expert (", id.layer, ", ",
                                              id.expert, ") out of range"));
  }
  return static_cast<const std::byte*>(arena_->data()) +
         (static_cast<int64_t>(id.layer) * num_experts_ + id.expert) *
             layout_.bytes;
}

}  // namespace moeserve::engine::spec_decode
