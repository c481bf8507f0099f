#include "engine/model_runner.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "engine/spec_decode/verifier.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {

ModelRunner::ModelRunner(std::string engine_name,
                         std::unique_ptr<MoeModel> model, KvCache* kv,
                         OutputProcessor* output,
                         std::unique_ptr<spec_decode::Drafter> drafter,
                         SpeculationGovernor* governor,
                         SpeculationAdvisor* advisor)
    : engine_name_(std::move(engine_name)),
      model_(std::move(model)),
      kv_(kv),
      output_(output),
      drafter_(std::move(drafter)),
      governor_(governor),
      advisor_(advisor) {
  if (drafter_ != nullptr && advisor_ != nullptr) {
    drafter_->SetLookaheadListener(
        [advisor = advisor_](const ExpertLookahead& l) {
          advisor->OnLookahead(l);
        });
  }
}

absl::Status ModelRunner::Run(std::span<RequestState* const> scheduled) {
  if (drafter_ != nullptr) Draft(scheduled);
  const absl::Time start = absl::Now();
  batch_.clear();
  first_row_.clear();
  verifying_ = false;
  int64_t rows = 0;
  for (RequestState* state : scheduled) {
    first_row_.push_back(rows);
    if (!state->draft.tokens.empty()) {
      // Verify chunk: the last token, then the drafts after it.
      state->verify_tokens.assign(1, state->tokens.back());
      state->verify_tokens.insert(state->verify_tokens.end(),
                                  state->draft.tokens.begin(),
                                  state->draft.tokens.end());
      batch_.push_back({state->verify_tokens, state->computed, &state->blocks,
                        static_cast<int>(state->verify_tokens.size())});
      verifying_ = true;
    } else {
      batch_.push_back(
          {std::span(state->tokens).subspan(state->computed, state->chunk),
           state->computed, &state->blocks});
    }
    rows += batch_.back().num_logits;
  }
  const double stall_before =
      advisor_ != nullptr ? advisor_->link_stall_seconds() : 0;
  absl::Status st = model_->Forward(batch_, kv_, &logits_);
  forward_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
  if (st.ok() && governor_ != nullptr) {
    const double stalled =
        advisor_ != nullptr ? advisor_->link_stall_seconds() - stall_before : 0;
    governor_->RecordForwardTime(batch_, forward_seconds_, stalled);
  }
  return st;
}

Delivery ModelRunner::Deliver(size_t i, RequestState* state) {
  const float* rows = logits_.data() + first_row_[i] * output_->vocab_size();
  if (batch_[i].num_logits > 1) return Verify(state, rows);
  const bool done_prefill = !state->prefilling();
  state->computed += state->chunk;
  state->chunk = 0;
  if (!done_prefill) return {};
  return output_->Emit(state, rows);
}

void ModelRunner::EndStep() {
  if (drafter_ == nullptr) return;
  if (verifying_) {
    step_spec_.verify_seconds += forward_seconds_;
    if (metrics_ != nullptr) metrics_->AddVerifySeconds(forward_seconds_);
  }
  base::MutexLock lock(&mu_);
  spec_stats_.Add(step_spec_);
  step_spec_ = {};
}

SpecStats ModelRunner::spec_stats() const {
  base::MutexLock lock(&mu_);
  return spec_stats_;
}

