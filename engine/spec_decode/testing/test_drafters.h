// Drafters for tests: they need no model, so the engine's verification can
// be checked against drafts that are always right, always wrong, or naive.
//   oracle       proposes the continuation a plain run produced (a script
//                given by the test): every greedy draft is accepted;
//   adversarial  proposes a token one off that continuation: every greedy
//                draft is rejected;
//   repeat_last  proposes the last token k times (what a cheap n-gram
//                drafter does on repetitive text).
// Oracle and adversarial propose nothing for a sequence the script does not
// know (or that left it). All are deterministic (q = point masses).
#ifndef MOESERVE_ENGINE_SPEC_DECODE_TESTING_TEST_DRAFTERS_H_
#define MOESERVE_ENGINE_SPEC_DECODE_TESTING_TEST_DRAFTERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/spec_decode/drafter.h"

namespace moeserve::engine::spec_decode::testing {

// prompt -> the tokens a plain greedy run generated after it.
using DraftScript =
    std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>;

enum class TestDrafterKind { kOracle, kAdversarial, kRepeatLast };

std::unique_ptr<Drafter> MakeTestDrafter(TestDrafterKind kind,
                                         DraftScript script,
                                         int32_t vocab_size);

std::string TestDrafterName(TestDrafterKind kind);

// Linking this library also registers the three under their names
// ("oracle", "adversarial", "repeat_last") so tests can select them through
// EngineSpec.drafter like real drafters. Registered oracle and adversarial
// drafters read the script set here (empty until set; copied at creation).
void SetRegisteredDraftScript(DraftScript script);

}  // namespace moeserve::engine::spec_decode::testing

#endif  // MOESERVE_ENGINE_SPEC_DECODE_TESTING_TEST_DRAFTERS_H_
