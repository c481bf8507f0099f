#ifndef MOESERVE_ENGINE_DTYPE_H_
#define MOESERVE_ENGINE_DTYPE_H_

// Element types of tensors stored in safetensors files.
//
// Only the names safetensors writes for the types we accept are known here;
// every other name is refused by the parser. Thread-safe (pure functions).

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace moeserve::engine {

// F8_E4M3: float8 e4m3fn (what torch.float8_e4m3fn writes: 1 sign, 4
// exponent bits with bias 7, 3 mantissa bits, no infinities, NaN = S.1111.111).
enum class DType {
  kF32,
  kF16,
  kBF16,
  kI32,
  kI64,
  kU8,
  kI8,
  kBool,
  kF64,
  kF8E4M3,
  kU32
};

// Size of one element in bytes.
size_t DTypeSize(DType dtype);

// The safetensors spelling ("BF16", "F32", ...).
absl::string_view DTypeName(DType dtype);

// Parses a safetensors dtype string; nullopt when it is not one we accept.
std::optional<DType> ParseDType(absl::string_view name);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_DTYPE_H_
