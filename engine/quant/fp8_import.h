// FP8 checkpoints as users download them: one e4m3 Linear [out, in] of a
// "fp8" (Qwen3 / DeepSeek block-scaled) or compressed-tensors fp8
// checkpoint into one part (gate, up or down) of a kernels/fp8_expert.h
// blob, codes as stored and scales as fp32 (bf16 / f16 scales widen
// exactly); or dequantized to bf16 (a non-expert Linear).
//
// Tensors of a Linear `<module>`:
//   fp8 method:         <module>.weight F8_E4M3 [out, in],
//                       <module>.weight_scale_inv F32 (or BF16 / F16)
//                       [ceil(out / br), ceil(in / bc)] (br x bc =
//                       weight_block_size); w = q * scale_inv.
//   compressed-tensors: <module>.weight F8_E4M3 [out, in],
//                       <module>.weight_scale F32 / BF16 / F16: [out, 1] or
//                       [out] per channel, [], [1] or [1, 1] per tensor,
//                       the block grid for strategy block; w = q * scale.
// Scales must be finite and below 2^120 in magnitude (the CPU kernels'
// exactness bound, kernels/cpu/matmul_fp8.h). Every mismatch is
// InvalidArgument naming the tensor and what was expected vs found.
//
// Thread-safety: pure functions (tensors are only read).
#ifndef MOESERVE_ENGINE_QUANT_FP8_IMPORT_H_
#define MOESERVE_ENGINE_QUANT_FP8_IMPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/quant/quantization_config.h"
#include "engine/safetensors.h"
#include "kernels/fp8_expert.h"

namespace moeserve::engine::quant {

// The checkpoint tensors of one fp8 Linear (borrowed).
struct Fp8LinearTensors {
  std::string module;
  const TensorInfo* weight = nullptr;
  const TensorInfo* scale = nullptr;
};

// `module`'s tensors under config.method's names, looked up with `find`
// (full name -> tensor or null). InvalidArgument naming the missing tensor,
// or the method when it is not an fp8 one.
absl::StatusOr<Fp8LinearTensors> FindFp8LinearTensors(
    const QuantizationConfig& config, absl::string_view module,
    const std::function<const TensorInfo*(const std::string&)>& find);

// The fp8 expert layout of a checkpoint's experts: config's block, one
// scale per output channel, or one per tensor.
absl::StatusOr<kernels::Fp8ExpertLayout> Fp8CheckpointLayout(
    const QuantizationConfig& config, int64_t hidden, int64_t ffn);

// Writes part `part` of the fp8 expert at `expert` (host memory,
// layout.bytes; other parts untouched) from `tensors`.
absl::Status ImportFp8ExpertPart(const QuantizationConfig& config,
                                 const Fp8LinearTensors& tensors,
                                 const kernels::Fp8ExpertLayout& layout,
                                 kernels::Fp8Part part, std::byte* expert);

// The Linear [out_features, in_features] dequantized (q * scale in fp32,
// then rounded to the nearest bf16, ties to even) into `out`.
absl::Status DequantizeFp8Linear(const QuantizationConfig& config,
                                 const Fp8LinearTensors& tensors,
                                 int64_t out_features, int64_t in_features,
                                 uint16_t* out);

}  // namespace moeserve::engine::quant

#endif  // MOESERVE_ENGINE_QUANT_FP8_IMPORT_H_
