#include "engine/quant/int4_import.h"

#include <cstring>
#include <initializer_list>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/tensor.h"

namespace moeserve::engine::quant {
namespace {

using kernels::Int4ScaleType;

constexpr int64_t kPack = 8;  // 4-bit codes per int32.

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(std::string("int4 import: ") + what);
}

absl::Status CheckConfig(const QuantizationConfig& config) {
  if (!config.int4()) {
    return Bad(absl::StrCat("quantization ", config.Describe(),
                            " is not gptq, awq or compressed-tensors int4"));
  }
  if (config.bits != 4) {
    return Bad(absl::StrCat("bits: expected 4, got ", config.bits));
  }
  return absl::OkStatus();
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// `t` is one of `dtypes` with shape `shape`; else InvalidArgument naming it
// with the expected and the actual dtype and shape.
absl::Status CheckTensor(const TensorInfo& t,
                         std::initializer_list<DType> dtypes,
                         const std::vector<int64_t>& shape) {
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= t.dtype == d;
  if (dtype_ok && t.shape == shape) return absl::OkStatus();
  std::vector<std::string> names;
  for (DType d : dtypes) names.emplace_back(DTypeName(d));
  return Bad(absl::StrCat(t.name, ": expected ", absl::StrJoin(names, "/"), " ",
                          ShapeString(shape), ", got ", DTypeName(t.dtype), " ",
                          ShapeString(t.shape)));
}

uint32_t Word(const TensorInfo& t, int64_t i) {
  uint32_t w;
  std::memcpy(&w, static_cast<const uint8_t*>(t.data) + 4 * i, 4);
  return w;
}

int Nibble(uint32_t word, int p) { return (word >> (4 * p)) & 0xf; }

// AWQ "gemm": nibble p of a word holds column 8c + kAwqOrder[p], so column
// 8c + j sits in nibble kAwqNibbleOf[j].
constexpr int kAwqOrder[kPack] = {0, 2, 4, 6, 1, 3, 5, 7};
constexpr int kAwqNibbleOf[kPack] = {0, 4, 1, 5, 2, 6, 3, 7};
static_assert(kAwqOrder[kAwqNibbleOf[1]] == 1 &&
              kAwqOrder[kAwqNibbleOf[6]] == 6);

// A scale element of any float dtype as float (exact).
float ScaleValue(const TensorInfo& t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  if (t.dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return t.dtype == DType::kF16 ? kernels::F16ToFloat(h)
                                : kernels::Bf16ToFloat(h);
}

// `f` as bits of type `st` when exact (NaN never is).
bool ExactScaleBits(float f, Int4ScaleType st, uint16_t* bits) {
  *bits = st == Int4ScaleType::kF16 ? kernels::FloatToF16(f)
                                    : kernels::FloatToBf16(f);
  return kernels::Int4ScaleToFloat(*bits, st) == f;
}

// Where one Linear's codes, scales and zero points go: rows = out, cols =
// in, q rows of cols / 2 bytes; zeros null: every zero point must be 8.
struct Dest {
  uint8_t* q;
  uint16_t* scales;
  uint8_t* zeros;
  Int4ScaleType scale_type;
  int64_t rows, cols, group;
};

// The checks and the decode of one Linear into `d`.
class Importer {
 public:
  Importer(const QuantizationConfig& config, const Int4LinearTensors& t,
           const Dest& d)
      : c_(config), t_(t), d_(d), groups_(d.cols / d.group) {}

  absl::Status Run() {
    MOESERVE_RETURN_IF_ERROR(CheckConfig(c_));
    if (t_.weight == nullptr || t_.scales == nullptr) {
      return Bad(absl::StrCat(t_.module, ": weight or scales tensor missing"));
    }
    MOESERVE_ASSIGN_OR_RETURN(const int64_t group,
                              Int4CheckpointGroup(c_, d_.cols));
    if (group != d_.group) {
      return Bad(absl::StrCat(t_.module, ": group: the layout has ", d_.group,
                              " columns a group, the checkpoint (group_size ",
                              c_.block_cols, ", in ", d_.cols, ") ", group));
    }
    MOESERVE_RETURN_IF_ERROR(CheckShapes());
    MOESERVE_RETURN_IF_ERROR(CheckGIdx());
    std::memset(d_.q, 0, d_.rows * d_.cols / 2);
    DecodeCodes();
    MOESERVE_RETURN_IF_ERROR(DecodeScales());
    return DecodeZeros();
  }

 private:
  absl::Status CheckShapes() const {
    const int64_t out = d_.rows, in = d_.cols;
    const auto kFloats = {DType::kF16, DType::kBF16, DType::kF32};
    switch (c_.method) {
      case QuantMethod::kGptq:
        MOESERVE_RETURN_IF_ERROR(
            CheckTensor(*t_.weight, {DType::kI32}, {CeilDiv(in, kPack), out}));
        MOESERVE_RETURN_IF_ERROR(
            CheckTensor(*t_.scales, kFloats, {groups_, out}));
        if (t_.zeros != nullptr) {
          MOESERVE_RETURN_IF_ERROR(CheckTensor(*t_.zeros, {DType::kI32},
                                               {groups_, CeilDiv(out, kPack)}));
        }
        break;
      case QuantMethod::kAwq:
        MOESERVE_RETURN_IF_ERROR(
            CheckTensor(*t_.weight, {DType::kI32}, {in, CeilDiv(out, kPack)}));
        MOESERVE_RETURN_IF_ERROR(
            CheckTensor(*t_.scales, kFloats, {groups_, out}));
        if (t_.zeros != nullptr) {
          MOESERVE_RETURN_IF_ERROR(CheckTensor(*t_.zeros, {DType::kI32},
                                               {groups_, CeilDiv(out, kPack)}));
        }
        break;
      default:  // compressed-tensors
        MOESERVE_RETURN_IF_ERROR(
            CheckTensor(*t_.weight, {DType::kI32}, {out, CeilDiv(in, kPack)}));
        MOESERVE_RETURN_IF_ERROR(
            CheckTensor(*t_.scales, kFloats, {out, groups_}));
        if (t_.zeros != nullptr && t_.zeros->dtype == DType::kI8) {
          MOESERVE_RETURN_IF_ERROR(
              CheckTensor(*t_.zeros, {DType::kI8}, {out, groups_}));
        } else if (t_.zeros != nullptr) {
          MOESERVE_RETURN_IF_ERROR(CheckTensor(*t_.zeros, {DType::kI32},
                                               {CeilDiv(out, kPack), groups_}));
        }
        if (t_.shape != nullptr) {
          MOESERVE_RETURN_IF_ERROR(
              CheckTensor(*t_.shape, {DType::kI64, DType::kI32}, {2}));
          for (int i = 0; i < 2; ++i) {
            int64_t v;
            if (t_.shape->dtype == DType::kI64) {
              std::memcpy(
                  &v, static_cast<const uint8_t*>(t_.shape->data) + 8 * i, 8);
            } else {
              v = static_cast<int32_t>(Word(*t_.shape, i));
            }
            if (v != (i == 0 ? out : in)) {
              return Bad(absl::StrCat(t_.shape->name, ": expected [", out, ", ",
                                      in, "], got dim ", i, " = ", v));
            }
          }
        }
    }
    return absl::OkStatus();
  }

  // g_idx[i] == i / group for every input row (no act-order permutation).
  absl::Status CheckGIdx() const {
    if (t_.g_idx == nullptr) return absl::OkStatus();
    MOESERVE_RETURN_IF_ERROR(CheckTensor(*t_.g_idx, {DType::kI32}, {d_.cols}));
    for (int64_t i = 0; i < d_.cols; ++i) {
      const auto g = static_cast<int32_t>(Word(*t_.g_idx, i));
      if (g != i / d_.group) {
        return Bad(absl::StrCat(t_.g_idx->name, ": expected g_idx[i] = i / ",
                                d_.group, " (no act-order), got g_idx[", i,
                                "] = ", g, " (want ", i / d_.group,
                                "); desc_act checkpoints permute the groups "
                                "and are not supported"));
      }
    }
    return absl::OkStatus();
  }

  void SetCode(int64_t row, int64_t col, int u) {
    d_.q[row * (d_.cols / 2) + col / 2] |=
        static_cast<uint8_t>(u << (4 * (col % 2)));
  }

  void DecodeCodes() {
    const TensorInfo& w = *t_.weight;
    const int64_t out = d_.rows, in = d_.cols;
    switch (c_.method) {
      case QuantMethod::kGptq:  // [ceil(in/8), out], packed along in.
        for (int64_t r = 0; r < CeilDiv(in, kPack); ++r) {
          for (int64_t j = 0; j < out; ++j) {
            const uint32_t word = Word(w, r * out + j);
            for (int p = 0; p < kPack && r * kPack + p < in; ++p) {
              SetCode(j, r * kPack + p, Nibble(word, p));
            }
          }
        }
        break;
      case QuantMethod::kAwq: {  // [in, ceil(out/8)], interleaved along out.
        const int64_t words = CeilDiv(out, kPack);
        for (int64_t i = 0; i < in; ++i) {
          for (int64_t c = 0; c < words; ++c) {
            const uint32_t word = Word(w, i * words + c);
            for (int j = 0; j < kPack && c * kPack + j < out; ++j) {
              SetCode(c * kPack + j, i, Nibble(word, kAwqNibbleOf[j]));
            }
          }
        }
        break;
      }
      default: {  // compressed-tensors: [out, ceil(in/8)], packed along in.
        const int64_t words = CeilDiv(in, kPack);
        for (int64_t j = 0; j < out; ++j) {
          for (int64_t c = 0; c < words; ++c) {
            const uint32_t word = Word(w, j * words + c);
            for (int p = 0; p < kPack && c * kPack + p < in; ++p) {
              SetCode(j, c * kPack + p, Nibble(word, p));
            }
          }
        }
      }
    }
  }

  absl::Status DecodeScales() {
    const bool by_group_rows = c_.method != QuantMethod::kInt4Compressed;
    for (int64_t j = 0; j < d_.rows; ++j) {
      for (int64_t g = 0; g < groups_; ++g) {
        const int64_t i = by_group_rows ? g * d_.rows + j : j * groups_ + g;
        const float f = ScaleValue(*t_.scales, i);
        uint16_t bits;
        if (!ExactScaleBits(f, d_.scale_type, &bits)) {
          return Bad(absl::StrCat(t_.scales->name, ": scale ", f, " (row ", j,
                                  ", group ", g, ") is not exactly a ",
                                  kernels::Int4ScaleTypeName(d_.scale_type),
                                  " value (the layout's scale type)"));
        }
        d_.scales[j * groups_ + g] = bits;
      }
    }
    return absl::OkStatus();
  }

  // The zero point of (row j, group g) as the checkpoint defines it.
  int ZeroAt(int64_t j, int64_t g) const {
    const TensorInfo& z = *t_.zeros;
    const int64_t words = CeilDiv(d_.rows, kPack);
    switch (c_.method) {
      case QuantMethod::kGptq:
        return Nibble(Word(z, g * words + j / kPack), j % kPack) +
               (c_.gptq_zeros_minus_one ? 1 : 0);
      case QuantMethod::kAwq:
        return Nibble(Word(z, g * words + j / kPack), kAwqNibbleOf[j % kPack]);
      default:
        if (z.dtype == DType::kI8) {
          return static_cast<const int8_t*>(z.data)[j * groups_ + g] + 8;
        }
        return Nibble(Word(z, (j / kPack) * groups_ + g), j % kPack);
    }
  }

  absl::Status DecodeZeros() {
    for (int64_t j = 0; j < d_.rows; ++j) {
      for (int64_t g = 0; g < groups_; ++g) {
        const int z =
            t_.zeros != nullptr ? ZeroAt(j, g) : kernels::kInt4ImplicitZero;
        if (d_.zeros != nullptr) {
          d_.zeros[j * groups_ + g] = static_cast<uint8_t>(z);
        } else if (z != kernels::kInt4ImplicitZero) {
          return Bad(absl::StrCat(
              t_.zeros->name, ": zero point ", z, " at row ", j, ", group ", g,
              " in a symmetric checkpoint (expected 8: the layout has no "
              "zero points)"));
        }
      }
    }
    return absl::OkStatus();
  }

  const QuantizationConfig& c_;
  const Int4LinearTensors& t_;
  const Dest d_;
  const int64_t groups_;
};

}  // namespace

absl::StatusOr<Int4LinearTensors> FindInt4LinearTensors(
    const QuantizationConfig& config, absl::string_view module,
    const std::function<const TensorInfo*(const std::string&)>& find) {
  MOESERVE_RETURN_IF_ERROR(CheckConfig(config));
  const bool ct = config.method == QuantMethod::kInt4Compressed;
  Int4LinearTensors t;
  t.module = std::string(module);
  auto get = [&](const char* suffix) {
    return find(absl::StrCat(module, ".", suffix));
  };
  t.weight = get(ct ? "weight_packed" : "qweight");
  t.scales = get(ct ? "weight_scale" : "scales");
  t.zeros = get(ct ? "weight_zero_point" : "qzeros");
  t.g_idx = get(ct ? "weight_g_idx" : "g_idx");
  if (ct) t.shape = get("weight_shape");
  auto missing = [&](const char* suffix) {
    return Bad(absl::StrCat(module, ".", suffix, ": missing (",
                            config.Describe(), ")"));
  };
  if (t.weight == nullptr) return missing(ct ? "weight_packed" : "qweight");
  if (t.scales == nullptr) return missing(ct ? "weight_scale" : "scales");
  if (t.zeros == nullptr && !config.symmetric) {
    return missing(ct ? "weight_zero_point" : "qzeros");
  }
  return t;
}

absl::StatusOr<int64_t> Int4CheckpointGroup(const QuantizationConfig& config,
                                            int64_t in) {
  const int64_t size = config.block_cols;
  const int64_t group = size <= 0 || size >= in ? in : size;
  if (in <= 0 || in % group != 0 || group % 2 != 0) {
    return Bad(absl::StrCat("group: group_size ", size, " over ", in,
                            " input columns gives groups of ", group,
                            " that are odd or do not divide ", in));
  }
  return group;
}

absl::StatusOr<kernels::Int4ScaleType> Int4ScaleTypeFor(
    const TensorInfo& scales) {
  switch (scales.dtype) {
    case DType::kBF16:
      return Int4ScaleType::kBf16;
    case DType::kF16:
      return Int4ScaleType::kF16;
    case DType::kF32:
      for (Int4ScaleType st : {Int4ScaleType::kF16, Int4ScaleType::kBf16}) {
        bool all = true;
        uint16_t bits;
        for (uint64_t i = 0; all && i < scales.byte_size / 4; ++i) {
          all = ExactScaleBits(ScaleValue(scales, i), st, &bits);
        }
        if (all) return st;
      }
      return Bad(absl::StrCat(scales.name,
                              ": F32 scales that neither fp16 nor bf16 hold "
                              "exactly"));
    default:
      return Bad(absl::StrCat(scales.name,
                              ": expected F16/BF16/F32 scales, got ",
                              DTypeName(scales.dtype)));
  }
}

absl::StatusOr<kernels::Int4ExpertLayout> Int4CheckpointLayout(
    const QuantizationConfig& config, int64_t hidden, int64_t ffn,
    kernels::Int4ScaleType scale_type) {
  MOESERVE_RETURN_IF_ERROR(CheckConfig(config));
  absl::StatusOr<int64_t> group_in = Int4CheckpointGroup(config, hidden);
  if (!group_in.ok()) {
    return Bad(absl::StrCat("hidden: ", group_in.status().message()));
  }
  absl::StatusOr<int64_t> group_out = Int4CheckpointGroup(config, ffn);
  if (!group_out.ok()) {
    return Bad(absl::StrCat("ffn: ", group_out.status().message()));
  }
  return kernels::Int4ExpertLayoutWithOptions(
      hidden, ffn, *group_in, *group_out, {scale_type, !config.symmetric});
}

absl::Status ImportInt4ExpertPart(const QuantizationConfig& config,
                                  const Int4LinearTensors& tensors,
                                  const kernels::Int4ExpertLayout& layout,
                                  kernels::Int4Part part, std::byte* expert) {
  const kernels::Int4Matrix w = kernels::Int4ExpertPart(expert, layout, part);
  auto* base = reinterpret_cast<uint8_t*>(expert);
  auto mut = [&](const void* p) {
    return base + (static_cast<const uint8_t*>(p) - base);
  };
  const Dest d{mut(w.q),
               reinterpret_cast<uint16_t*>(mut(w.scales)),
               w.zeros != nullptr ? mut(w.zeros) : nullptr,
               w.scale_type,
               w.rows,
               w.cols,
               w.group};
  return Importer(config, tensors, d).Run();
}

absl::Status DequantizeInt4Linear(const QuantizationConfig& config,
                                  const Int4LinearTensors& tensors,
                                  int64_t out_features, int64_t in_features,
                                  uint16_t* out) {
  MOESERVE_RETURN_IF_ERROR(CheckConfig(config));
  if (tensors.weight == nullptr || tensors.scales == nullptr) {
    return Bad(
        absl::StrCat(tensors.module, ": weight or scales tensor missing"));
  }
  if (out_features <= 0 || in_features <= 0 || in_features % 2 != 0) {
    return Bad(absl::StrCat(tensors.module, ": shape [", out_features, ", ",
                            in_features, "] (need > 0 and an even in)"));
  }
  MOESERVE_ASSIGN_OR_RETURN(const int64_t group,
                            Int4CheckpointGroup(config, in_features));
  MOESERVE_ASSIGN_OR_RETURN(const Int4ScaleType st,
                            Int4ScaleTypeFor(*tensors.scales));
  const int64_t groups = out_features * (in_features / group);
  std::vector<uint8_t> q(out_features * in_features / 2), zeros(groups);
  std::vector<uint16_t> scales(groups);
  const Dest d{q.data(),     scales.data(), zeros.data(), st,
               out_features, in_features,   group};
  MOESERVE_RETURN_IF_ERROR(Importer(config, tensors, d).Run());
  kernels::Int4Matrix w;
  w.q = q.data();
  w.scales = scales.data();
  w.zeros = zeros.data();
  w.scale_type = st;
  w.rows = out_features;
  w.cols = in_features;
  w.group = group;
  for (int64_t r = 0; r < out_features; ++r) {
    for (int64_t c = 0; c < in_features; ++c) {
      out[r * in_features + c] = kernels::FloatToBf16(kernels::Int4At(w, r, c));
    }
  }
  return absl::OkStatus();
}

}  // namespace moeserve::engine::quant
