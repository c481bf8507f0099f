#include "engine/quant/fp8_import.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/quant/tensor_convert.h"
#include "kernels/tensor.h"

namespace moeserve::engine::quant {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("fp8 import: ", what));
}

std::string Shape(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// The scale grid of a Linear [rows, cols] under `config`:
// [ceil(rows / tile_rows), ceil(cols / tile_cols)].
struct Grid {
  int64_t rows = 1, cols = 1;
  int64_t tile_rows = 1, tile_cols = 1;
};

Grid GridFor(const QuantizationConfig& c, int64_t rows, int64_t cols) {
  Grid g;
  switch (c.granularity) {
    case ScaleGranularity::kBlock:
      g.tile_rows = std::min(c.block_rows, rows);
      g.tile_cols = std::min(c.block_cols, cols);
      break;
    case ScaleGranularity::kChannel:
      g.tile_rows = 1;
      g.tile_cols = cols;
      break;
    default:  // per tensor
      g.tile_rows = rows;
      g.tile_cols = cols;
      break;
  }
  g.rows = (rows + g.tile_rows - 1) / g.tile_rows;
  g.cols = (cols + g.tile_cols - 1) / g.tile_cols;
  return g;
}

// The scales of `t` as fp32, row-major over `grid`, checked.
absl::StatusOr<std::vector<float>> ReadScales(const QuantizationConfig& c,
                                              const TensorInfo& t,
                                              const Grid& grid) {
  const int64_t n = grid.rows * grid.cols;
  bool shape_ok = false;
  int64_t numel = 1;
  for (int64_t d : t.shape) numel *= d;
  if (c.granularity == ScaleGranularity::kChannel) {
    shape_ok = t.shape == std::vector<int64_t>{grid.rows, 1} ||
               t.shape == std::vector<int64_t>{grid.rows};
  } else if (c.granularity == ScaleGranularity::kTensor) {
    shape_ok = numel == 1 && t.shape.size() <= 2;
  } else {
    shape_ok = t.shape == std::vector<int64_t>{grid.rows, grid.cols};
  }
  if (!shape_ok) {
    return Bad(absl::StrCat(t.name, ": shape ", Shape(t.shape),
                            " is not the scale grid of ", c.Describe(), " (",
                            grid.rows, " x ", grid.cols, ")"));
  }
  std::vector<float> out(n);
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (t.dtype == DType::kF32) {
      std::memcpy(&v, bytes + 4 * i, 4);
    } else if (t.dtype == DType::kBF16 || t.dtype == DType::kF16) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      v = t.dtype == DType::kBF16 ? kernels::Bf16ToFloat(h) : F16ToFloat(h);
    } else {
      return Bad(absl::StrCat(t.name, ": dtype ", DTypeName(t.dtype),
                              ", expected F32, BF16 or F16"));
    }
    if (!std::isfinite(v) || std::fabs(v) >= std::ldexp(1.0f, 120)) {
      return Bad(absl::StrCat(t.name, ": scale ", i, " is ", v,
                              " (must be finite and below 2^120)"));
    }
    out[i] = v;
  }
  return out;
}

