// Engine::Sequence: one request as the scheduler sees it. Shared by the
// engine's translation units (engine.cc: admission, scheduling, sampling,
// streaming; engine_speculation.cc: drafts and their verification); owned
// and touched by the scheduler thread only.
#ifndef MOESERVE_ENGINE_INTERNAL_ENGINE_SEQUENCE_H_
#define MOESERVE_ENGINE_INTERNAL_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/sampling/stop_strings.h"

namespace moeserve::engine {

// Adaptive k starts optimistic, so a new sequence tries speculation at once.
inline constexpr double kInitialAcceptance = 0.7;

struct Engine::Sequence {
  GenerationRequest request;
  uint64_t id = 0;  // unique for the engine's lifetime (DraftInput)
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  size_t prompt_len = 0;
  // Tokens whose keys and values are in the KV cache.
  int64_t computed = 0;
  // Tokens this step runs (set by ScheduleKv).
  int64_t chunk = 0;
  BlockTable blocks;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopStringMatcher> stops;
  uint32_t generated = 0;
  bool finished = false;
  bool admitted_once = false;
  absl::Time arrival;
  absl::Time last_token;
  // Speculation: k granted this step (GrantDraftLengths), the drafter's
  // proposal, and the verify chunk's tokens (last token + drafts).
  int spec_k = 0;
  spec::DraftOutput draft;
  std::vector<int32_t> verify_tokens;
  double acceptance = kInitialAcceptance;
  int steps_without_draft = 0;

  bool prefilling() const {
    return computed + chunk < static_cast<int64_t>(tokens.size());
  }
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_INTERNAL_ENGINE_SEQUENCE_H_