void ModelRunner::Draft(std::span<RequestState* const> scheduled) {
  std::vector<RequestState*> drafting;
  std::vector<spec_decode::DraftInput> inputs;
  for (RequestState* state : scheduled) {
    if (state->spec_k <= 0) continue;
    drafting.push_back(state);
    // Mixed with the position so each step's draft draws differ, and fixed
    // for a seeded request.
    const uint64_t seed = state->request.sampling.seed ^
                          (0x9E3779B97F4A7C15ull * (state->tokens.size() + 1));
    inputs.push_back({state->tokens, &state->blocks, state->spec_k,
                      state->sampler.get(), seed, state->id});
  }
  if (inputs.empty()) return;
  std::vector<spec_decode::DraftOutput> outputs;
  const absl::Time start = absl::Now();
  absl::Status st = drafter_->Propose(inputs, &outputs, &lookahead_);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  step_spec_.draft_seconds += seconds;
  if (metrics_ != nullptr) metrics_->AddDraftSeconds(seconds);
  int positions = 0;
  for (const spec_decode::DraftInput& in : inputs) {
    positions = std::max(positions, in.k);
  }
  governor_->RecordDraftTime(seconds, positions);
  if (st.ok() && outputs.size() != inputs.size()) {
    st = absl::InternalError("drafter returned the wrong number of drafts");
  }
  if (!st.ok()) {
    SPDLOG_WARN("engine '{}': drafter {} failed, decoding without drafts: {}",
                engine_name_, drafter_->name(), st.ToString());
    return;
  }
  if (!lookahead_.empty() && advisor_ != nullptr) {
    advisor_->OnLookahead(lookahead_);
  }
  const int64_t vocab = output_->vocab_size();
  for (size_t i = 0; i < drafting.size(); ++i) {
    spec_decode::DraftOutput& out = outputs[i];
    const bool valid =
        static_cast<int>(out.tokens.size()) <= drafting[i]->spec_k &&
        (out.q.empty() || out.q.size() == out.tokens.size()) &&
        std::all_of(out.tokens.begin(), out.tokens.end(),
                    [vocab](int32_t t) { return t >= 0 && t < vocab; });
    if (valid) drafting[i]->draft = std::move(out);
  }
}

Delivery ModelRunner::Verify(RequestState* state, const float* rows) {
  const int64_t vocab = output_->vocab_size();
  const spec_decode::DraftOutput& draft = state->draft;
  const int num_drafts = static_cast<int>(draft.tokens.size());
  GenerationEvent event;
  FinishReason reason = FinishReason::kNone;
  int accepted = 0, delivered = 0, judged = 0;
  for (int i = 0; i <= num_drafts && reason == FinishReason::kNone; ++i) {
    const float* row = rows + i * vocab;
    const std::span<float> logits = output_->MaskedRow(*state, row);
    int32_t token;
    bool took_draft = false;
    if (i < num_drafts) {
      const TokenDistribution p = state->sampler->Distribution(logits);
      const DraftVerdict verdict = VerifyDraftToken(
          p, draft.tokens[i], draft.q.empty() ? nullptr : &draft.q[i],
          *state->sampler);
      state->sampler->Accept(verdict.token);
      token = verdict.token;
      took_draft = verdict.accepted;
      ++judged;
    } else {
      token = state->sampler->Sample(logits);  // all drafts passed: bonus
    }
    accepted += took_draft;
    ++delivered;
    reason = output_->Deliver(state, token, row, &event);
    if (!took_draft) break;
    if (reason == FinishReason::kNone &&
        absl::Now() >= state->request.deadline) {
      reason = FinishReason::kTimeLimit;
    }
  }
  // Acceptance EMAs over the drafts that were judged: the request's, and
  // the engine's per position (conditional on reaching it).
  governor_->RecordVerification(state, judged, accepted);
  if (state->request.count_in_metrics) {
    SpecStats& s = step_spec_;
    s.drafts++;
    s.draft_tokens += num_drafts;
    s.accepted_tokens += accepted;
    if (static_cast<int>(s.accepted_per_position.size()) < num_drafts) {
      s.accepted_per_position.resize(num_drafts, 0);
    }
    for (int j = 0; j < accepted; ++j) s.accepted_per_position[j]++;
  }
  if (metrics_ != nullptr && state->request.count_in_metrics) {
    metrics_->CountVerification(num_drafts, accepted);
  }
  state->draft = {};
  state->spec_k = 0;
  if (reason == FinishReason::kNone) {
    // Keys and values of the accepted drafts stay; the rejected positions
    // roll back.
    state->computed = static_cast<int64_t>(state->tokens.size()) - 1;
    state->chunk = 0;
    kv_->Truncate(&state->blocks, state->computed);
  }
  return output_->EndEvent(state, reason, std::move(event), delivered);
}

}  // namespace moeserve::engine
