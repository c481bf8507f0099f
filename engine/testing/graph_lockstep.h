// Two MoeModels of one checkpoint fed the same forward passes in lockstep,
// their logits compared bit for bit at every step: the check that graph mode
// (issue 30 item 3; engine/internal/dense_graphs.h) changes no logit. The
// passes cover what decides a graph key and what a replay must refresh:
// a batched prefill (eager), decode steps of every sequence past several
// KV-block boundaries (positions, slots and the block-table stride bucket
// change), a batch of one, a verify chunk of 3 tokens wanting 3 logits rows,
// and the first shape again (replays). Tokens are the first model's greedy
// picks. Used by dense_graphs_test (CPU, simulated graphs) and
// cuda_graphs_test (CUDA graphs on and off).
#ifndef MOESERVE_ENGINE_TESTING_GRAPH_LOCKSTEP_H_
#define MOESERVE_ENGINE_TESTING_GRAPH_LOCKSTEP_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/moe_model.h"
#include "gtest/gtest.h"

namespace moeserve::engine::testing {

// One model, its experts and its KV cache.
struct LockstepRunner {
  std::unique_ptr<ExpertProvider> experts;
  std::unique_ptr<MoeModel> model;
  std::unique_ptr<KvCache> cache;
  std::vector<BlockTable> tables;
};

// One forward pass: for each i, chunks[i] of sequence seqs[i] at pos[i],
// num_logits[i] rows wanted. Returns the logits (empty on failure).
inline std::vector<float> LockstepPass(
    LockstepRunner& r, const std::vector<int>& seqs,
    const std::vector<std::vector<int32_t>>& chunks,
    const std::vector<int64_t>& pos, const std::vector<int>& num_logits) {
  std::vector<SequenceChunk> batch;
  for (int s : seqs) {
    // First: the chunks point into the tables.
    if (r.tables.size() <= static_cast<size_t>(s)) r.tables.resize(s + 1);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int s = seqs[i];
    absl::Status grown = r.cache->Grow(&r.tables[s], pos[s] + chunks[i].size());
    EXPECT_TRUE(grown.ok()) << grown;
    batch.push_back({chunks[i], pos[s], &r.tables[s], num_logits[i]});
  }
  std::vector<float> logits;
  absl::Status st = r.model->Forward(batch, r.cache.get(), &logits);
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) logits.clear();
  return logits;
}

// Runs the passes on `a` and `b` (prompts: at most 3 are used) and fails
// the test at the first pass whose logits differ in any bit. Returns the
// passes compared.
inline int RunGraphLockstep(LockstepRunner& a, LockstepRunner& b,
                            std::vector<std::vector<int32_t>> prompts,
                            int64_t vocab) {
  if (prompts.size() > 3) prompts.resize(3);
  const int num = static_cast<int>(prompts.size());
  std::vector<int64_t> pos(num, 0);
  std::vector<int32_t> next(num, 0);
  int passes = 0;
  // Compares and advances: `seqs` consumed `chunks`; the last logits row of
  // each sequence picks its next token.
  auto pass = [&](const std::vector<int>& seqs,
                  const std::vector<std::vector<int32_t>>& chunks,
                  const std::vector<int>& num_logits, const std::string& what) {
    std::vector<float> la = LockstepPass(a, seqs, chunks, pos, num_logits);
    std::vector<float> lb = LockstepPass(b, seqs, chunks, pos, num_logits);
    ++passes;
    EXPECT_FALSE(la.empty()) << what;
    EXPECT_EQ(la.size(), lb.size()) << what;
    if (la.empty() || la.size() != lb.size()) return false;
    if (std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) != 0) {
      size_t at = 0;
      while (at < la.size() &&
             std::memcmp(&la[at], &lb[at], sizeof(float)) == 0) {
        ++at;
      }
      ADD_FAILURE() << what << ": logits differ first at row " << at / vocab
                    << " column " << at % vocab << ": " << la[at] << " vs "
                    << lb[at];
      return false;
    }
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      row += num_logits[i];
      const float* last = la.data() + (row - 1) * vocab;
      next[seqs[i]] =
          static_cast<int32_t>(std::max_element(last, last + vocab) - last);
      pos[seqs[i]] += chunks[i].size();
    }
    return true;
  };
  std::vector<int> all(num);
  for (int i = 0; i < num; ++i) all[i] = i;
  auto decode = [&](const std::vector<int>& seqs, int steps,
                    const std::string& what) {
    for (int step = 0; step < steps; ++step) {
      std::vector<std::vector<int32_t>> chunks;
      for (int s : seqs) chunks.push_back({next[s]});
      if (!pass(seqs, chunks, std::vector<int>(seqs.size(), 1),
                what + " step " + std::to_string(step))) {
        return false;
      }
    }
    return true;
  };
  if (!pass(all, prompts, std::vector<int>(num, 1), "prefill")) return passes;
  // Past two KV-block boundaries (16-token blocks) of every sequence.
  if (!decode(all, 40, "decode all")) return passes;
  if (!decode({0}, 5, "decode one")) return passes;
  // A verify chunk: three tokens, three logits rows.
  const std::vector<int32_t> verify = {next[0], next[0], next[0]};
  if (!pass({0}, {verify}, {3}, "verify")) return passes;
  decode(all, 3, "decode all again");
  return passes;
}

}  // namespace moeserve::engine::testing

#endif  // MOESERVE_ENGINE_TESTING_GRAPH_LOCKSTEP_H_
