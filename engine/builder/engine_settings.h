// The engine settings table: one row per EngineSpec setting that a front
// end sets by name. A row holds the setting's name (the flag is --NAME, the
// --engines_config key is "NAME"), its type, the values it accepts, how to
// read and write it in an EngineSpec, and its help text. The server's flags
// and the bench's (engine_setting_flags.h), --engines_config
// (server/engines_config.cc) and CheckEngineSpec's range checks all read
// this table, so a setting is declared once: adding one is a row here and a
// field in EngineSpec.
//
// Not in the table: name, policy and policy_config (the engine's identity
// and its policy: each front end writes them its own way, --policy / --ab /
// --engines or "name" / "policy" / "policy_config"; the policy registry
// checks them), and fast_tier_in_backend_memory (tests only).
//
// Defaults: EngineSpec's own (engine_spec.h), except where a row gives a
// flag_default (draft_model_dir: the demo draft model).
//
// Thread safety: the table is immutable once built (on first use); every
// function may be called from any thread.
#ifndef MOESERVE_ENGINE_BUILDER_ENGINE_SETTINGS_H_
#define MOESERVE_ENGINE_BUILDER_ENGINE_SETTINGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/builder/engine_spec.h"

namespace moeserve::engine {

enum class SettingType { kInt, kDouble, kString };

// A setting's value in the unit its flag and key use (kv_cache_mb: MiB):
// int64_t for kInt, double for kDouble, std::string for kString.
using SettingValue = std::variant<int64_t, double, std::string>;

// Where a value comes from. A file (--engines_config) says "left to someone
// else" by leaving the key out, so it may not write the unset value.
enum class SettingSource { kSpecOrFlag, kFile };

// The numbers a kInt or kDouble setting accepts: [min, max] ((min, max]
// with min_exclusive), plus `special` when set. Messages read
//   must be [SPECIAL_TEXT or ]in [MIN, MAX][ UNIT][ (NOTE)], got VALUE
struct NumericRange {
  double min = 0;
  double max = 0;
  bool min_exclusive = false;
  // One more accepted value outside [min, max] (0: off, -1: the policy's
  // own), named before the range by special_text ("0 (off)") or in the note.
  std::optional<double> special;
  absl::string_view special_text;
  // `special` means "left to someone else": a file refuses it and its
  // message adds unset_note to the note.
  bool special_is_unset = false;
  absl::string_view unset_note;
  absl::string_view unit;  // "MiB", "GB/s"
  absl::string_view note;  // "0: adaptive"
};

// Reads and writes one setting of an EngineSpec.
struct SettingAccess {
  SettingValue (*get)(const EngineSpec& spec);
  // REQUIRES: `value` holds the row's type and CheckSettingValue accepts it.
  void (*set)(const SettingValue& value, EngineSpec* spec);
};

struct EngineSetting {
  absl::string_view name;  // the flag (--name) and the engines_config key
  SettingType type;
  NumericRange range;                      // kInt and kDouble
  std::vector<absl::string_view> choices;  // kString; empty: any string
  SettingAccess access;
  // The flag's default when it is not EngineSpec's own.
  std::optional<SettingValue> flag_default;
  absl::string_view help;  // the flag's help text
};

// Every row, in the order flags are read and files' keys are listed.
absl::Span<const EngineSetting> EngineSettings();

// The row named `name`, or null.
const EngineSetting* FindEngineSetting(absl::string_view name);

// The value a front end starts from: the row's flag_default, else
// EngineSpec's own.
SettingValue DefaultSettingValue(const EngineSetting& setting);

// OK when `setting` accepts `value`, else INVALID_ARGUMENT
// "NAME: must be ..., got VALUE" (the message names no flag or file: callers
// prefix where the value came from).
absl::Status CheckSettingValue(
    const EngineSetting& setting, const SettingValue& value,
    SettingSource source = SettingSource::kSpecOrFlag);

// CheckSettingValue, then writes `value` into `spec`.
// REQUIRES: `value` holds the row's type.
absl::Status SetSetting(const EngineSetting& setting, const SettingValue& value,
                        EngineSpec* spec,
                        SettingSource source = SettingSource::kSpecOrFlag);

// Every row's check on `spec`'s values, in table order (CheckEngineSpec's
// range checks): the first refusal, as CheckSettingValue words it.
absl::Status CheckEngineSettings(const EngineSpec& spec);

// `value` as messages print it: digits, %g or the string.
std::string SettingValueText(const SettingValue& value);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_BUILDER_ENGINE_SETTINGS_H_
