// Offload-policy registry (DESIGN.md "Policy hooks"; STYLE.md "Plugins
// without a central switch"), beside the contract it holds
// (offload_policy.h).
//
// Policies register a factory and their traits (PolicyTraits: the
// speculation they bring, a test config) under a name from their own .cc
// with MOESERVE_REGISTER_POLICY; the engine builder, the server and the
// bench create them by name from a string config map and read their traits
// without building one. Tests that run every registered policy take each
// one's test config from here, so they need no per-policy list either.
// Adding a policy touches no central file; the policy libraries are
// alwayslink so registration survives linking (binaries depend on
// //policies:all_policies).
//
// Thread safety: registration happens from static initialisers; every
// function here may be called from any thread afterwards.
#ifndef MOESERVE_ENGINE_OFFLOAD_POLICY_REGISTRY_H_
#define MOESERVE_ENGINE_OFFLOAD_POLICY_REGISTRY_H_

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

namespace moeserve::engine {

// Policy configuration: key -> value, both strings (e.g. from
// --policy_config=top_percent=10,profile_steps=16).
using PolicyConfig = std::map<std::string, std::string>;

// Builds a policy from its config. Unknown or malformed keys must fail with
// INVALID_ARGUMENT naming the key.
using PolicyFactory =
    std::function<absl::StatusOr<std::unique_ptr<OffloadPolicy>>(
        const PolicyConfig&)>;

// The speculation a policy brings: what an engine runs when its spec leaves
// the drafter or k to the policy (EngineSpec, ResolveSpeculation).
struct SpeculationDefaults {
  // A registered drafter (engine/spec_decode/drafter_registry.h), or "none":
  // the policy does not speculate.
  std::string drafter = "none";
  // Draft tokens per step: > 0 fixed, 0 adaptive (the engine's governor or
  // the policy's ChooseDraftLength).
  int num_speculative_tokens = 0;
  // SpecMoEOff's CPU attention (seed 002 §4, engine/host_attention.h): the
  // policy wants the KV cache and attention on the host, so the device
  // memory the cache would take holds experts. Turns EngineSpec::
  // host_attention on; an engine spec cannot turn it off under such a
  // policy config (the policy's own key can).
  bool host_attention = false;
};

// A policy's SpeculationDefaults under `config`. INVALID_ARGUMENT naming the
// key when a key it reads is malformed (as the factory would say).
using SpeculationFn =
    std::function<absl::StatusOr<SpeculationDefaults>(const PolicyConfig&)>;

// What a registration says about a policy besides its factory; read
// without building the policy.
struct PolicyTraits {
  // Null: SpeculationDefaults{} (no drafter, k 0) under every config.
  SpeculationFn speculation;
  // The config for tests that run every registered policy
  // (tests/policy_invariance_test, the fake-vs-residency test): one under
  // which the policy shows all of its behaviour within a few engine steps.
  // Empty: its defaults already do.
  PolicyConfig test_config;
};

// Creates the policy registered as `name`.
// NOT_FOUND (listing the registered names) when `name` is unknown;
// INVALID_ARGUMENT naming the key when `config` has an unknown or malformed
// key; other errors as the factory reports them (e.g. an unreadable file).
// Every error but NOT_FOUND is prefixed "policy '<name>': ".
absl::StatusOr<std::unique_ptr<OffloadPolicy>> CreatePolicy(
    std::string_view name, const PolicyConfig& config);

// The speculation the policy registered as `name` brings under `config`
// (PolicyTraits::speculation), without building the policy. Errors as
// CreatePolicy's for an unknown name or a malformed key the traits read;
// keys they do not read are not checked (CreatePolicy checks them all).
absl::StatusOr<SpeculationDefaults> PolicySpeculation(
    std::string_view name, const PolicyConfig& config);

// Registered names, sorted.
std::vector<std::string> RegisteredPolicies();

// The policy's PolicyTraits::test_config; empty when it registered none or
// `name` is unknown.
PolicyConfig PolicyTestConfig(std::string_view name);

// Parses "k1=v1,k2=v2" (whitespace around keys and values trimmed; empty
// text -> empty config). INVALID_ARGUMENT for an entry without '=', an empty
// key, or a repeated key.
absl::StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view text);

// Helpers for factories and traits.
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
// The value at `key`, which must be one of `choices` (the first when
// absent); INVALID_ARGUMENT naming the key and the choices otherwise.
absl::StatusOr<std::string> GetChoiceConfig(
    const PolicyConfig& config, std::string_view key,
    std::initializer_list<std::string_view> choices);
// The drafter named by the `drafter` key (or `default_value` when absent);
// INVALID_ARGUMENT naming the key when it is empty. Whether the name is
// registered is the engine spec's check (CheckEngineSpec).
absl::StatusOr<std::string> GetDrafterConfig(const PolicyConfig& config,
                                             std::string_view default_value);
// The speculation of a policy whose drafter is its `drafter` key (default
// `default_drafter`) and whose k is adaptive (0); errors as
// GetDrafterConfig's.
absl::StatusOr<SpeculationDefaults> DrafterKeySpeculation(
    const PolicyConfig& config, std::string_view default_drafter);

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
// Registers `factory` and `traits` as `name`. Returns true; for static
// initialisers. Aborts on a duplicate name (a link-time mistake, found at
// startup).
bool RegisterPolicy(std::string_view name, PolicyFactory factory,
                    PolicyTraits traits = {});
}  // namespace internal

#define MOESERVE_POLICY_CONCAT_INNER_(a, b) a##b
#define MOESERVE_POLICY_CONCAT_(a, b) MOESERVE_POLICY_CONCAT_INNER_(a, b)

// In a policy's .cc, at namespace scope:
//   MOESERVE_REGISTER_POLICY("lru", LruPolicy::Create);
// or, with traits (PolicyTraits, designated initialisers):
//   MOESERVE_REGISTER_POLICY("lfu_static", LfuStaticPolicy::Create,
//                            {.test_config = {{"profile_steps", "2"}}});
//   MOESERVE_REGISTER_POLICY("self_spec", SelfSpecPolicy::Create,
//                            {.speculation = SelfSpecPolicy::Speculation});
#define MOESERVE_REGISTER_POLICY(name, ...)                   \
  [[maybe_unused]] static const bool MOESERVE_POLICY_CONCAT_( \
      moeserve_policy_registered_, __COUNTER__) =             \
      ::moeserve::engine::internal::RegisterPolicy(name, __VA_ARGS__)

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_POLICY_REGISTRY_H_
