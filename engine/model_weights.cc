#include "engine/model_weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/architecture.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {
namespace {

constexpr size_t kAlign = 64;
// Arenas of at least this many bytes are aligned to it and asked for
// transparent huge pages: a tenth of the first-touch page faults when a
// large model's experts are copied or generated in.
constexpr size_t kHugePage = size_t{2} << 20;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Finds `spec` in the shards and checks dtype and shape.
absl::StatusOr<WeightView> CheckTensor(const ShardedSafetensors& files,
                                       const TensorSpec& spec,
                                       absl::string_view model_type) {
  std::optional<ShardedSafetensors::Located> loc = files.Find(spec.name);
  if (!loc) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing tensor \"", spec.name, "\" (", model_type,
                     " config implies shape ", ShapeString(spec.shape), ")"));
  }
  const TensorInfo& t = *loc->info;
  const std::string where = absl::StrCat(files.shard(loc->shard).path(),
                                         ": tensor \"", spec.name, "\": ");
  if (t.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "dtype ", DTypeName(t.dtype),
                     " is not supported (BF16 or F16 weights, or a "
                     "quantization_config that describes them)"));
  }
  if (t.shape != spec.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "wrong shape ", ShapeString(t.shape),
                     ", config implies ", ShapeString(spec.shape)));
  }
  return WeightView{t.data,        t.dtype,     t.shape,
                    t.file_offset, t.byte_size, loc->shard};
}

// Index of the first NaN or Inf among the `n` bf16 values at `data` (any
// alignment), or n. A bf16 is not finite when all 8 exponent bits are set,
// i.e. (bits & 0x7FFF) >= 0x7F80; a max-reduction per block vectorises.
size_t FirstNonFiniteBf16(const void* data, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  auto at = [bytes](size_t i) {
    uint16_t v;
    std::memcpy(&v, bytes + 2 * i, 2);
    return static_cast<uint16_t>(v & 0x7FFF);
  };
  // The common case, 2-byte aligned data (safetensors offsets of bf16
  // tensors), as a plain array: the block's max vectorises.
  const auto* aligned = reinterpret_cast<uintptr_t>(data) % 2 == 0
                            ? static_cast<const uint16_t*>(data)
                            : nullptr;
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    uint16_t most = 0;
    if (aligned != nullptr) {
      for (size_t i = begin; i < end; ++i) {
        most = std::max<uint16_t>(most, aligned[i] & 0x7FFF);
      }
    } else {
      for (size_t i = begin; i < end; ++i) most = std::max(most, at(i));
    }
    if (most < 0x7F80) continue;
    for (size_t i = begin; i < end; ++i) {
      if (at(i) >= 0x7F80) return i;
    }
  }
  return n;
}

// Refuses a weight holding NaN or Inf: served, it turns every output into
// garbage (issue 16). The message names the tensor and the element.
absl::Status CheckFinite(const ShardedSafetensors& files, const WeightView& v,
                         absl::string_view name) {
  const size_t n = v.bytes / 2;
  const size_t i = FirstNonFiniteBf16(v.data, n);
  if (i == n) return absl::OkStatus();
  uint16_t bits;
  std::memcpy(&bits, static_cast<const unsigned char*>(v.data) + 2 * i, 2);
  return absl::InvalidArgumentError(absl::StrCat(
      v.shard >= 0 ? files.shard(v.shard).path() : "(converted at load)",
      ": tensor \"", name, "\": element ", i, " is ",
      (bits & 0x007F) != 0 ? "NaN" : "Inf", "; the weights must be finite"));
}

// The layer index of a tensor named "...layers.<n>.<rest>", if any.
std::optional<int64_t> LayerOf(absl::string_view name) {
  constexpr absl::string_view kLayers = "layers.";
  const size_t at = name.find(kLayers);
  if (at == absl::string_view::npos) return std::nullopt;
  size_t i = at + kLayers.size();
  int64_t layer = 0;
  const size_t start = i;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) &&
         i - start < 9) {
    layer = layer * 10 + (name[i] - '0');
    ++i;
  }
  if (i == start || i >= name.size() || name[i] != '.') return std::nullopt;
  return layer;
}

ExpertSource SourceOf(const WeightView& v) {
  return {v.shard, v.file_offset, v.bytes};
}

