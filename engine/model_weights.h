#ifndef MOESERVE_ENGINE_MODEL_WEIGHTS_H_
#define MOESERVE_ENGINE_MODEL_WEIGHTS_H_

// ModelWeights: every weight of a Hugging Face MoE model directory
// (config.json + model.safetensors or sharded *.safetensors with an index),
// checked against the shapes its config implies; or (FromMemory) of a model
// that never was files, e.g. a generated benchmark model.
//
// Ownership: owns the ModelConfig, the mmapped shard files (FromMemory: one
// in-memory safetensors image of the non-expert weights) and one 64-byte
// aligned arena holding every packed expert. Non-expert weights are
// WeightViews into the mmapped files or the image (zero copy); they and the
// expert blobs stay valid for the object's lifetime.
//
// Expert blob layout (the unit a slow tier moves in one transfer), all bf16,
// row-major exactly as the Hugging Face Linear weight [out, in]:
//
//   offset 0            gate  [ffn, hidden]
//   up_offset           up    [ffn, hidden]
//   down_offset         down  [hidden, ffn]
//   bytes               (end, padded)
//
// Each matrix starts on a 64-byte boundary (offsets are the previous end
// rounded up to 64); `bytes` is a multiple of 64. All experts of a model share
// the same offsets and size; blob (layer, expert) lives at arena +
// (layer * num_experts + expert) * bytes.
//
// Checks (every refusal is an absl::Status naming file, tensor and reason):
//   - every tensor the config implies exists, with dtype BF16 (other dtypes
//     are refused: "only BF16 is supported"), and exactly the implied shape;
//   - every value of every weight is finite (no NaN, no Inf): one
//     vectorised pass over the bytes at load (LoadOptions::check_finite);
//   - no tensor belongs to a layer at or beyond num_hidden_layers (a config
//     with fewer layers than the weights would serve a truncated model);
//   - other tensors the config does not imply are ignored with a warning and
//     listed by unexpected_tensors() (older checkpoints carry e.g. rotary
//     inv_freq buffers).
//
// Other stored forms (engine/quant/expert_codec.h): F16 tensors are served
// as bf16 (each value rounded to the nearest bf16); a quantized checkpoint
// (config.json quantization_config) keeps its experts quantized in their
// blobs (expert_format() kInt4 or kFp8: the offsets above then point at
// each part's values and the *_bytes count a part's values, scales and
// zero points) and has its non-expert Linear layers dequantized to bf16.
// Only bf16 experts stored as BF16 are readable from the files
// (experts_in_files()); the others exist only in the packed arena, so
// Load refuses pack_experts = false for them.
//
// FromMemory weights pass the same checks (every tensor, dtype, shape, layer
// count; finite values when asked, over the arena too) but have no files:
// has_files() is false, their ExpertSources are empty (bytes 0) and a disk
// slow tier cannot read them.
//
// Thread-safety: immutable after Load / FromMemory; all const methods are
// thread-safe.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/dtype.h"
#include "engine/model_config.h"
#include "engine/quant/expert_codec.h"
#include "engine/safetensors.h"

namespace moeserve::engine {

// A non-expert weight: a view into the mmapped file, or into memory the
// ModelWeights owns for a converted tensor (then shard is -1).
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  uint64_t file_offset = 0;  // Absolute offset in shard_path(shard).
  size_t bytes = 0;
  int shard = 0;
};

struct ExpertId {
  int layer = 0;
  int expert = 0;
  friend bool operator==(const ExpertId&, const ExpertId&) = default;
};

// Where one expert matrix lives in the model files (for pread).
struct ExpertSource {
  int shard = 0;
  uint64_t file_offset = 0;
  size_t bytes = 0;
};

struct ExpertBlob {
  const std::byte* data = nullptr;  // 64-byte aligned; null if not packed.
  size_t bytes = 0;                 // Padded size, multiple of 64.
  size_t gate_offset = 0;           // Always 0.
  size_t up_offset = 0;
  size_t down_offset = 0;
  size_t gate_bytes = 0;  // == up_bytes == ffn * hidden * 2.
  size_t up_bytes = 0;
  size_t down_bytes = 0;  // hidden * ffn * 2.
  ExpertSource gate_source, up_source, down_source;
};

struct LoadOptions {
  // Copy every expert into the packed arena. When false (a disk slow tier
  // that preads the ExpertSources), blobs carry layout and sources only and
  // `data` is null. Default: true.
  bool pack_experts = true;
  // Refuse weights holding NaN or Inf (a read of every weight byte at load;
  // ~17 ms on the demo model's 35 MB, mostly first-touch faults of
  // the mmapped weights). Default: true.
  bool check_finite = true;
};

