#include "engine/quant/expert_codec.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/quant/fp8_import.h"
#include "engine/quant/int4_import.h"
#include "engine/quant/tensor_convert.h"

namespace moeserve::engine::quant {
namespace {

constexpr size_t kAlign = 64;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<const TensorInfo*> Find(const ShardedSafetensors& files,
                                       const std::string& name) {
  std::optional<ShardedSafetensors::Located> loc = files.Find(name);
  if (!loc) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing tensor \"", name, "\""));
  }
  return loc->info;
}

// A float weight tensor of exactly `shape`, BF16 or F16.
absl::StatusOr<const TensorInfo*> FindFloat(const ShardedSafetensors& files,
                                            const std::string& name,
                                            const std::vector<int64_t>& shape) {
  MOESERVE_ASSIGN_OR_RETURN(const TensorInfo* t, Find(files, name));
  if (t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\": dtype ", DTypeName(t->dtype),
                     " is not supported here (BF16 or F16 weights",
                     " or a quantization_config describing them)"));
  }
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor \"", name, "\": wrong shape ", ShapeString(t->shape),
        ", config implies ", ShapeString(shape)));
  }
  return t;
}

const TensorInfo* FindOrNull(const ShardedSafetensors& files,
                             const std::string& name) {
  std::optional<ShardedSafetensors::Located> loc = files.Find(name);
  return loc ? loc->info : nullptr;
}

// The importers' tensor lookup (name -> tensor or null) over `files`.
std::function<const TensorInfo*(const std::string&)> Lookup(
    const ShardedSafetensors& files) {
  return [&files](const std::string& n) { return FindOrNull(files, n); };
}

// "model.layers.0.mlp.experts.3.gate_proj" from its ".weight" tensor name.
std::string ModuleOf(const std::string& weight_name) {
  constexpr absl::string_view kWeight = ".weight";
  if (absl::EndsWith(weight_name, kWeight)) {
    return weight_name.substr(0, weight_name.size() - kWeight.size());
  }
  return weight_name;
}

// Bytes of one part of an int4 expert: nibbles, scales and zero points.
size_t Int4PartBytes(const kernels::Int4ExpertLayout& l, int64_t rows,
                     int64_t cols, int64_t group) {
  const int64_t groups = rows * (cols / group);
  return static_cast<size_t>(rows * cols / 2 + groups * 2 +
                             (l.has_zeros ? groups : 0));
}

}  // namespace

const char* ExpertFormatName(ExpertFormat f) {
  switch (f) {
    case ExpertFormat::kBf16:
      return "bf16";
    case ExpertFormat::kInt4:
      return "int4";
    case ExpertFormat::kFp8:
      return "fp8";
  }
  return "?";
}

ExpertCodec ExpertCodec::Bf16(const ModelConfig& config) {
  ExpertCodec c;
  c.config_ = &config;
  c.format_ = ExpertFormat::kBf16;
  // Each matrix starts on a 64-byte boundary (engine/model_weights.h).
  const size_t matrix = static_cast<size_t>(config.expert_intermediate_size) *
                        config.hidden_size * DTypeSize(DType::kBF16);
  c.parts_[0] = {0, matrix};
  c.parts_[1] = {RoundUp(matrix), matrix};
  c.parts_[2] = {2 * RoundUp(matrix), matrix};
  c.blob_bytes_ = 3 * RoundUp(matrix);
  return c;
}

absl::StatusOr<ExpertCodec> ExpertCodec::Create(
    const ModelConfig& config, const ShardedSafetensors& files) {
  ExpertCodec c;
  c.config_ = &config;
  const int64_t ffn = config.expert_intermediate_size;
  const int64_t hidden = config.hidden_size;
  const quant::QuantizationConfig& q = config.quantization;
  const ExpertTensorNames first = config.architecture->ExpertNames(0, 0);
  // An expert stored as a plain float weight (an unquantized checkpoint, or
  // experts a quantized one left out) is bf16.
  const TensorInfo* plain = FindOrNull(files, first.gate);
  if (!q.quantized() || q.IsUnquantized(ModuleOf(first.gate)) ||
      (plain != nullptr &&
       (plain->dtype == DType::kBF16 || plain->dtype == DType::kF16))) {
    MOESERVE_ASSIGN_OR_RETURN(const TensorInfo* t,
                              FindFloat(files, first.gate, {ffn, hidden}));
    ExpertCodec bf16 = Bf16(config);
    bf16.from_f16_ = t->dtype == DType::kF16;
    bf16.blob_is_file_bytes_ = !bf16.from_f16_;
    return bf16;
  }
  if (q.int4()) {
    const auto find = Lookup(files);
    MOESERVE_ASSIGN_OR_RETURN(
        Int4LinearTensors t,
        FindInt4LinearTensors(q, ModuleOf(first.gate), find));
    MOESERVE_ASSIGN_OR_RETURN(kernels::Int4ScaleType scale_type,
                              Int4ScaleTypeFor(*t.scales));
    MOESERVE_ASSIGN_OR_RETURN(kernels::Int4ExpertLayout layout,
                              Int4CheckpointLayout(q, hidden, ffn, scale_type));
    c.format_ = ExpertFormat::kInt4;
    c.int4_ = layout;
    c.blob_bytes_ = static_cast<size_t>(layout.bytes);
    c.parts_[0] = {static_cast<size_t>(layout.gate_q),
                   Int4PartBytes(layout, ffn, hidden, layout.group_in)};
    c.parts_[1] = {static_cast<size_t>(layout.up_q),
                   Int4PartBytes(layout, ffn, hidden, layout.group_in)};
    c.parts_[2] = {static_cast<size_t>(layout.down_q),
                   Int4PartBytes(layout, hidden, ffn, layout.group_out)};
    return c;
  }
  if (q.fp8()) {
    MOESERVE_ASSIGN_OR_RETURN(kernels::Fp8ExpertLayout layout,
                              Fp8CheckpointLayout(q, hidden, ffn));
    c.format_ = ExpertFormat::kFp8;
    c.fp8_ = layout;
    c.blob_bytes_ = static_cast<size_t>(layout.bytes);
    const int64_t offsets[] = {layout.gate_q, layout.up_q, layout.down_q};
    for (int i = 0; i < 3; ++i) {
      const int64_t rows = i < 2 ? ffn : hidden, cols = i < 2 ? hidden : ffn;
      const int64_t tr = std::min(layout.block_rows, rows);
      const int64_t tc = std::min(layout.block_cols, cols);
      const int64_t grid = ((rows + tr - 1) / tr) * ((cols + tc - 1) / tc);
      c.parts_[i] = {static_cast<size_t>(offsets[i]),
                     static_cast<size_t>(rows * cols + 4 * grid)};
    }
    return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("quantized experts (", q.Describe(),
                   ") are not an expert format moeserve serves"));
}

