// Verification of drafted tokens for lossless speculative sampling (Leviathan
// et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
// Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling").
//
// A drafter proposes tokens d_1..d_k, d_i drawn from its own processed
// distribution q_i; one target forward pass over the drafts gives the
// target's logits at every position, which the target request's Sampler
// turns into p_i = sampler.Distribution(row i). Row i is verified by
// VerifyDraftToken(p_i, d_i, q_i, sampler):
//
//  * sampled (temperature > 0): accept d_i with probability
//    min(1, p_i(d_i) / q_i(d_i)); on rejection emit a token drawn from the
//    residual norm(max(0, p_i - q_i)). For every token x,
//      P(emit x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y)))
//                  * max(0, p(x) - q(x)) / sum_y max(0, p(y) - q(y))
//                = min(p(x), q(x)) + max(0, p(x) - q(x)) = p(x),
//    because 1 - sum_y min(p, q) = sum_y max(0, p - q). So each emitted token
//    has exactly the target's distribution: speculative decoding is lossless,
//    whatever q is (a better q only raises the acceptance rate, which is
//    sum_x min(p(x), q(x))). A deterministic drafter is q = the point mass on
//    its token (pass q = nullptr).
//  * greedy (temperature 0): p_i is the target's argmax; accept iff the draft
//    equals it, else emit it. Exactly the tokens plain greedy decoding gives.
//
// Rows MUST be processed in order, stopping at the first rejection (its
// token replaces the draft and the later drafts are discarded), and the
// caller MUST record each emitted token with sampler.Accept() before it
// computes the next row's Distribution(): the target's penalties depend on
// the history, so p_{i+1} must be the distribution given d_1..d_i exactly as
// non-speculative decoding would have seen it. When every draft is accepted,
// SampleBonus() on the row after the last draft gives one more token for
// free. Each row consumes a fixed number of draws from the request's
// generator (sampled: one for the test, one more on rejection; bonus: one;
// greedy: none), so a seeded request's output depends only on its seed, the
// logits and the drafts, never on what else shares the batch.
#ifndef MOESERVE_ENGINE_SPEC_DECODE_VERIFIER_H_
#define MOESERVE_ENGINE_SPEC_DECODE_VERIFIER_H_

#include <cstdint>

#include "engine/sampling/sampler.h"

namespace moeserve::engine {

struct DraftVerdict {
  bool accepted = false;
  // The token to emit at this position: the draft when accepted, else the
  // replacement (and the caller stops at this row).
  int32_t token = 0;
};

// Verifies one drafted token. `p`: the target's processed distribution at
// this position (sampler.Distribution() of the target's logits); `draft`:
// the drafted token; `q`: the drafter's processed distribution that `draft`
// was drawn from, or nullptr when the drafter is deterministic (a point mass
// on `draft`). `sampler`: the target request's sampler, whose greedy() picks
// the rule and whose generator supplies the draws. Records nothing: the
// caller Accept()s the returned token.
// REQUIRES: p non-empty with probabilities summing to 1; q, when given,
// non-empty with q->Prob(draft) > 0 (a zero there is treated as a point mass
// on `draft`).
DraftVerdict VerifyDraftToken(const TokenDistribution& p, int32_t draft,
                              const TokenDistribution* q, Sampler& sampler);

// The extra token after every draft of a round was accepted: a draw from the
// target's distribution `p` at the position after the last draft (greedy:
// its argmax, no draw). Records nothing.
int32_t SampleBonus(const TokenDistribution& p, Sampler& sampler);

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_SPEC_DECODE_VERIFIER_H_