// Layout shared by every expert of a model (see the header): the codec's.
ExpertBlob BlobLayout(const quant::ExpertCodec& codec) {
  ExpertBlob b;
  b.bytes = codec.blob_bytes();
  b.gate_offset = codec.part(0).offset;
  b.gate_bytes = codec.part(0).bytes;
  b.up_offset = codec.part(1).offset;
  b.up_bytes = codec.part(1).bytes;
  b.down_offset = codec.part(2).offset;
  b.down_bytes = codec.part(2).bytes;
  return b;
}

// CheckFinite for an expert filled in memory: the message names the tensor
// the matrix stands for.
absl::Status CheckFiniteBlob(const ModelConfig& c, const ExpertBlob& b,
                             int layer, int e) {
  const ExpertTensorNames n = c.architecture->ExpertNames(layer, e);
  const std::pair<const std::string*, size_t> matrices[] = {
      {&n.gate, b.gate_offset}, {&n.up, b.up_offset}, {&n.down, b.down_offset}};
  for (const auto& [name, offset] : matrices) {
    const size_t values = b.gate_bytes / 2;  // == up, down
    const size_t i = FirstNonFiniteBf16(b.data + offset, values);
    if (i == values) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "expert tensor \"", *name, "\" (as packed in memory): element ", i,
        " is not finite; the weights must be finite"));
  }
  return absl::OkStatus();
}

}  // namespace

void ModelWeights::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Load(
    const std::string& model_dir, const LoadOptions& options) {
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  MOESERVE_ASSIGN_OR_RETURN(w->config_, LoadModelConfig(model_dir));
  MOESERVE_ASSIGN_OR_RETURN(w->files_, ShardedSafetensors::Open(model_dir));
  MOESERVE_RETURN_IF_ERROR(w->CheckLayerCount());
  MOESERVE_RETURN_IF_ERROR(w->LoadNonExperts(options.check_finite));
  MOESERVE_RETURN_IF_ERROR(
      w->LoadExperts(options.pack_experts, options.check_finite));
  w->FindUnexpected();
  return w;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::FromMemory(
    const std::string& config_json,
    std::unique_ptr<SafetensorsFile> non_experts,
    const ExpertArenaFiller& fill_experts, const LoadOptions& options) {
  if (!options.pack_experts) {
    return absl::InvalidArgumentError(
        "weights built in memory always pack their experts "
        "(LoadOptions.pack_experts false needs model files)");
  }
  if (non_experts == nullptr || !fill_experts) {
    return absl::InvalidArgumentError(
        "FromMemory needs a non-expert image and an expert filler");
  }
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->has_files_ = false;
  MOESERVE_ASSIGN_OR_RETURN(w->config_, ParseModelConfig(config_json));
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::move(non_experts));
  MOESERVE_ASSIGN_OR_RETURN(w->files_,
                            ShardedSafetensors::FromFiles(std::move(files)));
  MOESERVE_RETURN_IF_ERROR(w->CheckLayerCount());
  MOESERVE_RETURN_IF_ERROR(w->LoadNonExperts(options.check_finite));
  MOESERVE_RETURN_IF_ERROR(w->FillExperts(fill_experts, options.check_finite));
  w->FindUnexpected();
  return w;
}

absl::Status ModelWeights::AllocateArena(size_t bytes) {
  const size_t align = bytes >= kHugePage ? kHugePage : kAlign;
  const size_t size = (bytes + align - 1) / align * align;
  arena_.reset(static_cast<std::byte*>(std::aligned_alloc(align, size)));
  if (arena_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes for experts"));
  }
  // A hint; where transparent huge pages are off it changes nothing.
  if (align == kHugePage) madvise(arena_.get(), size, MADV_HUGEPAGE);
  return absl::OkStatus();
}

