// Tensor: a small non-owning view of a dense, row-major, contiguous array that
// lives on one device. Kernels take Tensors so that one op signature serves the
// CPU and (later) the CUDA backend.
//
// Ownership: a Tensor never owns its memory; the caller keeps the buffer alive
// for as long as any op that received the view may run (on the CPU backend:
// until the op returns; on asynchronous backends: until Stream::Synchronize()).
// Thread safety: a Tensor is a value type; copying it copies the view only.
// Writes through views that overlap are the caller's responsibility.
#ifndef MOESERVE_KERNELS_TENSOR_H_
#define MOESERVE_KERNELS_TENSOR_H_

#include <array>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moeserve::kernels {

enum class Device { kCpu, kCuda };

// Element types. I4: int4 weights, two values a byte (CudaBackend::MatMulInt4).
// U8: raw bytes, e.g. a packed int4 expert (Backend::ExpertFfnInt4).
enum class DType { kF32, kBF16, kI32, kI4, kU8 };

const char* DeviceName(Device device);
const char* DTypeName(DType dtype);

// Size in bits of one element (I4 is 4).
int DTypeBits(DType dtype);

// bfloat16 is stored as its raw 16 bits: the top half of an IEEE float32.
using bf16 = uint16_t;

// float -> bf16 with round-to-nearest-even, as torch's .to(torch.bfloat16).
// NaN stays NaN (quiet), infinities stay infinite.
inline bf16 FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force quiet.
    return static_cast<bf16>((bits >> 16) | 0x0040u);
  }
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<bf16>(bits >> 16);
}

// bf16 -> float is exact: place the 16 bits in the top half.
inline float Bf16ToFloat(bf16 h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// IEEE binary16 (fp16, torch.float16) as its raw 16 bits. fp16 -> float is
// exact (subnormals, infinities and NaN included); no F16C needed.
inline float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf / NaN.
  } else if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    float f = static_cast<float>(mant) * 0x1p-24f;
    std::memcpy(&bits, &f, sizeof(bits));
    bits |= sign;
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// float -> fp16 with round-to-nearest-even, as torch's .to(torch.float16):
// overflow gives infinity, NaN stays NaN (quiet).
inline uint16_t FloatToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN.
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: infinity.
  if (abs < 0x38800000u) {
    // Below 2^-14: a subnormal (or zero) of unit 2^-24. Round the 24-bit
    // significand shifted right by (126 - exponent) to nearest even; a
    // carry into bit 10 gives the smallest normal, which is its encoding.
    const uint32_t e = abs >> 23;
    if (e < 102) return sign;  // Below 2^-25: rounds to zero.
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    const uint32_t half = 1u << (shift - 1), rest = m & ((1u << shift) - 1);
    uint32_t r = m >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t v = abs - (112u << 23);  // Rebias 127 -> 15.
  return static_cast<uint16_t>(sign | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
}

// Maps a C++ element type to its DType, for the checked data<T>() accessor.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};

class Tensor {
 public:
  static constexpr int kMaxDims = 4;

  // An empty view (valid() == false): used for optional inputs (e.g. no bias).
  Tensor() = default;

  // REQUIRES: shape.size() <= kMaxDims, every dim >= 0. Use Make() for
  // untrusted shapes.
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
         Device device = Device::kCpu);

  // Checked construction from a runtime shape.
  static absl::StatusOr<Tensor> Make(void* data, DType dtype,
                                     const int64_t* shape, int rank,
                                     Device device = Device::kCpu);

  bool valid() const { return valid_; }
  void* raw() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int rank() const { return rank_; }
  // REQUIRES: 0 <= i < rank().
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const;
  int64_t nbytes() const;

  // Typed element pointer. REQUIRES: dtype() == DTypeOf<T>.
  template <typename T>
  T* data() const {
    assert(dtype_ == DTypeOf<T>::value);
    return static_cast<T*>(data_);
  }

  // The same memory seen with another shape of equal element count, e.g. the
  // per-head view [n * heads, head_dim] of an [n, heads * head_dim] tensor.
  absl::StatusOr<Tensor> Reshape(std::initializer_list<int64_t> shape) const;

  // Rows [begin, end) of dim 0, as a view.
  absl::StatusOr<Tensor> Slice(int64_t begin, int64_t end) const;

  // "F32[3,256]@cpu", for error messages.
  std::string DebugString() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  int rank_ = 0;
  bool valid_ = false;
  std::array<int64_t, kMaxDims> shape_{};
};

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_TENSOR_H_
