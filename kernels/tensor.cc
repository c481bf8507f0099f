#include "kernels/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace moeserve::kernels {

const char* DeviceName(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kI4:
      return "I4";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

int DTypeBits(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 32;
    case DType::kBF16:
      return 16;
    case DType::kI4:
      return 4;
    case DType::kU8:
      return 8;
  }
  return 0;
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
               Device device)
    : data_(data), dtype_(dtype), device_(device), valid_(true) {
  assert(shape.size() <= kMaxDims);
  for (int64_t d : shape) {
    assert(d >= 0);
    shape_[rank_++] = d;
  }
}

absl::StatusOr<Tensor> Tensor::Make(void* data, DType dtype,
                                    const int64_t* shape, int rank,
                                    Device device) {
  if (rank < 0 || rank > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor rank ", rank, " not in [0, ", kMaxDims, "]"));
  }
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.valid_ = true;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension ", shape[i]));
    }
    t.shape_[t.rank_++] = shape[i];
  }
  return t;
}

int64_t Tensor::numel() const {
  if (!valid_) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

int64_t Tensor::nbytes() const { return (numel() * DTypeBits(dtype_) + 7) / 8; }

absl::StatusOr<Tensor> Tensor::Reshape(
    std::initializer_list<int64_t> shape) const {
  if (shape.size() > kMaxDims) {
    return absl::InvalidArgumentError("reshape: too many dimensions");
  }
  MOESERVE_ASSIGN_OR_RETURN(Tensor t,
                            Make(data_, dtype_, shape.begin(),
                                 static_cast<int>(shape.size()), device_));
  if (t.numel() != numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshape of ", DebugString(), " to ", t.DebugString(),
                     " changes the element count"));
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t begin, int64_t end) const {
  if (!valid_ || rank_ == 0 || begin < 0 || end < begin || end > shape_[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slice [", begin, ", ", end, ") out of range for ", DebugString()));
  }
  if (dtype_ == DType::kI4) {
    return absl::UnimplementedError("slicing I4 tensors");
  }
  Tensor t = *this;
  const int64_t row_elems = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.data_ =
      static_cast<char*>(data_) + begin * row_elems * DTypeBits(dtype_) / 8;
  t.shape_[0] = end - begin;
  return t;
}

std::string Tensor::DebugString() const {
  if (!valid_) return "<none>";
  return absl::StrCat(
      DTypeName(dtype_), "[",
      absl::StrJoin(shape_.begin(), shape_.begin() + rank_, ","), "]@",
      DeviceName(device_));
}

}  // namespace moeserve::kernels