absl::Status ModelWeights::CheckLayerCount() const {
  for (const std::string& name : files_->TensorNames()) {
    const std::optional<int64_t> layer = LayerOf(name);
    if (layer.has_value() && *layer >= config_.num_hidden_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: field \"num_hidden_layers\" = ",
                       config_.num_hidden_layers,
                       " disagrees with the weights, which hold "
                       "layer ",
                       *layer, " (tensor \"", name, "\")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelWeights::LoadNonExperts(bool check_finite) {
  const Architecture& arch = *config_.architecture;
  for (const TensorSpec& spec : arch.NonExpertTensors(config_)) {
    std::optional<ShardedSafetensors::Located> loc = files_->Find(spec.name);
    const bool stored_bf16 = loc && loc->info->dtype == DType::kBF16;
    const bool convertible = (loc && loc->info->dtype == DType::kF16) ||
                             (config_.quantization.quantized() && !stored_bf16);
    WeightView v;
    if (convertible) {
      // F16, or a quantized Linear: bf16 in memory this object owns.
      std::vector<uint16_t> bf16;
      MOESERVE_RETURN_IF_ERROR(
          quant::LoadAsBf16(*files_, config_, spec, &bf16));
      v = WeightView{bf16.data(), DType::kBF16,    spec.shape,
                     0,           bf16.size() * 2, /*shard=*/-1};
      converted_.push_back(std::move(bf16));
    } else {
      MOESERVE_ASSIGN_OR_RETURN(v,
                                CheckTensor(*files_, spec, config_.model_type));
    }
    if (check_finite) {
      MOESERVE_RETURN_IF_ERROR(CheckFinite(*files_, v, spec.name));
    }
    non_expert_bytes_ += v.bytes;
    weights_.emplace(spec.name, std::move(v));
  }
  return absl::OkStatus();
}

absl::Status ModelWeights::LoadExperts(bool pack, bool check_finite) {
  MOESERVE_ASSIGN_OR_RETURN(quant::ExpertCodec codec,
                            quant::ExpertCodec::Create(config_, *files_));
  expert_format_ = codec.format();
  expert_format_description_ = codec.Describe();
  if (codec.int4_layout() != nullptr) int4_layout_ = *codec.int4_layout();
  if (codec.fp8_layout() != nullptr) fp8_layout_ = *codec.fp8_layout();
  if (!codec.blob_is_file_bytes()) {
    if (!pack) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the experts of this checkpoint are ", codec.Describe(),
          ", converted at load into memory; a disk slow tier reads BF16 "
          "experts straight from the files (use slow_tier host)"));
    }
    return PackConverted(codec, check_finite);
  }
  const ModelConfig& c = config_;
  const ExpertBlob layout = BlobLayout(codec);
  const size_t count = static_cast<size_t>(c.num_hidden_layers) * c.num_experts;
  if (pack) MOESERVE_RETURN_IF_ERROR(AllocateArena(count * layout.bytes));
  const int64_t ffn = c.expert_intermediate_size, hidden = c.hidden_size;
  experts_.reserve(count);
  for (int layer = 0; layer < num_layers(); ++layer) {
    for (int e = 0; e < num_experts(); ++e) {
      const ExpertTensorNames n = c.architecture->ExpertNames(layer, e);
      MOESERVE_ASSIGN_OR_RETURN(
          WeightView gate,
          CheckTensor(*files_, {n.gate, {ffn, hidden}}, c.model_type));
      MOESERVE_ASSIGN_OR_RETURN(
          WeightView up,
          CheckTensor(*files_, {n.up, {ffn, hidden}}, c.model_type));
      MOESERVE_ASSIGN_OR_RETURN(
          WeightView down,
          CheckTensor(*files_, {n.down, {hidden, ffn}}, c.model_type));
      if (check_finite) {
        MOESERVE_RETURN_IF_ERROR(CheckFinite(*files_, gate, n.gate));
        MOESERVE_RETURN_IF_ERROR(CheckFinite(*files_, up, n.up));
        MOESERVE_RETURN_IF_ERROR(CheckFinite(*files_, down, n.down));
      }
      ExpertBlob b = layout;
      b.gate_source = SourceOf(gate);
      b.up_source = SourceOf(up);
      b.down_source = SourceOf(down);
      if (pack) {
        std::byte* dst = arena_.get() + experts_.size() * layout.bytes;
        std::memset(dst, 0, layout.bytes);
        std::memcpy(dst + b.gate_offset, gate.data, b.gate_bytes);
        std::memcpy(dst + b.up_offset, up.data, b.up_bytes);
        std::memcpy(dst + b.down_offset, down.data, b.down_bytes);
        b.data = dst;
      }
      experts_.push_back(b);
      expert_bytes_ += b.bytes;
    }
  }
  return absl::OkStatus();
}

