#include "policies/lru.h"

namespace moeserve::policies {

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> LruPolicy::Create(
    const engine::PolicyConfig& config) {
  absl::Status keys = engine::CheckConfigKeys("lru", config, {});
  if (!keys.ok()) return keys;
  return std::make_unique<LruPolicy>();
}

MOESERVE_REGISTER_POLICY("lru", LruPolicy::Create);

}  // namespace moeserve::policies
