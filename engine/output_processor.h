// OutputProcessor: turns a request's logits rows into what its client sees:
// the EOS and stop-id masks a token is sampled under, the token appended to
// the request, its logprobs, UTF-8-complete text with stop strings held
// back, the finish checks (EOS, stop id or string, max_new_tokens, context
// length), the serving metrics of each event, and the last event's text
// and push.
//
// It never decides a request's fate beyond "this token ends it": the
// scheduler (scheduler.h) frees the request's KV blocks and id and then
// calls PushFinal.
//
// Ownership: borrows the metrics (may be null). Owns the masked-row scratch.
// Thread-safety: MaskedRow, Deliver, Emit and EndEvent from the step thread
// only; FinishText and PushFinal for one request from whichever thread owns
// it (the step thread, or the scheduler's queue thread for a request that
// never left the queue).
#ifndef MOESERVE_ENGINE_OUTPUT_PROCESSOR_H_
#define MOESERVE_ENGINE_OUTPUT_PROCESSOR_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_metrics.h"
#include "engine/generation.h"
#include "engine/request_state.h"

namespace moeserve::engine {

// What delivering one step's tokens to a request came to: kNone (the event
// was streamed), or the reason it ends, with its last event still to push
// (Scheduler::Finish).
struct Delivery {
  FinishReason reason = FinishReason::kNone;
  GenerationEvent event;
  bool ends() const { return reason != FinishReason::kNone; }
};

class OutputProcessor {
 public:
  // `eos_ids`: every end-of-sequence id (the tokenizer's and the config's).
  OutputProcessor(std::vector<int32_t> eos_ids, int64_t vocab_size,
                  int64_t max_position)
      : eos_ids_(std::move(eos_ids)),
        vocab_size_(vocab_size),
        max_position_(max_position) {}

  // Before the threads start (metrics are created last).
  void set_metrics(EngineMetrics* metrics) { metrics_ = metrics; }
  EngineMetrics* metrics() const { return metrics_; }
  int64_t vocab_size() const { return vocab_size_; }

  // `row` with the EOS (ignore_eos, min_new_tokens) and min_new_tokens
  // stop-id masks applied: valid until the next call.
  std::span<float> MaskedRow(const RequestState& state, const float* row);
  // Appends `token` (chosen from `row`) to `state` and `event`; returns why
  // the request ends with it, or kNone.
  FinishReason Deliver(RequestState* state, int32_t token, const float* row,
                       GenerationEvent* event);
  // Samples the next token of `state` from its logits row and delivers it.
  Delivery Emit(RequestState* state, const float* row);
  // Records the `num_tokens` tokens of `event` in the metrics (a step that
  // emits n tokens records n inter-token gaps of dt / n) and streams it, or,
  // when `reason` ends the request, returns it with its final text.
  Delivery EndEvent(RequestState* state, FinishReason reason,
                    GenerationEvent event, int num_tokens);
  // Appends the text still held back (a partial character, a possible stop
  // string prefix) when a request ends for a reason other than a stop
  // string.
  static void FinishText(RequestState* state, GenerationEvent* event);
  // Counts the finish and pushes the request's last event.
  void PushFinal(RequestState* state, FinishReason reason,
                 GenerationEvent event, const std::string& error);

 private:
  const std::vector<int32_t> eos_ids_;
  const int64_t vocab_size_;
  const int64_t max_position_;
  EngineMetrics* metrics_ = nullptr;
  std::vector<float> masked_;  // MaskedRow's scratch
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OUTPUT_PROCESSOR_H_
