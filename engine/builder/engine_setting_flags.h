// Command-line flags for the engine settings (engine_settings.h): each flag
// takes its name, default and help from its row, and EngineSettingsFromFlags
// reads every one a binary defines.
//
// //engine/builder:all_engine_setting_flags defines a flag for every row
// (moeserve links it). A binary that takes only some settings as flags
// (moeserve_bench, whose --expert_cache_ratio and --draft_budget are lists
// to sweep) defines those itself with the macro, at global scope:
//
//   MOESERVE_ENGINE_SETTING_FLAG(double, link_gbps);
//
// Type is the flag's C++ type: double for a kDouble row, std::string for a
// kString row, int or int64_t for a kInt row. A name that is not a row
// aborts at start-up.
//
// Thread safety: EngineSettingsFromFlags reads flags (absl::GetFlag is
// thread-safe); call it once at start-up, never on a hot path.
#ifndef MOESERVE_ENGINE_BUILDER_ENGINE_SETTING_FLAGS_H_
#define MOESERVE_ENGINE_BUILDER_ENGINE_SETTING_FLAGS_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/builder/engine_settings.h"
#include "engine/builder/engine_spec.h"

namespace moeserve::engine {

// Reads every engine-setting flag this binary defines, in table order, into
// `spec` (the others keep their values). INVALID_ARGUMENT naming the flag
// ("--max_waiting: must be in [1, 1048576], got 0") for a value its row
// refuses. Paths (draft_model_dir) are stored as given.
absl::Status EngineSettingsFromFlags(EngineSpec* spec);

namespace setting_flags_internal {

// The row named `name`; aborts when there is none.
const EngineSetting& Row(absl::string_view name);

// Adds `read` as the flag of row `name`; returns true.
bool Register(absl::string_view name, SettingValue (*read)());

template <typename T>
SettingValue ToValue(const T& v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(v);
  } else {
    return v;
  }
}

// Row `name`'s default as the flag's type.
template <typename T>
T Default(absl::string_view name) {
  const SettingValue v = DefaultSettingValue(Row(name));
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(std::get<int64_t>(v));
  } else {
    return std::get<T>(v);
  }
}

inline absl::string_view Help(absl::string_view name) { return Row(name).help; }

}  // namespace setting_flags_internal
}  // namespace moeserve::engine

#define MOESERVE_ENGINE_SETTING_FLAG(Type, name)                              \
  ABSL_FLAG(Type, name,                                                       \
            ::moeserve::engine::setting_flags_internal::Default<Type>(#name), \
            ::moeserve::engine::setting_flags_internal::Help(#name));         \
  [[maybe_unused]] static const bool moeserve_engine_setting_flag_##name =    \
      ::moeserve::engine::setting_flags_internal::Register(#name, [] {        \
        return ::moeserve::engine::setting_flags_internal::ToValue(           \
            absl::GetFlag(FLAGS_##name));                                     \
      })

#endif  // MOESERVE_ENGINE_BUILDER_ENGINE_SETTING_FLAGS_H_
