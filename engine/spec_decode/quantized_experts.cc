#include "engine/spec_decode/quantized_experts.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/spec_decode/expert_matrices.h"

namespace moeserve::engine::spec_decode {

absl::StatusOr<uint64_t> QuantizedExperts::BytesFor(const ModelConfig& c) {
  MOESERVE_ASSIGN_OR_RETURN(
      kernels::Int4ExpertLayout layout,
      kernels::MakeInt4ExpertLayout(c.hidden_size, c.expert_intermediate_size));
  return static_cast<uint64_t>(layout.bytes) * c.num_hidden_layers *
         c.num_experts;
}

absl::StatusOr<std::unique_ptr<QuantizedExperts>> QuantizedExperts::Create(
    const ModelWeights& weights, kernels::Backend* backend) {
  const ModelConfig& c = weights.config();
  MOESERVE_ASSIGN_OR_RETURN(
      kernels::Int4ExpertLayout layout,
      kernels::MakeInt4ExpertLayout(c.hidden_size, c.expert_intermediate_size));
  const int64_t per_expert = layout.bytes;
  const int64_t total = per_expert * c.num_hidden_layers * c.num_experts;
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> arena,
                            backend->Allocate(total));
  const bool on_host = backend->device() == kernels::Device::kCpu;
  MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Stream> stream,
                            backend->CreateStream());
  // One expert at a time: its bf16 matrices side by side (the packed
  // layout QuantizeExpertInt4 reads), quantized, then placed.
  const size_t matrix_bytes =
      static_cast<size_t>(c.hidden_size) * c.expert_intermediate_size * 2;
  std::vector<std::byte> packed(3 * matrix_bytes);
  std::vector<std::byte> staged(on_host ? 0 : per_expert);
  std::byte* base = static_cast<std::byte*>(arena->data());
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (int e = 0; e < c.num_experts; ++e) {
      MOESERVE_ASSIGN_OR_RETURN(
          ExpertMatrices m, LocateExpertMatrices(weights, l, e, matrix_bytes));
      for (int i = 0; i < 3; ++i) {
        std::memcpy(packed.data() + i * matrix_bytes, m.m[i], matrix_bytes);
      }
      std::byte* dst =
          base + (static_cast<int64_t>(l) * c.num_experts + e) * per_expert;
      std::byte* out = on_host ? dst : staged.data();
      kernels::QuantizeExpertInt4(
          reinterpret_cast<const kernels::bf16*>(packed.data()), layout, out);
      if (!on_host) {
        MOESERVE_RETURN_IF_ERROR(
            backend->CopyToDevice(*stream, dst, out, per_expert));
        // The staging buffer is reused for the next expert.
        MOESERVE_RETURN_IF_ERROR(stream->Synchronize());
      }
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
