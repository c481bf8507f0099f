// Drafter registry: drafters register a factory under a name from their own
// .cc with MOESERVE_REGISTER_DRAFTER (alwayslink libraries, like policies);
// the engine builder creates them by name (`--drafter`, EngineSpec.drafter).
// "none" is not a drafter: it means no speculation.
//
// Thread safety: registration happens from static initialisers; every
// function here may be called from any thread afterwards.
#ifndef MOESERVE_ENGINE_SPEC_DRAFTER_REGISTRY_H_
#define MOESERVE_ENGINE_SPEC_DRAFTER_REGISTRY_H_

#include <string>
#include <string_view>
#include <vector>

#include "engine/spec/drafter.h"

namespace moeserve::engine::spec {

// The factory registered as `name`, or null.
const DrafterFactory* FindDrafter(std::string_view name);

// Registered names, sorted ("none" not included).
std::vector<std::string> RegisteredDrafters();

namespace internal {
struct DrafterRegistration {
  DrafterRegistration(const char* name, DrafterFactory factory);
};
}  // namespace internal

#define MOESERVE_DRAFTER_CONCAT_INNER(a, b) a##b
#define MOESERVE_DRAFTER_CONCAT(a, b) MOESERVE_DRAFTER_CONCAT_INNER(a, b)
#define MOESERVE_REGISTER_DRAFTER(name, factory)                          \
  static const ::moeserve::engine::spec::internal::DrafterRegistration    \
  MOESERVE_DRAFTER_CONCAT(moeserve_drafter_registration_, __LINE__)(name, \
                                                                    factory)

}  // namespace moeserve::engine::spec

#endif  // MOESERVE_ENGINE_SPEC_DRAFTER_REGISTRY_H_
