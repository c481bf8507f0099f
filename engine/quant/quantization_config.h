// QuantizationConfig: what a checkpoint's config.json says about how its
// weights are quantized (the `quantization_config` object the Hugging Face
// tools write), parsed and checked once, so the loader and the importers
// (engine/quant/*_import.h) work from one typed description.
//
// Accepted (anything else is refused with InvalidArgument naming the key):
//   - absent / null: bf16 (or f16) weights, QuantMethod::kNone.
//   - "quant_method": "fp8" with "fmt": "e4m3" and "weight_block_size":
//     [128, 128] (Qwen3-FP8, DeepSeek-V3 releases): F8_E4M3 `weight` and an
//     F32 `weight_scale_inv` per block; dequantized w = q * scale_inv.
//     "activation_scheme" may be "dynamic" (moeserve keeps activations in
//     fp32; it computes weight-only).
//   - "quant_method": "compressed-tensors" (llm-compressor), "format"
//     "float-quantized" / "naive-quantized" with 8-bit float weights
//     (strategy "channel" or "tensor"), or "pack-quantized" with 4-bit int
//     weights (strategy "group", a group_size); symmetric or with zero
//     points. One config group must cover the Linear layers.
//   - "quant_method": "gptq", "bits": 4, "group_size" (> 0, or -1 for one
//     group per row), "sym", "desc_act" (true is refused: act-order
//     checkpoints permute the groups), "checkpoint_format" "gptq" (zeros
//     stored minus one) or "gptq_v2".
//   - "quant_method": "awq", "bits": 4, "group_size", "zero_point",
//     "version": "gemm" (the GEMM packing; "gemv" and others refused).
// `modules_to_not_convert` / `ignore` name modules left in bf16.
//
// Thread-safety: plain values.
#ifndef MOESERVE_ENGINE_QUANT_QUANTIZATION_CONFIG_H_
#define MOESERVE_ENGINE_QUANT_QUANTIZATION_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace moeserve::engine::quant {

enum class QuantMethod {
  kNone,
  kFp8Block,        // quant_method "fp8" (weight_block_size)
  kFp8Compressed,   // compressed-tensors, 8-bit float weights
  kInt4Compressed,  // compressed-tensors pack-quantized, 4-bit int weights
  kGptq,
  kAwq,
};

// How far one scale reaches in a weight [rows, cols] (out, in).
enum class ScaleGranularity {
  kTensor,   // one scale
  kChannel,  // one per output row
  kBlock,    // one per block_rows x block_cols tile (fp8 block)
  kGroup,    // one per output row and group_size input columns (int4)
};

struct QuantizationConfig {
  QuantMethod method = QuantMethod::kNone;
  ScaleGranularity granularity = ScaleGranularity::kTensor;
  int bits = 16;
  // kBlock: the tile; kGroup: group_size input columns (block_cols).
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  bool symmetric = true;  // false: zero points stored
  // GPTQ: checkpoint_format "gptq" stores zero points minus one.
  bool gptq_zeros_minus_one = true;
  // Module name patterns left unquantized (exact names, name prefixes, or
  // "re:<regex>" as compressed-tensors writes them).
  std::vector<std::string> unquantized_modules;

  bool quantized() const { return method != QuantMethod::kNone; }
  // The experts are 4-bit integers (gptq, awq, compressed-tensors int4).
  bool int4() const {
    return method == QuantMethod::kGptq || method == QuantMethod::kAwq ||
           method == QuantMethod::kInt4Compressed;
  }
  // The experts are fp8 e4m3 (the fp8 method, compressed-tensors fp8).
  bool fp8() const {
    return method == QuantMethod::kFp8Block ||
           method == QuantMethod::kFp8Compressed;
  }
  // "fp8 block 128x128", "gptq int4 group 128 asym", ...
  std::string Describe() const;
  // Whether the Linear `module` (e.g. "model.layers.0.mlp.gate") is listed
  // as left unquantized.
  bool IsUnquantized(absl::string_view module) const;
};

// `config_json` is the whole config.json object; reads its
// "quantization_config" (absent or null: kNone).
absl::StatusOr<QuantizationConfig> ParseQuantizationConfig(
    const nlohmann::json& config_json);

}  // namespace moeserve::engine::quant

#endif  // MOESERVE_ENGINE_QUANT_QUANTIZATION_CONFIG_H_
