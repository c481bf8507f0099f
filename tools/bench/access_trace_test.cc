// The bench's forwarding policy ("bench_trace") answers every question the
// engine asks a policy with the wrapped policy's answer: here IsDraftExpert,
// which self_spec answers differently in its two drafting modes (a wrapper
// that did not forward it would answer the default, true, in both).
#include "tools/bench/access_trace.h"

#include <memory>

#include "engine/builder/engine_spec.h"
#include "engine/offload/policy_registry.h"
#include "gtest/gtest.h"

namespace moeserve::bench {
namespace {

std::unique_ptr<engine::OffloadPolicy> Wrapped(
    const TraceRegistration& registration, const engine::PolicyConfig& config) {
  engine::EngineSpec spec;
  spec.policy = "self_spec";
  spec.policy_config = config;
  const engine::EngineSpec wrapped = registration.Wrap(spec);
  EXPECT_EQ(wrapped.policy, "bench_trace");
  absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> policy =
      engine::CreatePolicy(wrapped.policy, wrapped.policy_config);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *std::move(policy) : nullptr;
}

TEST(AccessTraceTest, ForwardsTheDraftExpertQuestion) {
  TraceRegistration registration;
  // Not attached: self_spec has no pins, so in the paper's mode no expert
  // is a draft expert, and in `ready` every one is.
  auto pinned = Wrapped(registration, {{"draft_from", "pinned"}});
  auto ready = Wrapped(registration, {{"draft_from", "ready"}});
  ASSERT_TRUE(pinned != nullptr && ready != nullptr);
  EXPECT_EQ(pinned->name(), "self_spec");
  EXPECT_FALSE(pinned->IsDraftExpert({0, 0}));
  EXPECT_TRUE(ready->IsDraftExpert({0, 0}));
}

}  // namespace
}  // namespace moeserve::bench
