// The speculative half of the engine's step (engine.h, "Speculative
// decoding"): how many draft tokens each decoding sequence gets, asking the
// drafter, and verifying a verify chunk's rows.
#include <algorithm>
#include <cmath>

#include "absl/time/clock.h"
#include "engine/engine.h"
#include "engine/internal/engine_sequence.h"
#include "engine/spec/verifier.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {
namespace {

// Adaptive k: an EMA of "this draft token was accepted" per sequence
// (starting at kInitialAcceptance).
constexpr double kAcceptanceWeight = 0.2;
// Draft position j (1-based) is worth verifying while the chance that all
// drafts up to it pass, acceptance^j, stays at or above this.
constexpr double kWorthwhileRun = 0.35;
// A sequence whose k fell to 0 drafts one token again after this many steps,
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

// The k `seq` would like this step (before the budget): fixed or adaptive,
// clamped so the k + 1 tokens a verification may emit stay within
// max_new_tokens and every draft position within the context.
int Engine::WantedDraftLength(Sequence* seq) {
  int k = options_.num_speculative_tokens;
  if (k == 0 && step_k_ >= 0) {
    k = step_k_;
  } else if (k == 0) {
    k = DraftLengthFor(seq->acceptance, options_.max_speculative_tokens);
    if (k == 0 && ++seq->steps_without_draft >= kProbeInterval) {
      seq->steps_without_draft = 0;
      k = 1;
    }
  }
  const int64_t room_new =
      static_cast<int64_t>(seq->request.max_new_tokens) - seq->generated - 1;
  const int64_t room_context = weights_->config().max_position_embeddings -
                               static_cast<int64_t>(seq->tokens.size());
  return static_cast<int>(
      std::max<int64_t>(0, std::min({int64_t{k}, room_new, room_context})));
}

// Grants draft tokens to decoding sequences from what the plain schedule
// left of the token budget and the KV cache. The first token after a
// prefill is never speculative (its logits come from the prefill).
void Engine::GrantDraftLengths(const std::vector<Sequence*>& scheduled,
                               int64_t budget) {
  step_k_ = options_.num_speculative_tokens == 0
                ? GovernorDraftLength(scheduled)
                : -1;
  for (Sequence* seq : scheduled) {
    seq->spec_k = 0;
    seq->draft = {};
    const bool decoding =
        seq->chunk == 1 &&
        seq->computed + 1 == static_cast<int64_t>(seq->tokens.size()) &&
        seq->generated >= 1;
    if (!decoding || budget <= 0) continue;
    int k = static_cast<int>(std::min<int64_t>(WantedDraftLength(seq), budget));
    // Grow is all or nothing: shrink k until its blocks fit.
    while (k > 0 && !kv_->Grow(&seq->blocks, seq->computed + 1 + k).ok()) --k;
    seq->spec_k = k;
    budget -= k;
  }
}

// Adaptive k: the offload policy may choose one k for the step from what
// the engine measured (acceptance per position, draft and verify time) and
// the link's transfer time.
int Engine::GovernorDraftLength(const std::vector<Sequence*>& scheduled) {
  DraftLengthQuery query;
  query.max_k = options_.max_speculative_tokens;
  int64_t context_sum = 0;
  for (const Sequence* seq : scheduled) {
    if (seq->chunk != 1 || seq->generated < 1) continue;
    ++query.num_seqs;
    const int64_t context = static_cast<int64_t>(seq->tokens.size());
    context_sum += context;
    query.max_context_tokens = std::max(query.max_context_tokens, context);
  }
  if (query.num_seqs == 0) return -1;
  query.mean_context_tokens = static_cast<double>(context_sum) / query.num_seqs;
  query.acceptance = timings_.acceptance;
  query.draft_seconds_per_position = timings_.draft_seconds_per_position;
  query.verify_seconds_base = timings_.verify_seconds_base;
  query.verify_seconds_per_draft = timings_.verify_seconds_per_draft;
  query.link_seconds_per_expert = experts_->link_seconds_per_transfer();
  const int k = experts_->ChooseDraftLength(query);
  return k < 0 ? -1 : std::min(k, options_.max_speculative_tokens);
}

void Engine::RecordForwardTime(std::span<const SequenceChunk> batch,
                               double seconds) {
  int drafts = 0;
  bool prefill = false;
  for (const SequenceChunk& c : batch) {
    if (c.num_logits > 1) {
      drafts += c.num_logits - 1;
    } else if (c.tokens.size() > 1) {
      prefill = true;
    }
  }
  if (prefill) return;  // prefill chunks would blur both figures
  if (drafts == 0) {
    Ema(&timings_.verify_seconds_base, seconds);
  } else if (timings_.verify_seconds_base > 0) {
    Ema(&timings_.verify_seconds_per_draft,
        std::max(0.0, seconds - timings_.verify_seconds_base) / drafts);
  }
}

// Asks the drafter for every sequence granted k > 0. A failed or malformed
// proposal costs only this step's speculation.
void Engine::Draft(const std::vector<Sequence*>& scheduled) {
  std::vector<Sequence*> drafting;
  std::vector<spec::DraftInput> inputs;
  for (Sequence* seq : scheduled) {
    if (seq->spec_k <= 0) continue;
    drafting.push_back(seq);
    // Mixed with the position so each step's draft draws differ, and fixed
    // for a seeded request.
    const uint64_t seed = seq->request.sampling.seed ^
                          (0x9E3779B97F4A7C15ull * (seq->tokens.size() + 1));
    inputs.push_back({seq->tokens, &seq->blocks, seq->spec_k,
                      seq->sampler.get(), seed, seq->id});
  }
  if (inputs.empty()) return;
  std::vector<spec::DraftOutput> outputs;
  const absl::Time start = absl::Now();
  absl::Status st = drafter_->Propose(inputs, &outputs, &lookahead_);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  step_spec_.draft_seconds += seconds;
  if (metrics_ != nullptr) metrics_->AddDraftSeconds(seconds);
  int positions = 0;
  for (const spec::DraftInput& in : inputs)
    positions = std::max(positions, in.k);
  Ema(&timings_.draft_seconds_per_position, seconds / positions);
  if (st.ok() && outputs.size() != inputs.size()) {
    st = absl::InternalError("drafter returned the wrong number of drafts");
  }
  if (!st.ok()) {
    SPDLOG_WARN("engine '{}': drafter {} failed, decoding without drafts: {}",
                options_.name, drafter_->name(), st.ToString());
    return;
  }
  if (!lookahead_.empty()) experts_->OnLookahead(lookahead_);
  const int64_t vocab = weights_->config().vocab_size;
  for (size_t i = 0; i < drafting.size(); ++i) {
    spec::DraftOutput& out = outputs[i];
    const bool valid =
        static_cast<int>(out.tokens.size()) <= drafting[i]->spec_k &&
        (out.q.empty() || out.q.size() == out.tokens.size()) &&
        std::all_of(out.tokens.begin(), out.tokens.end(),
                    [vocab](int32_t t) { return t >= 0 && t < vocab; });
    if (valid) drafting[i]->draft = std::move(out);
  }
}

// Verifies `seq`'s drafts against the target's rows (one per draft, then
// the bonus row), row by row so penalties and min_new_tokens see the true
// history, and streams the accepted run plus the target's own token. Stops,
// EOS, length and the time limit apply token by token.
void Engine::EmitVerified(Sequence* seq, const float* rows) {
  const int64_t vocab = weights_->config().vocab_size;
  const spec::DraftOutput& draft = seq->draft;
  const int num_drafts = static_cast<int>(draft.tokens.size());
  GenerationEvent event;
  FinishReason reason = FinishReason::kNone;
  int accepted = 0, delivered = 0, judged = 0;
  for (int i = 0; i <= num_drafts && reason == FinishReason::kNone; ++i) {
    const float* row = rows + i * vocab;
    const std::span<float> logits = MaskedRow(*seq, row);
    int32_t token;
    bool took_draft = false;
    if (i < num_drafts) {
      const TokenDistribution p = seq->sampler->Distribution(logits);
      const DraftVerdict verdict = VerifyDraftToken(
          p, draft.tokens[i], draft.q.empty() ? nullptr : &draft.q[i],
          *seq->sampler);
      seq->sampler->Accept(verdict.token);
      token = verdict.token;
      took_draft = verdict.accepted;
      ++judged;
    } else {
      token = seq->sampler->Sample(logits);  // all drafts passed: bonus
    }
    accepted += took_draft;
    ++delivered;
    reason = Deliver(seq, token, row, &event);
    if (!took_draft) break;
    if (reason == FinishReason::kNone && absl::Now() >= seq->request.deadline) {
      reason = FinishReason::kTimeLimit;
    }
  }
  // Acceptance EMAs over the drafts that were judged: the sequence's, and
  // the engine's per position (conditional on reaching it).
  if (static_cast<int>(timings_.acceptance.size()) < judged) {
    timings_.acceptance.resize(judged, kInitialAcceptance);
  }
  for (int j = 0; j < judged; ++j) {
    const double outcome = j < accepted ? 1.0 : 0.0;
    seq->acceptance += kAcceptanceWeight * (outcome - seq->acceptance);
    timings_.acceptance[j] +=
        kAcceptanceWeight * (outcome - timings_.acceptance[j]);
  }
  if (seq->request.count_in_metrics) {
    SpecStats& s = step_spec_;
    s.drafts++;
    s.draft_tokens += num_drafts;
    s.accepted_tokens += accepted;
    if (static_cast<int>(s.accepted_per_position.size()) < num_drafts) {
      s.accepted_per_position.resize(num_drafts, 0);
    }
    for (int j = 0; j < accepted; ++j) s.accepted_per_position[j]++;
  }
  if (metrics_ != nullptr && seq->request.count_in_metrics) {
    metrics_->CountVerification(num_drafts, accepted);
  }
  seq->draft = {};
  seq->spec_k = 0;
  if (reason == FinishReason::kNone) {
    // Keys and values of the accepted drafts stay; the rejected positions
    // roll back.
    seq->computed = static_cast<int64_t>(seq->tokens.size()) - 1;
    seq->chunk = 0;
    kv_->Truncate(&seq->blocks, seq->computed);
  }
  EndEvent(seq, reason, std::move(event), delivered);
}

}  // namespace moeserve::engine
