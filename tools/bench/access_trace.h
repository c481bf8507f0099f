// The target's expert access trace of one bench cell, recorded without a
// hook in the engine: BuildEngine creates the offload policy by name from
// the policy registry, and the residency calls the policy's OnAccess for
// every target acquire, in order (never for the draft view or an int4
// drafter's own experts: offload_policy.h, expert_residency.h). So the bench
// builds its engines with the policy "bench_trace", registered here, which
// wraps the real policy and forwards every hook to it unchanged, recording
// each OnAccess id while its AccessTrace is on.
//
// TraceRegistration::Wrap(spec) rewrites an EngineSpec so: policy
// "bench_trace", and two extra policy_config keys naming the real policy and
// the trace (both removed before the real policy's factory sees the config, so
// it checks the user's keys as before). Everything else the engine asks the
// policy (default drafter and k, ChooseDraftLength, ChooseVictims, ...) is
// the real policy's answer.
//
// A hook added to engine::OffloadPolicy later must be forwarded here too
// (the wrapper would otherwise answer with the default).
//
// Thread safety: AccessTrace and the registrations are thread-safe.
#ifndef MOESERVE_TOOLS_BENCH_ACCESS_TRACE_H_
#define MOESERVE_TOOLS_BENCH_ACCESS_TRACE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/builder/engine_spec.h"
#include "engine/model_weights.h"

namespace moeserve::bench {

class AccessTrace {
 public:
  // Clears the trace and starts recording.
  void Start();
  // Stops recording and returns what was recorded since Start().
  std::vector<engine::ExpertId> Stop();
  void Record(engine::ExpertId id);

 private:
  std::mutex mu_;
  bool on_ = false;
  std::vector<engine::ExpertId> ids_;
};

// A trace that engines built from Wrap(spec) record into; registered while
// this lives (an engine built from Wrap(spec) must not outlive it).
class TraceRegistration {
 public:
  TraceRegistration();
  ~TraceRegistration();
  TraceRegistration(const TraceRegistration&) = delete;
  TraceRegistration& operator=(const TraceRegistration&) = delete;

  AccessTrace& trace() { return *trace_; }
  // `spec` with its policy wrapped (see above).
  engine::EngineSpec Wrap(const engine::EngineSpec& spec) const;

 private:
  int64_t id_;
  std::shared_ptr<AccessTrace> trace_;
};

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_ACCESS_TRACE_H_
