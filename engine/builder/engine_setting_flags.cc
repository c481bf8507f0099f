#include "engine/builder/engine_setting_flags.h"

#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"

namespace moeserve::engine {
namespace setting_flags_internal {
namespace {

// Row name -> its flag's reader, filled by static initialisers.
std::map<absl::string_view, SettingValue (*)()>& Readers() {
  static auto* const readers =
      new std::map<absl::string_view, SettingValue (*)()>();
  return *readers;
}

}  // namespace

const EngineSetting& Row(absl::string_view name) {
  const EngineSetting* row = FindEngineSetting(name);
  if (row == nullptr) {
    std::fprintf(stderr,
                 "MOESERVE_ENGINE_SETTING_FLAG(%.*s): no such engine setting "
                 "(engine/builder/engine_settings.cc)\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return *row;
}

bool Register(absl::string_view name, SettingValue (*read)()) {
  Readers()[Row(name).name] = read;
  return true;
}

}  // namespace setting_flags_internal

absl::Status EngineSettingsFromFlags(EngineSpec* spec) {
  const auto& readers = setting_flags_internal::Readers();
  for (const EngineSetting& s : EngineSettings()) {
    auto it = readers.find(s.name);
    if (it == readers.end()) continue;
    if (absl::Status st = SetSetting(s, it->second(), spec); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("--", st.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace moeserve::engine
