#include "engine/spec_decode/drafter_registry.h"

#include <utility>

#include "base/named_registry.h"

namespace moeserve::engine::spec_decode {
namespace {

struct Registration {
  DrafterFactory factory;
  DrafterTraits traits;
};

base::NamedRegistry<Registration>& Drafters() {
  static auto* registry = new base::NamedRegistry<Registration>("drafter");
  return *registry;
}

}  // namespace

const DrafterFactory* FindDrafter(std::string_view name) {
  const Registration* r = Drafters().Find(name);
  return r == nullptr ? nullptr : &r->factory;
}

const DrafterTraits* FindDrafterTraits(std::string_view name) {
  const Registration* r = Drafters().Find(name);
  return r == nullptr ? nullptr : &r->traits;
}

std::vector<std::string> RegisteredDrafters() { return Drafters().Names(); }

bool DrafterUsesFastMemory(std::string_view name) {
  const DrafterTraits* traits = FindDrafterTraits(name);
  return traits != nullptr && traits->fast_memory_bytes != nullptr;
}

absl::StatusOr<uint64_t> DrafterFastMemoryBytes(std::string_view name,
                                                const ModelConfig& config) {
  if (!DrafterUsesFastMemory(name)) return 0;
  return FindDrafterTraits(name)->fast_memory_bytes(config);
}

namespace internal {
bool RegisterDrafter(std::string_view name, DrafterFactory factory,
                     DrafterTraits traits) {
  return Drafters().Register(
      name, Registration{std::move(factory), std::move(traits)});
}
}  // namespace internal

}  // namespace moeserve::engine::spec_decode
