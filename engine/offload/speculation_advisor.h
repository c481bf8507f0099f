// SpeculationAdvisor: the one channel through which a speculating engine
// asks its offload side the speculation questions: how many draft tokens
// this step (the policy's governor), what a transfer costs, and what the
// drafter expects the verification to need (the lookahead). The engine
// builder hands the engine one (the residency, which passes the questions
// to its policy); an engine without offload has none and chooses k itself.
//
// Thread-safety: called from the engine's step thread only.
#ifndef MOESERVE_ENGINE_OFFLOAD_SPECULATION_ADVISOR_H_
#define MOESERVE_ENGINE_OFFLOAD_SPECULATION_ADVISOR_H_

#include "engine/offload/offload_policy.h"

namespace moeserve::engine {

class SpeculationAdvisor {
 public:
  virtual ~SpeculationAdvisor() = default;

  // The drafter's expectation for the verification about to run.
  virtual void OnLookahead(const ExpertLookahead& lookahead) = 0;
  // The policy's k for this step (its speculative governor), or -1 to leave
  // k to the engine.
  virtual int ChooseDraftLength(const DraftLengthQuery& query) = 0;
  // Measured seconds of one expert transfer on the link (0: none yet).
  virtual double link_seconds_per_transfer() const = 0;
  // Seconds the target's expert acquires have spent blocked on the link so
  // far (ResidencyStats::stall_seconds), so that a pass's compute time can
  // be told from its wait for transfers. Default: 0 (nothing waits).
  virtual double link_stall_seconds() const { return 0; }
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_SPECULATION_ADVISOR_H_
