// Offload-policy registry (DESIGN.md "Policy hooks"; STYLE.md "Plugins
// without a central switch").
//
// Policies register a factory under a name from their own .cc with
// MOESERVE_REGISTER_POLICY; the server and the bench create them by name
// from a string config map. A registration may also carry a test config
// (PolicyTestConfig), so tests that run every registered policy need no
// per-policy list either. Adding a policy touches no central file; the
// policy libraries are alwayslink so registration survives linking (depend
// on //policies:all_policies).
//
// Thread safety: registration happens from static initialisers; every
// function here may be called from any thread afterwards.
#ifndef MOESERVE_POLICIES_REGISTRY_H_
#define MOESERVE_POLICIES_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/offload/offload_policy.h"

namespace moeserve::policies {

// Policy configuration: key -> value, both strings (e.g. from
// --policy_config=top_percent=10,profile_steps=16).
using PolicyConfig = std::map<std::string, std::string>;

// Builds a policy from its config. Unknown or malformed keys must fail with
// INVALID_ARGUMENT naming the key.
using PolicyFactory =
    std::function<absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>>(
        const PolicyConfig&)>;

// Creates the policy registered as `name`.
// NOT_FOUND (listing the registered names) when `name` is unknown;
// INVALID_ARGUMENT naming the key when `config` has an unknown or malformed
// key; other errors as the factory reports them (e.g. an unreadable file).
absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> CreatePolicy(
    std::string_view name, const PolicyConfig& config);

// Registered names, sorted.
std::vector<std::string> RegisteredPolicies();

// The config the policy registered for tests that run every registered
// policy (tests/policy_invariance_test, the fake-vs-residency test): one
// under which it shows all of its behaviour within a few engine steps.
// Empty when it registered none (its defaults already do) or `name` is
// unknown.
PolicyConfig PolicyTestConfig(std::string_view name);

// Parses "k1=v1,k2=v2" (whitespace around keys and values trimmed; empty
// text -> empty config). INVALID_ARGUMENT for an entry without '=', an empty
// key, or a repeated key.
absl::StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view text);

// Helpers for factories.
// INVALID_ARGUMENT naming the first key of `config` not in `known`.
absl::Status CheckConfigKeys(std::string_view policy,
                             const PolicyConfig& config,
                             std::initializer_list<std::string_view> known);
// The integer at `key` (or `default_value` when absent); INVALID_ARGUMENT
// naming the key when it is not an integer in [min_value, max_value].
absl::StatusOr<int64_t> GetIntConfig(const PolicyConfig& config,
                                     std::string_view key,
                                     int64_t default_value, int64_t min_value,
                                     int64_t max_value);
// As GetIntConfig, for a finite number.
absl::StatusOr<double> GetDoubleConfig(const PolicyConfig& config,
                                       std::string_view key,
                                       double default_value, double min_value,
                                       double max_value);

// The lookahead of a policy that adapts k as it runs: max_speculative_tokens
// (default 8, at most 16, engine/builder's kMaxSpeculativeTokens) and
// num_speculative_tokens, the k it starts with (default min(4, max), at
// most max; the error says the max it was held to).
struct SpeculativeTokens {
  int num = 4;
  int max = 8;
};
absl::StatusOr<SpeculativeTokens> GetSpeculativeTokens(
    const PolicyConfig& config);

namespace internal {
// Registers `factory` (and `test_config`, see PolicyTestConfig) as `name`.
// Returns true; for static initialisers. Aborts on a duplicate name (a
// link-time mistake, found at startup).
bool RegisterPolicy(std::string_view name, PolicyFactory factory,
                    PolicyConfig test_config = {});
}  // namespace internal

#define MOESERVE_POLICY_CONCAT_INNER_(a, b) a##b
#define MOESERVE_POLICY_CONCAT_(a, b) MOESERVE_POLICY_CONCAT_INNER_(a, b)

// In a policy's .cc, at namespace scope:
//   MOESERVE_REGISTER_POLICY("lru", LruPolicy::Create);
// or, with a test config (PolicyTestConfig):
//   MOESERVE_REGISTER_POLICY("lfu_static", LfuStaticPolicy::Create,
//                            {{"profile_steps", "2"}});
#define MOESERVE_REGISTER_POLICY(name, ...)                   \
  [[maybe_unused]] static const bool MOESERVE_POLICY_CONCAT_( \
      moeserve_policy_registered_, __COUNTER__) =             \
      ::moeserve::policies::internal::RegisterPolicy(name, __VA_ARGS__)

}  // namespace moeserve::policies

#endif  // MOESERVE_POLICIES_REGISTRY_H_
