#include "engine/builder/engine_settings.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moeserve::engine {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A field's value as a SettingValue, and back.
template <typename T>
SettingValue Wrap(const T& field) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(field);
  } else {
    return field;
  }
}

template <typename T>
void Unwrap(const SettingValue& value, T* field) {
  if constexpr (std::is_integral_v<T>) {
    *field = static_cast<T>(std::get<int64_t>(value));
  } else {
    *field = std::get<T>(value);
  }
}

// EngineSpec::*kMember, or EngineSpec::link.*kMember.
template <auto kMember>
SettingAccess Field() {
  return {
      [](const EngineSpec& s) { return Wrap(s.*kMember); },
      [](const SettingValue& v, EngineSpec* s) { Unwrap(v, &(s->*kMember)); }};
}

template <auto kMember>
SettingAccess LinkField() {
  return {[](const EngineSpec& s) { return Wrap(s.link.*kMember); },
          [](const SettingValue& v, EngineSpec* s) {
            Unwrap(v, &(s->link.*kMember));
          }};
}

// kv_cache_mb <-> kv_cache_bytes. Flags and files give whole MiB; any other
// byte count reads as a fraction, so the range check stays exact in bytes.
SettingAccess KvCacheMb() {
  return {[](const EngineSpec& s) -> SettingValue {
            if (s.kv_cache_bytes % kMiB == 0) {
              return static_cast<int64_t>(s.kv_cache_bytes / kMiB);
            }
            return static_cast<double>(s.kv_cache_bytes) / kMiB;
          },
          [](const SettingValue& v, EngineSpec* s) {
            s->kv_cache_bytes = static_cast<uint64_t>(std::get<int64_t>(v))
                                << 20;
          }};
}

