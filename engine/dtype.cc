#include "engine/dtype.h"

#include <array>
#include <utility>

namespace moeserve::engine {
namespace {

struct DTypeEntry {
  DType dtype;
  absl::string_view name;
  size_t size;
};

constexpr std::array<DTypeEntry, 11> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kBool, "BOOL", 1},
    {DType::kF64, "F64", 8},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kU32, "U32", 4},
}};

const DTypeEntry& Entry(DType dtype) {
  return kDTypes[static_cast<size_t>(dtype)];
}

}  // namespace

size_t DTypeSize(DType dtype) { return Entry(dtype).size; }

absl::string_view DTypeName(DType dtype) { return Entry(dtype).name; }

std::optional<DType> ParseDType(absl::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

}  // namespace moeserve::engine
