#include "engine/output_processor.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/time/clock.h"

namespace moeserve::engine {

std::span<float> OutputProcessor::MaskedRow(const RequestState& state,
                                            const float* row) {
  const GenerationRequest& r = state.request;
  std::vector<float>& logits = masked_;
  logits.assign(row, row + vocab_size_);
  constexpr float kNeverSample = -std::numeric_limits<float>::infinity();
  const bool before_min = state.generated < r.min_new_tokens;
  // ignore_eos masks EOS for the whole request (llama.cpp's and vLLM's
  // meaning): it is never sampled, so no EOS text or id reaches the client.
  if (r.ignore_eos || before_min) {
    for (int32_t eos : eos_ids_) logits[eos] = kNeverSample;
  }
  if (before_min) {
    for (int32_t t : r.stop_token_ids) logits[t] = kNeverSample;
  }
  return logits;
}

Delivery OutputProcessor::Emit(RequestState* state, const float* row) {
  const int32_t token = state->sampler->Sample(MaskedRow(*state, row));
  GenerationEvent event;
  const FinishReason reason = Deliver(state, token, row, &event);
  return EndEvent(state, reason, std::move(event), 1);
}

FinishReason OutputProcessor::Deliver(RequestState* state, int32_t token,
                                      const float* row,
                                      GenerationEvent* event) {
  const GenerationRequest& r = state->request;
  if (r.logprobs > 0) {
    auto [chosen, top] =
        TopLogprobs({row, static_cast<size_t>(vocab_size_)}, token, r.logprobs);
    event->logprobs.push_back({chosen, std::move(top)});
  }
  state->tokens.push_back(token);
  ++state->generated;
  event->tokens.push_back(token);
  const bool is_eos =
      !r.ignore_eos &&
      std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
  if (is_eos) return FinishReason::kEos;
  const bool is_stop_id =
      std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) !=
      r.stop_token_ids.end();
  absl::StatusOr<std::string> delta = state->detokenizer->Next(token);
  StopStringMatcher::Step step = state->stops->Push(delta.ok() ? *delta : "");
  event->text += step.emit;
  if (step.stopped || is_stop_id) return FinishReason::kStopSequence;
  if (state->generated >= r.max_new_tokens ||
      static_cast<int64_t>(state->tokens.size()) >= max_position_) {
    return FinishReason::kLength;
  }
  return FinishReason::kNone;
}

Delivery OutputProcessor::EndEvent(RequestState* state, FinishReason reason,
                                   GenerationEvent event, int num_tokens) {
  const GenerationRequest& r = state->request;
  if (metrics_ != nullptr && r.count_in_metrics) {
    const absl::Time now = absl::Now();
    if (state->generated == static_cast<uint32_t>(num_tokens)) {
      metrics_->ObserveTimeToFirstToken(
          absl::ToDoubleSeconds(now - state->arrival));
      metrics_->AddPromptTokens(static_cast<double>(state->prompt_len));
    } else {
      const double gap =
          absl::ToDoubleSeconds(now - state->last_token) / num_tokens;
      for (int i = 0; i < num_tokens; ++i) {
        metrics_->ObserveInterTokenLatency(gap);
      }
    }
    metrics_->AddGenerationTokens(num_tokens);
    state->last_token = now;
  }
  if (reason == FinishReason::kNone) {
    event.prompt_tokens = static_cast<uint32_t>(state->prompt_len);
    event.completion_tokens = state->generated;
    state->stream->Push(std::move(event));
    return {};
  }
  if (reason != FinishReason::kStopSequence) FinishText(state, &event);
  return {reason, std::move(event)};
}

void OutputProcessor::FinishText(RequestState* state, GenerationEvent* event) {
  absl::StatusOr<std::string> tail = state->detokenizer->Flush();
  event->text += state->stops->Push(tail.ok() ? *tail : "").emit;
  event->text += state->stops->Flush();
}

void OutputProcessor::PushFinal(RequestState* state, FinishReason reason,
                                GenerationEvent event,
                                const std::string& error) {
  if (metrics_ != nullptr && state->request.count_in_metrics) {
    metrics_->CountFinished(reason);
    metrics_->ObserveRequestLatency(
        absl::ToDoubleSeconds(absl::Now() - state->arrival));
  }
  event.finish = reason;
  event.error = error;
  event.prompt_tokens = static_cast<uint32_t>(state->prompt_len);
  event.completion_tokens = state->generated;
  state->stream->Push(std::move(event));
}

}  // namespace moeserve::engine