const std::vector<EngineSetting>& Table() {
  static const auto* const table = new std::vector<EngineSetting>{
      {.name = "expert_cache_ratio",
       .type = SettingType::kDouble,
       .range = {.min = 0, .max = 1, .min_exclusive = true},
       .access = Field<&EngineSpec::expert_cache_ratio>(),
       .help = "Fast-tier (expert cache) budget as a share of all expert "
               "bytes, in (0, 1]. Ignored when --expert_cache_mb is set."},
      {.name = "expert_cache_mb",
       .type = SettingType::kInt,
       .range = {.min = 1,
                 .max = static_cast<double>(kMaxExpertCacheMb),
                 .special = 0,
                 .unit = "MiB",
                 .note = "0: use expert_cache_ratio"},
       .access = Field<&EngineSpec::expert_cache_mb>(),
       .help = "Fast-tier (expert cache) budget in MiB per engine (0: use "
               "--expert_cache_ratio)."},
      {.name = "slow_tier",
       .type = SettingType::kString,
       .choices = {"host", "disk"},
       .access = Field<&EngineSpec::slow_tier>(),
       .help = "Where every expert lives: host (RAM) or disk (the "
               "safetensors files, read with pread; O_DIRECT where the "
               "filesystem allows)."},
      {.name = "link_gbps",
       .type = SettingType::kDouble,
       .range = {.min = kMinLinkGbps,
                 .max = kMaxLinkGbps,
                 .special = 0,
                 .special_text = "0 (off)",
                 .unit = "GB/s"},
       .access = LinkField<&LinkOptions::gbps>(),
       .help = "Emulated slow-to-fast link bandwidth in GB/s (1e9 bytes/s), "
               "to reproduce a GPU's PCIe transfer/compute ratio on a CPU "
               "run. 0: off (the real copy speed)."},
      {.name = "link_latency_us",
       .type = SettingType::kDouble,
       .range = {.min = 0, .max = kMaxLinkLatencyUs},
       .access = LinkField<&LinkOptions::latency_us>(),
       .help = "Emulated per-transfer link latency in microseconds."},
      {.name = "inplace_compute_ratio",
       .type = SettingType::kDouble,
       .range = {.min = 1, .max = kMaxInplaceComputeRatio},
       .access = LinkField<&LinkOptions::inplace_compute_ratio>(),
       .help = "Emulated slow-tier/fast-tier compute time ratio for experts "
               "a policy computes in place (utility): they take ratio x "
               "their measured CPU time, overlapped with the rest of their "
               "layer, as a CPU computing next to a GPU would. >= 1; 1 = no "
               "charge."},
      {.name = "kv_cache_mb",
       .type = SettingType::kInt,
       .range = {.min = 1, .max = static_cast<double>(kMaxKvCacheBytes >> 20)},
       .access = KvCacheMb(),
       .help = "Paged KV cache size per engine, MiB."},
      {.name = "max_num_seqs",
       .type = SettingType::kInt,
       .range = {.min = 1, .max = kMaxNumSeqs},
       .access = Field<&EngineSpec::max_num_seqs>(),
       .help = "Most sequences in one engine step."},
      {.name = "max_batched_tokens",
       .type = SettingType::kInt,
       .range = {.min = 1, .max = kMaxBatchedTokens},
       .access = Field<&EngineSpec::max_batched_tokens>(),
       .help = "Most tokens (decode + prefill chunks) in one engine step."},
      // 0 would refuse every request, the engine's own warm-up included:
      // the server would never become ready.
      {.name = "max_waiting",
       .type = SettingType::kInt,
       .range = {.min = 1, .max = kMaxWaiting},
       .access = Field<&EngineSpec::max_waiting>(),
       .help = "Most requests waiting per engine; beyond it, "
               "RESOURCE_EXHAUSTED."},
      {.name = "max_running_per_caller",
       .type = SettingType::kInt,
       .range = {.min = 0, .max = kMaxNumSeqs},
       .access = Field<&EngineSpec::max_running_per_caller>(),
       .help = "Most requests of one caller (its token, else its "
               "connection) running at once per engine; the rest wait while "
               "other callers' requests are admitted. 0: no limit."},
      {.name = "max_waiting_per_caller",
       .type = SettingType::kInt,
       .range = {.min = 0, .max = kMaxWaiting},
       .access = Field<&EngineSpec::max_waiting_per_caller>(),
       .help = "Most requests of one caller waiting per engine; beyond it, "
               "RESOURCE_EXHAUSTED. 0: no limit."},
      // Any string here: CheckEngineSpec asks the drafter registry.
      {.name = "drafter",
       .type = SettingType::kString,
       .access = Field<&EngineSpec::drafter>(),
       .help = "Speculative decoding drafter of every engine: a registered "
               "drafter (self: the target restricted to its resident "
               "experts; int4: an int4 copy of every expert), none (no "
               "speculation, even for self_spec), or empty for each "
               "policy's own (self_spec: self; quant_draft: int4; the "
               "others: none). Engines in --engines_config may set their "
               "own \"drafter\"."},
      {.name = "num_speculative_tokens",
       .type = SettingType::kInt,
       .range = {.min = 0,
                 .max = kMaxSpeculativeTokens,
                 .special = -1,
                 .special_is_unset = true,
                 .unset_note = "leave it out for the policy's own",
                 .note = "0: adaptive"},
       .access = Field<&EngineSpec::num_speculative_tokens>(),
       .help = "Draft tokens per speculative step, 1 to 16 (fixed); 0: "
               "adaptive (per sequence, from the acceptance rate); -1: the "
               "policy's own (self_spec: its num_speculative_tokens config, "
               "4 by default; quant_draft and the others: adaptive, "
               "quant_draft's from its governor). Only matters with a "
               "drafter."},
      {.name = "draft_model_dir",
       .type = SettingType::kString,
       .access = Field<&EngineSpec::draft_model_dir>(),
       .flag_default = std::string("models/demo-draft"),
       .help = "Model directory of the external drafter (drafter "
               "external: a separate dense draft model on the target's "
               "tokenizer; cutoff, utility and throughput use it by "
               "default)."},
      {.name = "cpu_moe_layers",
       .type = SettingType::kInt,
       .range = {.min = 0, .max = 4096},
       .access = Field<&EngineSpec::cpu_moe_layers>(),
       .help = "Hybrid CPU/GPU execution: the experts of the first N MoE "
               "layers stay in host memory and the CPU computes them there "
               "(as llama.cpp's --n-cpu-moe); they take no fast-tier slot "
               "and move nothing over the link. 0: off. At most the model's "
               "layer count."},
      {.name = "host_expert_threads",
       .type = SettingType::kInt,
       .range = {.min = 0, .max = 1024},
       .access = Field<&EngineSpec::host_expert_threads>(),
       .help = "Threads of the pool that computes experts on the host "
               "(--cpu_moe_layers, and experts a policy computes in place: "
               "utility, cpu_cold) on a GPU backend; its own pool, apart from "
               "the scheduler's and gRPC's threads (also the host "
               "attention pool's size). 0: half the cores."},
      {.name = "host_attention",
       .type = SettingType::kInt,
       .range = {.min = 0, .max = 1, .note = "0: off, 1: on"},
       .access = Field<&EngineSpec::host_attention>(),
       .help = "1: the KV cache lives in host memory and the CPU computes "
               "attention over it (SpecMoEOff's CPU attention) while the "
               "device runs the dense layers and the experts; q/k/v rows go "
               "down and attention rows come up every layer. On a GPU (or "
               "--fast_tier_in_backend_memory) the --kv_cache_mb the device "
               "no longer holds is added to the expert cache budget. 0: "
               "attention and KV cache on the device."},
      {.name = "draft_budget",
       .type = SettingType::kString,
       .choices = {"shared", "extra"},
       .access = Field<&EngineSpec::draft_budget>(),
       .help = "Where a drafter's own expert weights (the int4 draft's "
               "pool, quant_draft's default) come from: shared (out of each "
               "engine's --expert_cache_ratio / --expert_cache_mb budget: "
               "the same-memory comparison; an engine whose budget cannot "
               "hold the draft plus one expert is refused) or extra (on top "
               "of it: the same expert cache). Engines in --engines_config "
               "may set their own \"draft_budget\"."},
  };
  return *table;
}

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

