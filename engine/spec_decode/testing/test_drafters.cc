#include "engine/spec_decode/testing/test_drafters.h"

#include <algorithm>

#include "base/mutex.h"
#include "engine/spec_decode/drafter_registry.h"

namespace moeserve::engine::spec_decode::testing {
namespace {

class TestDrafter final : public Drafter {
 public:
  TestDrafter(TestDrafterKind kind, DraftScript script, int32_t vocab)
      : kind_(kind),
        name_(TestDrafterName(kind)),
        script_(std::move(script)),
        vocab_(vocab) {}

  std::string_view name() const override { return name_; }

  absl::Status Propose(std::span<const DraftInput> inputs,
                       std::vector<DraftOutput>* outputs,
                       ExpertLookahead* lookahead) override {
    outputs->assign(inputs.size(), {});
    lookahead->Clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const DraftInput& in = inputs[i];
      std::vector<int32_t>& out = (*outputs)[i].tokens;
      if (kind_ == TestDrafterKind::kRepeatLast) {
        out.assign(in.k, in.tokens.back());
        continue;
      }
      const std::vector<int32_t>* next = Continuation(in.tokens);
      if (next == nullptr) continue;
      for (int32_t t : *next) {
        if (static_cast<int>(out.size()) == in.k) break;
        out.push_back(kind_ == TestDrafterKind::kOracle ? t : (t + 1) % vocab_);
      }
    }
    return absl::OkStatus();
  }

 private:
  // What the script says follows `tokens`, or null when it does not know
  // this history.
  const std::vector<int32_t>* Continuation(std::span<const int32_t> tokens) {
    for (const auto& [prompt, generated] : script_) {
      if (prompt.size() > tokens.size() ||
          !std::equal(prompt.begin(), prompt.end(), tokens.begin())) {
        continue;
      }
      const size_t done = tokens.size() - prompt.size();
      if (done > generated.size() ||
          !std::equal(generated.begin(), generated.begin() + done,
                      tokens.begin() + prompt.size())) {
        continue;
      }
      rest_.assign(generated.begin() + done, generated.end());
      return &rest_;
    }
    return nullptr;
  }

  const TestDrafterKind kind_;
  const std::string name_;
  const DraftScript script_;
  const int32_t vocab_;
  std::vector<int32_t> rest_;
};

struct RegisteredScript {
  base::Mutex mu;
  DraftScript script ABSL_GUARDED_BY(mu);
};

RegisteredScript& TheScript() {
  static auto* script = new RegisteredScript;
  return *script;
}

DrafterFactory RegisteredFactory(TestDrafterKind kind) {
  return [kind](const DrafterContext& context)
             -> absl::StatusOr<std::unique_ptr<Drafter>> {
    RegisteredScript& r = TheScript();
    base::MutexLock lock(&r.mu);
    return MakeTestDrafter(
        kind, r.script,
        static_cast<int32_t>(context.weights->config().vocab_size));
  };
}

MOESERVE_REGISTER_DRAFTER("oracle",
                          RegisteredFactory(TestDrafterKind::kOracle));
MOESERVE_REGISTER_DRAFTER("adversarial",
                          RegisteredFactory(TestDrafterKind::kAdversarial));
MOESERVE_REGISTER_DRAFTER("repeat_last",
                          RegisteredFactory(TestDrafterKind::kRepeatLast));

}  // namespace

void SetRegisteredDraftScript(DraftScript script) {
  RegisteredScript& r = TheScript();
  base::MutexLock lock(&r.mu);
  r.script = std::move(script);
}

std::string TestDrafterName(TestDrafterKind kind) {
  switch (kind) {
    case TestDrafterKind::kOracle:
      return "oracle";
    case TestDrafterKind::kAdversarial:
      return "adversarial";
    case TestDrafterKind::kRepeatLast:
      return "repeat_last";
  }
  return "unknown";
}

std::unique_ptr<Drafter> MakeTestDrafter(TestDrafterKind kind,
                                         DraftScript script,
                                         int32_t vocab_size) {
  return std::make_unique<TestDrafter>(kind, std::move(script), vocab_size);
}

}  // namespace moeserve::engine::spec_decode::testing