absl::Status CheckWeight(const TensorInfo& t, int64_t rows, int64_t cols) {
  if (t.dtype != DType::kF8E4M3) {
    return Bad(absl::StrCat(t.name, ": dtype ", DTypeName(t.dtype),
                            ", expected F8_E4M3"));
  }
  if (t.shape != std::vector<int64_t>{rows, cols}) {
    return Bad(absl::StrCat(t.name, ": shape ", Shape(t.shape), ", expected ",
                            Shape({rows, cols})));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Fp8LinearTensors> FindFp8LinearTensors(
    const QuantizationConfig& config, absl::string_view module,
    const std::function<const TensorInfo*(const std::string&)>& find) {
  if (!config.fp8()) {
    return Bad(absl::StrCat("quantization ", config.Describe(),
                            " is not an fp8 method"));
  }
  const char* scale_name = config.method == QuantMethod::kFp8Block
                               ? "weight_scale_inv"
                               : "weight_scale";
  Fp8LinearTensors t;
  t.module = std::string(module);
  t.weight = find(absl::StrCat(module, ".weight"));
  t.scale = find(absl::StrCat(module, ".", scale_name));
  if (t.weight == nullptr) {
    return Bad(absl::StrCat(module, ".weight: missing"));
  }
  if (t.scale == nullptr) {
    return Bad(absl::StrCat(module, ".", scale_name, ": missing (",
                            config.Describe(), ")"));
  }
  return t;
}

absl::StatusOr<kernels::Fp8ExpertLayout> Fp8CheckpointLayout(
    const QuantizationConfig& config, int64_t hidden, int64_t ffn) {
  if (!config.fp8()) {
    return Bad(absl::StrCat("quantization ", config.Describe(),
                            " is not an fp8 method"));
  }
  switch (config.granularity) {
    case ScaleGranularity::kBlock:
      return kernels::MakeFp8ExpertLayout(hidden, ffn, config.block_rows,
                                          config.block_cols);
    case ScaleGranularity::kChannel:
      return kernels::MakeFp8ExpertLayout(hidden, ffn, 1, kernels::kFp8Whole);
    case ScaleGranularity::kTensor:
      return kernels::MakeFp8ExpertLayout(hidden, ffn, kernels::kFp8Whole,
                                          kernels::kFp8Whole);
    default:
      return Bad("scale granularity group is not an fp8 one");
  }
}

absl::Status ImportFp8ExpertPart(const QuantizationConfig& config,
                                 const Fp8LinearTensors& tensors,
                                 const kernels::Fp8ExpertLayout& layout,
                                 kernels::Fp8Part part, std::byte* expert) {
  const kernels::Fp8Matrix m = kernels::Fp8ExpertPart(expert, layout, part);
  MOESERVE_RETURN_IF_ERROR(CheckWeight(*tensors.weight, m.rows, m.cols));
  const Grid grid = GridFor(config, m.rows, m.cols);
  if (grid.rows != m.scale_rows() || grid.cols != m.scale_cols()) {
    return Bad(absl::StrCat(tensors.module, ": the checkpoint's scale grid ",
                            grid.rows, " x ", grid.cols,
                            " is not the layout's ", m.scale_rows(), " x ",
                            m.scale_cols()));
  }
  MOESERVE_ASSIGN_OR_RETURN(std::vector<float> scales,
                            ReadScales(config, *tensors.scale, grid));
  std::memcpy(const_cast<uint8_t*>(m.q), tensors.weight->data,
              static_cast<size_t>(m.rows * m.cols));
  std::memcpy(const_cast<float*>(m.scales), scales.data(),
              scales.size() * sizeof(float));
  return absl::OkStatus();
}

absl::Status DequantizeFp8Linear(const QuantizationConfig& config,
                                 const Fp8LinearTensors& tensors,
                                 int64_t out_features, int64_t in_features,
                                 uint16_t* out) {
  MOESERVE_RETURN_IF_ERROR(
      CheckWeight(*tensors.weight, out_features, in_features));
  const Grid grid = GridFor(config, out_features, in_features);
  MOESERVE_ASSIGN_OR_RETURN(std::vector<float> scales,
                            ReadScales(config, *tensors.scale, grid));
  const auto* q = static_cast<const uint8_t*>(tensors.weight->data);
  const float* table = kernels::Fp8E4M3Table();
  for (int64_t r = 0; r < out_features; ++r) {
    for (int64_t c = 0; c < in_features; ++c) {
      const float s =
          scales[(r / grid.tile_rows) * grid.cols + c / grid.tile_cols];
      out[r * in_features + c] =
          kernels::FloatToBf16(table[q[r * in_features + c]] * s);
    }
  }
  return absl::OkStatus();
}

}  // namespace moeserve::engine::quant
