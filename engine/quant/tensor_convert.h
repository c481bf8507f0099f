// Element conversions of checkpoint tensors at load: f16 -> bf16 (an F16
// checkpoint is served as bf16, rounding each value to the nearest bf16,
// ties to even: bf16 keeps f16's range and 8 of its 11 significant bits,
// the precision every moeserve kernel computes its weights in), and a
// tensor read as bf16 whatever its stored float dtype.
//
// Thread-safety: pure functions.
#ifndef MOESERVE_ENGINE_QUANT_TENSOR_CONVERT_H_
#define MOESERVE_ENGINE_QUANT_TENSOR_CONVERT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/safetensors.h"

namespace moeserve::engine::quant {

// IEEE half (raw bits) -> float, exact (subnormals, Inf, NaN included).
float F16ToFloat(uint16_t h);

// `n` f16 values (any alignment) -> bf16 bits, round to nearest even.
void F16ToBf16(const void* f16, size_t n, uint16_t* bf16);

// Copies tensor `t` (BF16 or F16, t.byte_size / 2 values) into `out` as
// bf16. InvalidArgument naming the tensor for any other dtype.
absl::Status CopyAsBf16(const TensorInfo& t, uint16_t* out);

}  // namespace moeserve::engine::quant

#endif  // MOESERVE_ENGINE_QUANT_TENSOR_CONVERT_H_
