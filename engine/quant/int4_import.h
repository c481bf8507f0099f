// int4 checkpoints as users download them: one quantized Linear [out, in]
// of a GPTQ, AWQ or compressed-tensors checkpoint into one part (gate, up or
// down) of a kernels/int4_expert.h blob, values, scales and zero points as
// the checkpoint holds them (no requantization, no rounding of a scale); or
// dequantized to bf16 (a non-expert Linear, which MatMul reads in bf16).
//
// Formats (u: a 4-bit code, z: a zero point, s: a scale; the weight is
// (u - z) * s):
//   GPTQ (AutoGPTQ / GPTQModel, quant_method "gptq"):
//     qweight I32 [ceil(in/8), out]: 8 codes of consecutive input rows per
//       int32, low nibble first (row 8r + t in bits 4t..4t+3 of word r).
//     qzeros  I32 [n_groups, ceil(out/8)]: 8 zeros of consecutive output
//       columns per int32, low nibble first; checkpoint_format "gptq" stores
//       z - 1 (so a stored 15 is z = 16), "gptq_v2" stores z.
//     scales  F16 [n_groups, out].
//     g_idx   I32 [in] (optional): must be i / group (act-order checkpoints,
//       desc_act, permute the groups and are refused naming g_idx).
//     Symmetric checkpoints store z = 8 everywhere (v1: 7).
//   AWQ (AutoAWQ "gemm" version, quant_method "awq"):
//     qweight I32 [in, ceil(out/8)]: 8 codes of output columns 8c..8c+7 per
//       int32 in the interleaved order [0, 2, 4, 6, 1, 3, 5, 7] (nibble p
//       holds column 8c + order[p]).
//     qzeros  I32 [n_groups, ceil(out/8)], the same order.
//     scales  F16 [n_groups, out].
//   compressed-tensors pack-quantized (llm-compressor W4A16):
//     weight_packed I32 [out, ceil(in/8)]: 8 codes of consecutive input
//       columns per int32, low nibble first, each the signed value + 8.
//     weight_scale  BF16 / F16 / F32 [out, n_groups].
//     weight_zero_point I32 [ceil(out/8), n_groups] (asymmetric only): the
//       signed zero + 8, packed along out, low nibble first (an unpacked I8
//       [out, n_groups] of zeros is also accepted for symmetric ones).
//     weight_shape  I64 / I32 [2] = [out, in] (optional).
//     weight_g_idx  I32 [in] (optional), as GPTQ's g_idx.
// Groups: n_groups = ceil(in / group_size); group_size <= 0 (GPTQ's -1) or
// >= in is one group per row (e.g. in = 96 under group_size 128: g_idx =
// i // 128 is 0 for every column). A group_size below in that does not
// divide it is refused (the groups would not be uniform).
//
// Every mismatch (method, bits, dtype, shape, group, g_idx, a zero point
// a symmetric layout cannot hold, a scale the layout's type cannot hold
// exactly) is InvalidArgument naming the tensor and what was expected vs
// what it holds.
//
// Thread-safety: pure functions; concurrent calls on distinct outputs are
// fine (the tensors are only read).
#ifndef MOESERVE_ENGINE_QUANT_INT4_IMPORT_H_
#define MOESERVE_ENGINE_QUANT_INT4_IMPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/quant/quantization_config.h"
#include "engine/safetensors.h"
#include "kernels/int4_expert.h"

namespace moeserve::engine::quant {

// The checkpoint tensors of one int4 Linear (borrowed; null: absent).
struct Int4LinearTensors {
  std::string module;  // e.g. "model.layers.0.mlp.experts.3.up_proj"
  const TensorInfo* weight = nullptr;  // qweight / weight_packed
  const TensorInfo* scales = nullptr;  // scales / weight_scale
  const TensorInfo* zeros = nullptr;   // qzeros / weight_zero_point
  const TensorInfo* g_idx = nullptr;   // g_idx / weight_g_idx
  const TensorInfo* shape = nullptr;   // weight_shape (compressed-tensors)
};

// Looks up `module`'s tensors under the names of config.method (see the file
// comment) with `find` (full tensor name -> tensor or null). InvalidArgument
// naming the tensor when the weight or scales are absent, or the zeros of an
// asymmetric config; or naming the method when it is not an int4 one.
absl::StatusOr<Int4LinearTensors> FindInt4LinearTensors(
    const QuantizationConfig& config, absl::string_view module,
    const std::function<const TensorInfo*(const std::string&)>& find);

// The group of a Linear with `in` input columns under `config` (see
// "Groups" above). InvalidArgument when it does not divide `in` or is odd.
absl::StatusOr<int64_t> Int4CheckpointGroup(const QuantizationConfig& config,
                                            int64_t in);

// The scale type that holds every value of `scales` exactly: BF16 -> bf16,
// F16 -> f16, F32 -> f16 if all values are fp16 values, else bf16 if all are
// bf16 values. InvalidArgument naming the tensor otherwise (or for another
// dtype).
absl::StatusOr<kernels::Int4ScaleType> Int4ScaleTypeFor(
    const TensorInfo& scales);

// The int4 expert layout that holds a checkpoint's experts (gate/up [ffn,
// hidden], down [hidden, ffn]) exactly: groups of Int4CheckpointGroup,
// `scale_type`, zero points unless config.symmetric. InvalidArgument naming
// the config (not an int4 method, bits != 4) or the dimension.
absl::StatusOr<kernels::Int4ExpertLayout> Int4CheckpointLayout(
    const QuantizationConfig& config, int64_t hidden, int64_t ffn,
    kernels::Int4ScaleType scale_type);

// Writes part `part` of the int4 expert at `expert` (host memory,
// layout.bytes; other parts untouched) from `tensors`: codes, scales
// (converted exactly to layout.scale_type or refused) and, when the layout
// has zeros, zero points (absent in the checkpoint: 8); a layout without
// zeros refuses any zero point other than 8. The part's rows are the
// Linear's out, its columns the Linear's in.
// REQUIRES: layout from Int4CheckpointLayout / Int4ExpertLayoutWithOptions.
absl::Status ImportInt4ExpertPart(const QuantizationConfig& config,
                                  const Int4LinearTensors& tensors,
                                  const kernels::Int4ExpertLayout& layout,
                                  kernels::Int4Part part, std::byte* expert);

// The Linear [out_features, in_features] dequantized, (u - z) * s exact in
// fp32 then rounded to the nearest bf16 (ties to even), into `out`
// (out_features * in_features bf16 values, row-major as the Linear's
// weight). Same checks as ImportInt4ExpertPart.
absl::Status DequantizeInt4Linear(const QuantizationConfig& config,
                                  const Int4LinearTensors& tensors,
                                  int64_t out_features, int64_t in_features,
                                  uint16_t* out);

}  // namespace moeserve::engine::quant

#endif  // MOESERVE_ENGINE_QUANT_INT4_IMPORT_H_
