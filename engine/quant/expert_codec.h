// ExpertCodec: how a checkpoint's experts become moeserve's packed expert
// blobs (the unit the slow tier holds, the link moves and the kernels read),
// and how its non-expert weights become bf16 tensors.
//
// Expert formats (ExpertFormat):
//   kBf16  gate, up, down as bf16 [ffn, hidden], [ffn, hidden], [hidden,
//          ffn] (engine/model_weights.h); from BF16 tensors as they are,
//          from F16 tensors rounded to bf16 (tensor_convert.h).
//   kInt4  kernels/int4_expert.h, from GPTQ, AWQ or compressed-tensors
//          pack-quantized tensors (int4_import.h), values and scales as the
//          checkpoint holds them (no requantization).
//   kFp8   kernels/fp8_expert.h, from fp8 block or compressed-tensors fp8
//          tensors (fp8_import.h), as the checkpoint holds them.
// Non-expert Linear layers of a quantized checkpoint are dequantized to
// bf16 at load (MatMul reads bf16), each value rounded to the nearest bf16.
//
// Thread-safety: immutable after Create; Pack and LoadAsBf16 may run on
// many threads at once.
#ifndef MOESERVE_ENGINE_QUANT_EXPERT_CODEC_H_
#define MOESERVE_ENGINE_QUANT_EXPERT_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/architecture.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"

namespace moeserve::engine::quant {

enum class ExpertFormat { kBf16, kInt4, kFp8 };

// "bf16", "int4", "fp8".
const char* ExpertFormatName(ExpertFormat f);

class ExpertCodec {
 public:
  // Where one matrix (or quantized part: values, scales, zero points)
  // starts in a blob, and the bytes it spans.
  struct Part {
    size_t offset = 0;
    size_t bytes = 0;
  };

  // The codec of `config`'s experts as `files` store them: the
  // quantization_config decides the format; an unquantized checkpoint's
  // first expert tensor decides BF16 or F16. InvalidArgument naming the
  // tensor when it is missing or of another dtype.
  static absl::StatusOr<ExpertCodec> Create(const ModelConfig& config,
                                            const ShardedSafetensors& files);
  // The bf16 codec of `config`'s experts, whatever stores them (also the
  // layout of weights built in memory, ModelWeights::FromMemory).
  static ExpertCodec Bf16(const ModelConfig& config);

  ExpertFormat format() const { return format_; }
  // Bytes of one packed expert: a multiple of 64.
  size_t blob_bytes() const { return blob_bytes_; }
  // gate, up, down.
  const Part& part(int i) const { return parts_[i]; }
  // kInt4: the blobs' layout; null otherwise.
  const kernels::Int4ExpertLayout* int4_layout() const {
    return int4_ ? &*int4_ : nullptr;
  }
  // kFp8: the blobs' layout; null otherwise.
  const kernels::Fp8ExpertLayout* fp8_layout() const {
    return fp8_ ? &*fp8_ : nullptr;
  }
  // True when a blob is the three BF16 tensors of the files byte for byte
  // (bf16 checkpoints): a disk slow tier can then pread them.
  bool blob_is_file_bytes() const { return blob_is_file_bytes_; }
  // "bf16", "bf16 (from F16)", "int4 (gptq int4, group 32, ...)", ...
  std::string Describe() const;

  // Writes expert `names` into dst (blob_bytes(), padding zeroed). Errors
  // name the tensor and the reason (missing, dtype, shape, format).
  absl::Status Pack(const ShardedSafetensors& files,
                    const ExpertTensorNames& names, std::byte* dst) const;

 private:
  ExpertCodec() = default;

  const ModelConfig* config_ = nullptr;
  ExpertFormat format_ = ExpertFormat::kBf16;
  bool from_f16_ = false;
  bool blob_is_file_bytes_ = false;
  size_t blob_bytes_ = 0;
  Part parts_[3];
  std::optional<kernels::Int4ExpertLayout> int4_;
  std::optional<kernels::Fp8ExpertLayout> fp8_;
};

// A non-expert weight `spec` as bf16 into `out` (resized): BF16 and F16
// tensors, and, in a quantized checkpoint, a Linear stored quantized
// (`<module>.weight` fp8 with its scales, or `<module>.qweight` /
// `<module>.weight_packed` int4) dequantized. InvalidArgument naming the
// tensor when missing, of the wrong shape or dtype.
absl::Status LoadAsBf16(const ShardedSafetensors& files,
                        const ModelConfig& config, const TensorSpec& spec,
                        std::vector<uint16_t>* out);

}  // namespace moeserve::engine::quant

#endif  // MOESERVE_ENGINE_QUANT_EXPERT_CODEC_H_
