// SpeculationGovernor: how many draft tokens each decoding request may run
// this step, before the token and KV budgets (which the scheduler applies).
// k is fixed (EngineOptions::num_speculative_tokens > 0) or adaptive: the
// offload policy's governor chooses one k for the step through the
// SpeculationAdvisor (from what this class measured: acceptance per
// position, draft and verify seconds, the seconds of a pass carrying a
// prefill chunk, and the link's transfer time), or,
// when it declines, each request's own acceptance EMA sets it (k = 0
// switches a request's speculation off, with a periodic one-token probe).
// k is clamped so the k + 1 tokens a verification may emit stay within
// max_new_tokens and every draft position within the context.
//
// Ownership: borrows the advisor (may be null: no offload policy).
// Thread-safety: the engine's step thread only (the scheduler asks for k,
// the model runner reports timings and verifications).
#ifndef MOESERVE_ENGINE_SPECULATION_GOVERNOR_H_
#define MOESERVE_ENGINE_SPECULATION_GOVERNOR_H_

#include <cstdint>
#include <span>
#include <vector>

#include "engine/moe_model.h"
#include "engine/offload/speculation_advisor.h"
#include "engine/request_state.h"

namespace moeserve::engine {

class SpeculationGovernor {
 public:
  // `fixed_k` > 0: that k always; 0: adaptive up to `max_k`.
  // `max_position`: the model's context length.
  SpeculationGovernor(int fixed_k, int max_k, int64_t max_position,
                      SpeculationAdvisor* advisor)
      : fixed_k_(fixed_k),
        max_k_(max_k),
        max_position_(max_position),
        advisor_(advisor) {}

  // Starts a step whose plain schedule is `scheduled`: asks the policy's
  // governor for the step's k (adaptive k only).
  void BeginStep(std::span<RequestState* const> scheduled);
  // The k `state` would like this step (before the budgets).
  int WantedDraftLength(RequestState* state);

  // Timings of one target pass over `batch` (verify chunks included) that
  // took `seconds`, `stall_seconds` of them blocked on the link
  // (SpeculationAdvisor::link_stall_seconds' growth over the pass). A pass
  // with a prefill chunk feeds the prefill EMA only, with its whole time
  // (TTFT is wall time): its rows would blur the decode and verify
  // figures. Decode and verify passes feed their compute time, seconds -
  // stall_seconds: a policy's cycle model adds the link time for the
  // experts it expects to load itself (quant_draft's eq. (3),
  // throughput's pipeline), so the stalls must not be in both.
  void RecordForwardTime(std::span<const SequenceChunk> batch, double seconds,
                         double stall_seconds = 0);
  // One drafter call that proposed up to `positions` tokens a request.
  void RecordDraftTime(double seconds, int positions);
  // One verification of `state`: of its first `judged` drafts, the first
  // `accepted` passed. Updates its EMA and the per-position EMAs.
  void RecordVerification(RequestState* state, int judged, int accepted);

  // The per-position acceptance EMAs ([i]: P(draft i+1 passes | 1..i did)).
  std::span<const double> acceptance() const { return timings_.acceptance; }

 private:
  // What the policy's governor is told (DraftLengthQuery), as EMAs.
  struct Timings {
    std::vector<double> acceptance;
    double draft_seconds_per_position = 0;
    double verify_seconds_base = 0;
    double verify_seconds_per_draft = 0;
    double prefill_seconds = 0;
  };
  // The policy's k for the step of `scheduled`, or -1.
  int PolicyDraftLength(std::span<RequestState* const> scheduled);

  const int fixed_k_;
  const int max_k_;
  const int64_t max_position_;
  SpeculationAdvisor* const advisor_;
  Timings timings_;
  int step_k_ = -1;  // the policy's k for this step (-1: none)
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_SPECULATION_GOVERNOR_H_
