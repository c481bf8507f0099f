#include "tools/bench/access_trace.h"

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"

namespace moeserve::bench {
namespace {

constexpr char kPolicyName[] = "bench_trace";
constexpr char kInnerKey[] = "bench_trace_policy";
constexpr char kTraceKey[] = "bench_trace_id";

std::mutex& RegistryMu() {
  static std::mutex mu;
  return mu;
}
std::map<int64_t, std::shared_ptr<AccessTrace>>& Registry() {
  static auto* traces = new std::map<int64_t, std::shared_ptr<AccessTrace>>;
  return *traces;
}

std::shared_ptr<AccessTrace> FindTrace(int64_t id) {
  std::lock_guard<std::mutex> lock(RegistryMu());
  auto it = Registry().find(id);
  return it == Registry().end() ? nullptr : it->second;
}

// Forwards every hook to `inner`; records OnAccess.
class TracingPolicy final : public engine::OffloadPolicy {
 public:
  TracingPolicy(std::unique_ptr<engine::OffloadPolicy> inner,
                std::shared_ptr<AccessTrace> trace)
      : inner_(std::move(inner)), trace_(std::move(trace)) {}

  std::string_view name() const override { return inner_->name(); }
  int ChooseDraftLength(const engine::DraftLengthQuery& q) override {
    return inner_->ChooseDraftLength(q);
  }
  bool IsDraftExpert(engine::ExpertId id) const override {
    return inner_->IsDraftExpert(id);
  }
  void Attach(engine::ResidencyControl* control) override {
    inner_->Attach(control);
  }
  void OnStepBegin(const engine::StepInfo& info) override {
    inner_->OnStepBegin(info);
  }
  void OnLookahead(const engine::ExpertLookahead& lookahead) override {
    inner_->OnLookahead(lookahead);
  }
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> token_counts, const float* hidden,
               int64_t n) override {
    inner_->OnRoute(layer, experts, token_counts, hidden, n);
  }
  void OnAccess(engine::ExpertId id) override {
    trace_->Record(id);
    inner_->OnAccess(id);
  }
  void OnLayerDone(int layer) override { inner_->OnLayerDone(layer); }
  void OnStepEnd(const engine::StepStats& stats) override {
    inner_->OnStepEnd(stats);
  }
  void OnLoaded(engine::ExpertId id) override { inner_->OnLoaded(id); }
  void OnEvicted(engine::ExpertId id) override { inner_->OnEvicted(id); }
  void ChooseVictims(std::span<const engine::ExpertId> candidates, int count,
                     std::vector<engine::ExpertId>* victims) override {
    inner_->ChooseVictims(candidates, count, victims);
  }

 private:
  const std::unique_ptr<engine::OffloadPolicy> inner_;
  const std::shared_ptr<AccessTrace> trace_;
};

absl::Status NeedsKeys() {
  return absl::InvalidArgumentError(
      absl::StrCat(kPolicyName, ": needs ", kInnerKey, " and ", kTraceKey,
                   " (tools/bench/access_trace.h)"));
}

absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> CreateTracing(
    const engine::PolicyConfig& config) {
  engine::PolicyConfig rest = config;
  auto inner_it = rest.find(kInnerKey);
  auto trace_it = rest.find(kTraceKey);
  int64_t id = 0;
  if (inner_it == rest.end() || trace_it == rest.end() ||
      !absl::SimpleAtoi(trace_it->second, &id)) {
    return NeedsKeys();
  }
  std::shared_ptr<AccessTrace> trace = FindTrace(id);
  if (trace == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(kPolicyName, ": no trace ", id));
  }
  const std::string inner_name = inner_it->second;
  rest.erase(kInnerKey);
  rest.erase(kTraceKey);
  absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> inner =
      engine::CreatePolicy(inner_name, rest);
  if (!inner.ok()) return inner.status();
  return std::unique_ptr<engine::OffloadPolicy>(
      new TracingPolicy(*std::move(inner), std::move(trace)));
}

// The wrapped policy's speculation (its traits), as if it ran unwrapped.
absl::StatusOr<engine::SpeculationDefaults> TracingSpeculation(
    const engine::PolicyConfig& config) {
  engine::PolicyConfig rest = config;
  auto inner_it = rest.find(kInnerKey);
  if (inner_it == rest.end() || !rest.contains(kTraceKey)) return NeedsKeys();
  const std::string inner_name = inner_it->second;
  rest.erase(kInnerKey);
  rest.erase(kTraceKey);
  return engine::PolicySpeculation(inner_name, rest);
}

MOESERVE_REGISTER_POLICY(kPolicyName, CreateTracing,
                         {.speculation = TracingSpeculation});

}  // namespace

void AccessTrace::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  ids_.clear();
  on_ = true;
}

std::vector<engine::ExpertId> AccessTrace::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  on_ = false;
  return std::move(ids_);
}

void AccessTrace::Record(engine::ExpertId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (on_) ids_.push_back(id);
}

TraceRegistration::TraceRegistration()
    : trace_(std::make_shared<AccessTrace>()) {
  static int64_t next_id = 0;
  std::lock_guard<std::mutex> lock(RegistryMu());
  id_ = ++next_id;
  Registry()[id_] = trace_;
}

TraceRegistration::~TraceRegistration() {
  std::lock_guard<std::mutex> lock(RegistryMu());
  Registry().erase(id_);
}

engine::EngineSpec TraceRegistration::Wrap(
    const engine::EngineSpec& spec) const {
  engine::EngineSpec out = spec;
  out.policy = kPolicyName;
  out.policy_config[kInnerKey] = spec.policy;
  out.policy_config[kTraceKey] = absl::StrCat(id_);
  return out;
}

}  // namespace moeserve::bench
