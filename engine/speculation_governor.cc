#include "engine/speculation_governor.h"

#include <algorithm>
#include <cmath>

namespace moeserve::engine {
namespace {

// Adaptive k: an EMA of "this draft token was accepted" per request
// (starting at kInitialAcceptance).
constexpr double kAcceptanceWeight = 0.2;
// Draft position j (1-based) is worth verifying while the chance that all
// drafts up to it pass, acceptance^j, stays at or above this.
constexpr double kWorthwhileRun = 0.35;
// A request whose k fell to 0 drafts one token again after this many steps,
// so its EMA can recover when the text becomes predictable.
constexpr int kProbeInterval = 8;

// Timing EMAs start at their first sample.
constexpr double kTimingWeight = 0.1;
void Ema(double* value, double sample) {
  *value = *value == 0 ? sample : *value + kTimingWeight * (sample - *value);
}

int DraftLengthFor(double acceptance, int max_k) {
  if (acceptance >= 0.999) return max_k;
  if (acceptance <= kWorthwhileRun) return 0;
  const int k =
      static_cast<int>(std::log(kWorthwhileRun) / std::log(acceptance));
  return std::clamp(k, 0, max_k);
}

}  // namespace

void SpeculationGovernor::BeginStep(std::span<RequestState* const> scheduled) {
  step_k_ = fixed_k_ == 0 ? PolicyDraftLength(scheduled) : -1;
}

int SpeculationGovernor::WantedDraftLength(RequestState* state) {
  int k = fixed_k_;
  if (k == 0 && step_k_ >= 0) {
    k = step_k_;
  } else if (k == 0) {
    k = DraftLengthFor(state->acceptance, max_k_);
    if (k == 0 && ++state->steps_without_draft >= kProbeInterval) {
      state->steps_without_draft = 0;
      k = 1;
    }
  }
  const int64_t room_new = static_cast<int64_t>(state->request.max_new_tokens) -
                           state->generated - 1;
  const int64_t room_context =
      max_position_ - static_cast<int64_t>(state->tokens.size());
  return static_cast<int>(
      std::max<int64_t>(0, std::min({int64_t{k}, room_new, room_context})));
}

int SpeculationGovernor::PolicyDraftLength(
    std::span<RequestState* const> scheduled) {
  if (advisor_ == nullptr) return -1;
  DraftLengthQuery query;
  query.max_k = max_k_;
  int64_t context_sum = 0;
  for (const RequestState* state : scheduled) {
    if (state->chunk != 1 || state->generated < 1) continue;
    ++query.num_seqs;
    const int64_t context = static_cast<int64_t>(state->tokens.size());
    context_sum += context;
    query.max_context_tokens = std::max(query.max_context_tokens, context);
  }
  if (query.num_seqs == 0) return -1;
  query.mean_context_tokens = static_cast<double>(context_sum) / query.num_seqs;
  query.acceptance = timings_.acceptance;
  query.draft_seconds_per_position = timings_.draft_seconds_per_position;
  query.verify_seconds_base = timings_.verify_seconds_base;
  query.verify_seconds_per_draft = timings_.verify_seconds_per_draft;
  query.prefill_seconds = timings_.prefill_seconds;
  query.link_seconds_per_expert = advisor_->link_seconds_per_transfer();
  const int k = advisor_->ChooseDraftLength(query);
  return k < 0 ? -1 : std::min(k, max_k_);
}

void SpeculationGovernor::RecordForwardTime(
    std::span<const SequenceChunk> batch, double seconds,
    double stall_seconds) {
  int drafts = 0;
  bool prefill = false;
  for (const SequenceChunk& c : batch) {
    if (c.num_logits > 1) {
      drafts += c.num_logits - 1;
    } else if (c.tokens.size() > 1) {
      prefill = true;
    }
  }
  if (prefill) {  // its rows would blur the decode and verify figures
    Ema(&timings_.prefill_seconds, seconds);
    return;
  }
  const double compute = std::max(0.0, seconds - std::max(stall_seconds, 0.0));
  if (drafts == 0) {
    Ema(&timings_.verify_seconds_base, compute);
  } else if (timings_.verify_seconds_base > 0) {
    Ema(&timings_.verify_seconds_per_draft,
        std::max(0.0, compute - timings_.verify_seconds_base) / drafts);
  }
}

void SpeculationGovernor::RecordDraftTime(double seconds, int positions) {
  Ema(&timings_.draft_seconds_per_position, seconds / positions);
}

void SpeculationGovernor::RecordVerification(RequestState* state, int judged,
                                             int accepted) {
  if (static_cast<int>(timings_.acceptance.size()) < judged) {
    timings_.acceptance.resize(judged, kInitialAcceptance);
  }
  for (int j = 0; j < judged; ++j) {
    const double outcome = j < accepted ? 1.0 : 0.0;
    state->acceptance += kAcceptanceWeight * (outcome - state->acceptance);
    timings_.acceptance[j] +=
        kAcceptanceWeight * (outcome - timings_.acceptance[j]);
  }
}

}  // namespace moeserve::engine