// Writes every expert of a FromMemory model into the packed arena: blob
// (layer, expert) at arena + (layer * num_experts + expert) * layout.bytes,
// its matrices at layout's offsets (see the layout above). REQUIRES: writes
// all num_hidden_layers * num_experts * layout.bytes bytes (padding zero);
// may use threads, but returns only when every write is done. The arena is
// fresh, untouched memory: the filler's writes are its first touch.
using ExpertArenaFiller = std::function<absl::Status(
    const ModelConfig& config, const ExpertBlob& layout, std::byte* arena)>;

class ModelWeights {
 public:
  static absl::StatusOr<std::unique_ptr<ModelWeights>> Load(
      const std::string& model_dir, const LoadOptions& options = {});

  // Weights without files: the config parsed from `config_json` (a
  // config.json text), the non-expert tensors from `non_experts` (an
  // in-memory safetensors image, SafetensorsFile::FromBuffer or
  // FromOwnedBuffer, holding every non-expert tensor the config implies;
  // ownership passes to the result), the experts written by `fill_experts`.
  // Checks as Load (options.check_finite also scans the filled arena);
  // options.pack_experts must be true. Errors: the config's, the image's
  // (missing tensor, dtype, shape, non-finite value), the filler's, or
  // ResourceExhausted when the arena cannot be allocated.
  static absl::StatusOr<std::unique_ptr<ModelWeights>> FromMemory(
      const std::string& config_json,
      std::unique_ptr<SafetensorsFile> non_experts,
      const ExpertArenaFiller& fill_experts, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }

  // nullptr when `name` is not a (non-expert) weight of the model.
  const WeightView* Find(absl::string_view name) const;
  // Names of the non-expert weights, sorted.
  std::vector<std::string> NonExpertNames() const;

  // REQUIRES: 0 <= id.layer < num_layers(), 0 <= id.expert < num_experts().
  const ExpertBlob& expert(ExpertId id) const;
  int num_layers() const { return static_cast<int>(config_.num_hidden_layers); }
  int num_experts() const { return static_cast<int>(config_.num_experts); }

  // Sum of the padded expert blob sizes.
  uint64_t expert_bytes() const { return expert_bytes_; }
  // Sum of the non-expert weight sizes.
  uint64_t non_expert_bytes() const { return non_expert_bytes_; }

  // False for FromMemory weights: nothing on disk to pread (shard_path(0)
  // is then the image's name, not a file).
  bool has_files() const { return has_files_; }
  // True when every expert blob is its BF16 tensors byte for byte in the
  // files (ExpertSources valid): what a disk slow tier needs.
  bool experts_in_files() const { return has_files_ && experts_in_files_; }
  quant::ExpertFormat expert_format() const { return expert_format_; }
  // kInt4: the layout of every expert blob; null otherwise.
  const kernels::Int4ExpertLayout* int4_layout() const {
    return int4_layout_ ? &*int4_layout_ : nullptr;
  }
  // kFp8: the layout of every expert blob; null otherwise.
  const kernels::Fp8ExpertLayout* fp8_layout() const {
    return fp8_layout_ ? &*fp8_layout_ : nullptr;
  }
  // How the experts are stored, e.g. "bf16", "bf16 (from F16)",
  // "int4 (gptq int4, group 32, zero points)".
  const std::string& expert_format_description() const {
    return expert_format_description_;
  }
  const std::string& shard_path(int shard) const;
  const ShardedSafetensors& files() const { return *files_; }
  const std::vector<std::string>& unexpected_tensors() const {
    return unexpected_;
  }

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };

  ModelWeights() = default;
  absl::Status CheckLayerCount() const;
  absl::Status LoadNonExperts(bool check_finite);
  absl::Status LoadExperts(bool pack, bool check_finite);
  absl::Status FillExperts(const ExpertArenaFiller& fill, bool check_finite);
  // Experts the codec converts (F16, quantized) into a fresh arena, on
  // every hardware thread (at most 32).
  absl::Status PackConverted(const quant::ExpertCodec& codec,
                             bool check_finite);
  absl::Status AllocateArena(size_t bytes);
  void FindUnexpected();

  ModelConfig config_;
  std::unique_ptr<ShardedSafetensors> files_;
  std::map<std::string, WeightView, std::less<>> weights_;
  std::vector<ExpertBlob> experts_;  // [layer * num_experts + expert]
  std::unique_ptr<std::byte, FreeDeleter> arena_;
  uint64_t expert_bytes_ = 0;
  uint64_t non_expert_bytes_ = 0;
  std::vector<std::string> unexpected_;
  bool has_files_ = true;
  bool experts_in_files_ = true;
  quant::ExpertFormat expert_format_ = quant::ExpertFormat::kBf16;
  std::optional<kernels::Int4ExpertLayout> int4_layout_;
  std::optional<kernels::Fp8ExpertLayout> fp8_layout_;
  std::string expert_format_description_ = "bf16";
  // Non-expert weights converted at load (F16, dequantized): the
  // WeightViews of those point here.
  std::vector<std::vector<uint16_t>> converted_;
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_MODEL_WEIGHTS_H_