std::string ExpertCodec::Describe() const {
  std::string s = ExpertFormatName(format_);
  if (from_f16_) absl::StrAppend(&s, " (from F16)");
  if (config_ != nullptr && config_->quantization.quantized() &&
      format_ != ExpertFormat::kBf16) {
    absl::StrAppend(&s, " (", config_->quantization.Describe(), ")");
  }
  return s;
}

absl::Status ExpertCodec::Pack(const ShardedSafetensors& files,
                               const ExpertTensorNames& names,
                               std::byte* dst) const {
  const int64_t ffn = config_->expert_intermediate_size;
  const int64_t hidden = config_->hidden_size;
  std::memset(dst, 0, blob_bytes_);
  if (format_ == ExpertFormat::kBf16) {
    const std::pair<const std::string*, std::vector<int64_t>> mats[] = {
        {&names.gate, {ffn, hidden}},
        {&names.up, {ffn, hidden}},
        {&names.down, {hidden, ffn}}};
    for (int i = 0; i < 3; ++i) {
      MOESERVE_ASSIGN_OR_RETURN(
          const TensorInfo* t,
          FindFloat(files, *mats[i].first, mats[i].second));
      MOESERVE_RETURN_IF_ERROR(
          CopyAsBf16(*t, reinterpret_cast<uint16_t*>(dst + parts_[i].offset)));
    }
    return absl::OkStatus();
  }
  if (format_ == ExpertFormat::kInt4) {
    const QuantizationConfig& q = config_->quantization;
    const auto find = Lookup(files);
    const std::pair<const std::string*, kernels::Int4Part> parts[] = {
        {&names.gate, kernels::Int4Part::kGate},
        {&names.up, kernels::Int4Part::kUp},
        {&names.down, kernels::Int4Part::kDown}};
    for (const auto& [name, part] : parts) {
      MOESERVE_ASSIGN_OR_RETURN(
          Int4LinearTensors t, FindInt4LinearTensors(q, ModuleOf(*name), find));
      MOESERVE_RETURN_IF_ERROR(ImportInt4ExpertPart(q, t, *int4_, part, dst));
    }
    return absl::OkStatus();
  }
  const QuantizationConfig& q = config_->quantization;
  const auto find = Lookup(files);
  const std::pair<const std::string*, kernels::Fp8Part> parts[] = {
      {&names.gate, kernels::Fp8Part::kGate},
      {&names.up, kernels::Fp8Part::kUp},
      {&names.down, kernels::Fp8Part::kDown}};
  for (const auto& [name, part] : parts) {
    MOESERVE_ASSIGN_OR_RETURN(Fp8LinearTensors t,
                              FindFp8LinearTensors(q, ModuleOf(*name), find));
    MOESERVE_RETURN_IF_ERROR(ImportFp8ExpertPart(q, t, *fp8_, part, dst));
  }
  return absl::OkStatus();
}

absl::Status LoadAsBf16(const ShardedSafetensors& files,
                        const ModelConfig& config, const TensorSpec& spec,
                        std::vector<uint16_t>* out) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  std::optional<ShardedSafetensors::Located> loc = files.Find(spec.name);
  if (loc &&
      (loc->info->dtype == DType::kBF16 || loc->info->dtype == DType::kF16)) {
    MOESERVE_ASSIGN_OR_RETURN(const TensorInfo* t,
                              FindFloat(files, spec.name, spec.shape));
    out->resize(n);
    return CopyAsBf16(*t, out->data());
  }
  const QuantizationConfig& q = config.quantization;
  if (q.quantized() && q.int4() && spec.shape.size() == 2) {
    const auto find = Lookup(files);
    MOESERVE_ASSIGN_OR_RETURN(
        Int4LinearTensors t,
        FindInt4LinearTensors(q, ModuleOf(spec.name), find));
    out->resize(n);
    return DequantizeInt4Linear(q, t, spec.shape[0], spec.shape[1],
                                out->data());
  }
  if (q.quantized() && q.fp8() && spec.shape.size() == 2 && loc &&
      loc->info->dtype == DType::kF8E4M3) {
    const auto find = Lookup(files);
    MOESERVE_ASSIGN_OR_RETURN(
        Fp8LinearTensors t, FindFp8LinearTensors(q, ModuleOf(spec.name), find));
    out->resize(n);
    return DequantizeFp8Linear(q, t, spec.shape[0], spec.shape[1], out->data());
  }
  MOESERVE_ASSIGN_OR_RETURN(const TensorInfo* t,
                            FindFloat(files, spec.name, spec.shape));
  (void)t;
  return absl::InternalError("unreachable");
}

}  // namespace moeserve::engine::quant
