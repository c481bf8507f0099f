#include "engine/quant/tensor_convert.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/tensor.h"

namespace moeserve::engine::quant {

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // Inf or NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // 127 - 15 = 112
  } else {
    // Zero or subnormal: mant * 2^-24, exact in float.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void F16ToBf16(const void* f16, size_t n, uint16_t* bf16) {
  const auto* bytes = static_cast<const unsigned char*>(f16);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    bf16[i] = kernels::FloatToBf16(F16ToFloat(h));
  }
}

absl::Status CopyAsBf16(const TensorInfo& t, uint16_t* out) {
  const size_t n = t.byte_size / 2;
  if (t.dtype == DType::kBF16) {
    std::memcpy(out, t.data, t.byte_size);
    return absl::OkStatus();
  }
  if (t.dtype == DType::kF16) {
    F16ToBf16(t.data, n, out);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor \"", t.name, "\": dtype ", DTypeName(t.dtype),
                   " where BF16 or F16 weights are expected"));
}

}  // namespace moeserve::engine::quant
