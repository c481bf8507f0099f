#include "engine/spec/drafter_registry.h"

#include <map>
#include <utility>

#include "base/mutex.h"

namespace moeserve::engine::spec {
namespace {

struct Registry {
  base::Mutex mu;
  std::map<std::string, DrafterFactory, std::less<>> factories
      ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static auto* registry = new Registry;
  return *registry;
}

}  // namespace

const DrafterFactory* FindDrafter(std::string_view name) {
  Registry& r = TheRegistry();
  base::MutexLock lock(&r.mu);
  auto it = r.factories.find(name);
  // Factories are never removed, so the pointer stays valid.
  return it == r.factories.end() ? nullptr : &it->second;
}

std::vector<std::string> RegisteredDrafters() {
  Registry& r = TheRegistry();
  base::MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

namespace internal {
DrafterRegistration::DrafterRegistration(const char* name,
                                         DrafterFactory factory) {
  Registry& r = TheRegistry();
  base::MutexLock lock(&r.mu);
  r.factories.emplace(name, std::move(factory));
}
}  // namespace internal

}  // namespace moeserve::engine::spec