std::string BoundText(SettingType type, double bound) {
  return type == SettingType::kInt ? absl::StrCat(static_cast<int64_t>(bound))
                                   : absl::StrCat(bound);
}

// "must be [SPECIAL or ]in [MIN, MAX][ UNIT][ (NOTE)]".
std::string RangeText(const EngineSetting& s, SettingSource source) {
  const NumericRange& r = s.range;
  std::string text = "must be ";
  if (!r.special_text.empty()) absl::StrAppend(&text, r.special_text, " or ");
  absl::StrAppend(&text, "in ", r.min_exclusive ? "(" : "[",
                  BoundText(s.type, r.min), ", ", BoundText(s.type, r.max),
                  "]");
  if (!r.unit.empty()) absl::StrAppend(&text, " ", r.unit);
  std::string note(r.note);
  if (source == SettingSource::kFile && !r.unset_note.empty()) {
    note = note.empty() ? std::string(r.unset_note)
                        : absl::StrCat(note, "; ", r.unset_note);
  }
  if (!note.empty()) absl::StrAppend(&text, " (", note, ")");
  return text;
}

bool InRange(const NumericRange& r, double v, SettingSource source) {
  if (r.special.has_value() && v == *r.special) {
    return !(r.special_is_unset && source == SettingSource::kFile);
  }
  // NaN fails both comparisons: refused.
  return (r.min_exclusive ? v > r.min : v >= r.min) && v <= r.max;
}

absl::Status CheckNumber(const EngineSetting& s, const SettingValue& value,
                         SettingSource source) {
  double v = 0;
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    v = static_cast<double>(*i);
  } else if (const double* d = std::get_if<double>(&value)) {
    v = *d;
  } else {
    return absl::InternalError(absl::StrCat(s.name, ": not a number"));
  }
  if (InRange(s.range, v, source)) return absl::OkStatus();
  return FieldError(s.name, absl::StrCat(RangeText(s, source), ", got ",
                                         SettingValueText(value)));
}

absl::Status CheckString(const EngineSetting& s, const SettingValue& value) {
  const std::string* v = std::get_if<std::string>(&value);
  if (v == nullptr) {
    return absl::InternalError(absl::StrCat(s.name, ": not a string"));
  }
  if (s.choices.empty() ||
      std::find(s.choices.begin(), s.choices.end(), *v) != s.choices.end()) {
    return absl::OkStatus();
  }
  // "a, b or c".
  const absl::string_view last = s.choices.back();
  const std::string others =
      absl::StrJoin(s.choices.begin(), s.choices.end() - 1, ", ");
  return FieldError(s.name, absl::StrCat("must be ", others, " or ", last,
                                         ", got '", *v, "'"));
}

// The variant index each type's value uses.
size_t ValueIndex(SettingType type) {
  switch (type) {
    case SettingType::kInt:
      return 0;
    case SettingType::kDouble:
      return 1;
    case SettingType::kString:
      return 2;
  }
  return 2;
}

}  // namespace

absl::Span<const EngineSetting> EngineSettings() { return Table(); }

const EngineSetting* FindEngineSetting(absl::string_view name) {
  for (const EngineSetting& s : Table()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

SettingValue DefaultSettingValue(const EngineSetting& setting) {
  if (setting.flag_default.has_value()) return *setting.flag_default;
  return setting.access.get(EngineSpec());
}

absl::Status CheckSettingValue(const EngineSetting& setting,
                               const SettingValue& value,
                               SettingSource source) {
  if (setting.type == SettingType::kString) return CheckString(setting, value);
  return CheckNumber(setting, value, source);
}

absl::Status SetSetting(const EngineSetting& setting, const SettingValue& value,
                        EngineSpec* spec, SettingSource source) {
  if (value.index() != ValueIndex(setting.type)) {
    return absl::InternalError(
        absl::StrCat(setting.name, ": value of the wrong type"));
  }
  if (absl::Status st = CheckSettingValue(setting, value, source); !st.ok()) {
    return st;
  }
  setting.access.set(value, spec);
  return absl::OkStatus();
}

absl::Status CheckEngineSettings(const EngineSpec& spec) {
  for (const EngineSetting& s : Table()) {
    if (absl::Status st = CheckSettingValue(s, s.access.get(spec)); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

std::string SettingValueText(const SettingValue& value) {
  return std::visit([](const auto& v) { return absl::StrCat(v); }, value);
}

}  // namespace moeserve::engine