absl::Status ModelWeights::FillExperts(const ExpertArenaFiller& fill,
                                       bool check_finite) {
  const ExpertBlob layout = BlobLayout(quant::ExpertCodec::Bf16(config_));
  const size_t count =
      static_cast<size_t>(config_.num_hidden_layers) * config_.num_experts;
  MOESERVE_RETURN_IF_ERROR(AllocateArena(count * layout.bytes));
  MOESERVE_RETURN_IF_ERROR(fill(config_, layout, arena_.get()));
  experts_.reserve(count);
  for (int layer = 0; layer < num_layers(); ++layer) {
    for (int e = 0; e < num_experts(); ++e) {
      ExpertBlob b = layout;
      b.data = arena_.get() + experts_.size() * layout.bytes;
      if (check_finite) {
        MOESERVE_RETURN_IF_ERROR(CheckFiniteBlob(config_, b, layer, e));
      }
      experts_.push_back(b);
      expert_bytes_ += b.bytes;
    }
  }
  return absl::OkStatus();
}

absl::Status ModelWeights::PackConverted(const quant::ExpertCodec& codec,
                                         bool check_finite) {
  experts_in_files_ = false;
  const size_t bytes = codec.blob_bytes();
  const size_t count =
      static_cast<size_t>(config_.num_hidden_layers) * config_.num_experts;
  MOESERVE_RETURN_IF_ERROR(AllocateArena(count * bytes));
  // Every expert on its own: threads take experts in turn.
  const unsigned threads =
      std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 32);
  std::atomic<size_t> next{0};
  std::vector<absl::Status> errors(threads);
  auto work = [&](unsigned t) {
    for (size_t i = next++; i < count; i = next++) {
      const int layer = static_cast<int>(i / config_.num_experts);
      const int e = static_cast<int>(i % config_.num_experts);
      absl::Status st =
          codec.Pack(*files_, config_.architecture->ExpertNames(layer, e),
                     arena_.get() + i * bytes);
      if (!st.ok()) {
        errors[t] = st;
        next = count;  // stop the others soon
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  for (const absl::Status& st : errors) MOESERVE_RETURN_IF_ERROR(st);
  const ExpertBlob layout = BlobLayout(codec);
  experts_.reserve(count);
  for (int layer = 0; layer < num_layers(); ++layer) {
    for (int e = 0; e < num_experts(); ++e) {
      ExpertBlob b = layout;
      b.data = arena_.get() + experts_.size() * bytes;
      if (check_finite && codec.format() == quant::ExpertFormat::kBf16) {
        MOESERVE_RETURN_IF_ERROR(CheckFiniteBlob(config_, b, layer, e));
      }
      experts_.push_back(b);
      expert_bytes_ += b.bytes;
    }
  }
  return absl::OkStatus();
}

void ModelWeights::FindUnexpected() {
  std::set<std::string> expected;
  for (const auto& [name, view] : weights_) expected.insert(name);
  for (int layer = 0; layer < num_layers(); ++layer) {
    for (int e = 0; e < num_experts(); ++e) {
      ExpertTensorNames n = config_.architecture->ExpertNames(layer, e);
      expected.insert({n.gate, n.up, n.down});
    }
  }
  for (const std::string& name : files_->TensorNames()) {
    if (!expected.count(name)) unexpected_.push_back(name);
  }
  if (!unexpected_.empty()) {
    spdlog::warn(
        "model has {} tensors the config does not use (ignored), "
        "first: {}",
        unexpected_.size(), unexpected_.front());
  }
}

const WeightView* ModelWeights::Find(absl::string_view name) const {
  auto it = weights_.find(name);
  return it == weights_.end() ? nullptr : &it->second;
}

std::vector<std::string> ModelWeights::NonExpertNames() const {
  std::vector<std::string> names;
  for (const auto& [name, view] : weights_) names.push_back(name);
  return names;
}

const ExpertBlob& ModelWeights::expert(ExpertId id) const {
  return experts_[static_cast<size_t>(id.layer) * num_experts() + id.expert];
}

const std::string& ModelWeights::shard_path(int shard) const {
  return files_->shard(shard).path();
}

}  // namespace moeserve::engine
