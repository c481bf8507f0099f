// RequestState: one request as the engine sees it from admission to its
// last event: the scheduler's public type (engine/scheduler.h), read and
// written by the model runner (engine/model_runner.h) and the output
// processor (engine/output_processor.h) within a step.
//
// Ownership: the scheduler owns every RequestState (waiting, running or
// dropped); the state owns the request's sampler, detokenizer and stop
// matcher, and shares the RequestStream with the client.
// Thread-safety: touched by the scheduler thread only, except that the
// scheduler's queue thread may finish a request that is still queued (it
// then owns it: it left every list under the scheduler's lock).
#ifndef MOESERVE_ENGINE_REQUEST_STATE_H_
#define MOESERVE_ENGINE_REQUEST_STATE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "engine/generation.h"
#include "engine/kv_cache.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_strings.h"
#include "engine/spec_decode/drafter.h"
#include "engine/tokenizer.h"

namespace moeserve::engine {

// Adaptive k starts optimistic, so a new request tries speculation at once.
inline constexpr double kInitialAcceptance = 0.7;

struct RequestState {
  GenerationRequest request;
  uint64_t id = 0;  // unique for the engine's lifetime (DraftInput)
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  size_t prompt_len = 0;
  // Tokens whose keys and values are in the KV cache.
  int64_t computed = 0;
  // Tokens this step runs (set by the scheduler).
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
  // Speculation: k granted this step (Scheduler), the drafter's proposal,
  // and the verify chunk's tokens (last token + drafts; ModelRunner).
  int spec_k = 0;
  spec_decode::DraftOutput draft;
  std::vector<int32_t> verify_tokens;
  double acceptance = kInitialAcceptance;
  int steps_without_draft = 0;

  bool prefilling() const {
    return computed + chunk < static_cast<int64_t>(tokens.size());
  }
  // Runs one decode token this step (its prompt is in the KV cache and it
  // has generated at least one token): the only kind that may draft.
  bool decoding() const {
    return chunk == 1 && computed + 1 == static_cast<int64_t>(tokens.size()) &&
           generated >= 1;
  }
};

// A new request's state: its sampler over `vocab_size` ids, a detokenizer
// primed with the prompt (so the first generated token keeps its leading
// space), its stop-string matcher, its stream and its arrival time.
std::unique_ptr<RequestState> NewRequestState(GenerationRequest request,
                                              const Tokenizer* tokenizer,
                                              int32_t vocab_size);

// Why `state` must end now, or kNone. The client's deadline comes first:
// when it passes gRPC also cancels the call, and the finish must say
// "deadline".
FinishReason ExpiryReason(const RequestState& state, absl::Time now);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_REQUEST_STATE_H_
