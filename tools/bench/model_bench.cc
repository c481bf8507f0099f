#include "tools/bench/model_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "tools/bench/counting_experts.h"

namespace moeserve::bench {
namespace {

using engine::BlockTable;
using engine::KvCache;
using engine::SequenceChunk;
using Clock = std::chrono::steady_clock;

constexpr int kBlockSize = 16;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Holds the loaded model and runs timed phases on it.
class Runner {
 public:
  static absl::StatusOr<std::unique_ptr<Runner>> Create(
      const std::string& dir, kernels::cpu::CpuBackend* backend,
      uint64_t seed) {
    auto runner = std::unique_ptr<Runner>(new Runner(seed));
    const auto start = Clock::now();
    absl::StatusOr<std::unique_ptr<engine::ModelWeights>> w =
        engine::ModelWeights::Load(dir);
    if (!w.ok()) return w.status();
    runner->load_seconds_ = Since(start);
    runner->weights_ = *std::move(w);
    runner->resident_ =
        std::make_unique<engine::ResidentExperts>(runner->weights_.get());
    runner->counting_ = std::make_unique<CountingExperts>(
        runner->resident_.get(), runner->weights_.get());
    absl::StatusOr<std::unique_ptr<engine::MoeModel>> m =
        engine::MoeModel::Create(runner->weights_.get(), backend,
                                 runner->counting_.get());
    if (!m.ok()) return m.status();
    runner->model_ = *std::move(m);
    return runner;
  }

  const engine::ModelWeights& weights() const { return *weights_; }
  double load_seconds() const { return load_seconds_; }

  // Non-expert weight bytes one forward pass over `tokens` tokens reads.
  uint64_t NonExpertBytes(int64_t tokens) const {
    const engine::ModelConfig& c = weights_->config();
    if (c.tie_word_embeddings) return weights_->non_expert_bytes();
    const uint64_t table =
        static_cast<uint64_t>(c.vocab_size) * c.hidden_size * 2;
    return weights_->non_expert_bytes() - table +
           static_cast<uint64_t>(tokens) * c.hidden_size * 2;
  }

  absl::StatusOr<Measurement> Prefill(int batch, int prompt_len) {
    absl::StatusOr<std::unique_ptr<KvCache>> made =
        MakeCache(batch * (prompt_len + kBlockSize));
    if (!made.ok()) return made.status();
    std::unique_ptr<KvCache> cache = *std::move(made);
    std::vector<BlockTable> tables(batch);
    std::vector<std::vector<int32_t>> prompts(batch);
    for (auto& p : prompts) p = RandomTokens(prompt_len);
    std::vector<SequenceChunk> chunks;
    for (int s = 0; s < batch; ++s) {
      absl::Status st = cache->Grow(&tables[s], prompt_len);
      if (!st.ok()) return st;
      chunks.push_back({prompts[s], 0, &tables[s]});
    }
    // Warm-up pass (sizes scratch buffers), then the timed one; both write
    // the same positions, so the cache state is identical.
    absl::Status st = model_->Forward(chunks, cache.get(), &logits_);
    if (!st.ok()) return st;
    counting_->Reset();
    const auto start = Clock::now();
    st = model_->Forward(chunks, cache.get(), &logits_);
    if (!st.ok()) return st;
    Measurement m =
        Finish("prefill", batch, 1, static_cast<int64_t>(batch) * prompt_len,
               Since(start));
    return m;
  }

  absl::StatusOr<Measurement> Decode(int batch, int prompt_len, int steps) {
    absl::StatusOr<std::unique_ptr<KvCache>> made =
        MakeCache(batch * (prompt_len + steps + 1 + kBlockSize));
    if (!made.ok()) return made.status();
    std::unique_ptr<KvCache> cache = *std::move(made);
    std::vector<BlockTable> tables(batch);
    std::vector<std::vector<int32_t>> prompts(batch);
    std::vector<SequenceChunk> chunks;
    for (int s = 0; s < batch; ++s) {
      prompts[s] = RandomTokens(prompt_len);
      absl::Status st = cache->Grow(&tables[s], prompt_len);
      if (!st.ok()) return st;
      chunks.push_back({prompts[s], 0, &tables[s]});
    }
    absl::Status st = model_->Forward(chunks, cache.get(), &logits_);
    if (!st.ok()) return st;
    int64_t pos = prompt_len;
    st = DecodeStep(cache.get(), &tables, pos++);  // untimed warm-up
    if (!st.ok()) return st;
    counting_->Reset();
    const auto start = Clock::now();
    for (int i = 0; i < steps && st.ok(); ++i) {
      st = DecodeStep(cache.get(), &tables, pos++);
    }
    if (!st.ok()) return st;
    return Finish("decode", batch, steps, static_cast<int64_t>(batch) * steps,
                  Since(start));
  }

 private:
  explicit Runner(uint64_t seed) : rng_(seed) {}

  absl::StatusOr<std::unique_ptr<KvCache>> MakeCache(int64_t tokens) {
    return KvCache::Create(weights_->config(), tokens / kBlockSize + 1,
                           kBlockSize);
  }

  std::vector<int32_t> RandomTokens(int n) {
    std::uniform_int_distribution<int32_t> id(
        0, static_cast<int32_t>(weights_->config().vocab_size - 1));
    std::vector<int32_t> out(n);
    for (int32_t& t : out) t = id(rng_);
    return out;
  }

  // One decode token for every sequence, at position `pos`.
  absl::Status DecodeStep(KvCache* cache, std::vector<BlockTable>* tables,
                          int64_t pos) {
    const std::vector<int32_t> tokens =
        RandomTokens(static_cast<int>(tables->size()));
    std::vector<SequenceChunk> chunks;
    for (size_t s = 0; s < tables->size(); ++s) {
      absl::Status st = cache->Grow(&(*tables)[s], pos + 1);
      if (!st.ok()) return st;
      chunks.push_back({std::span(&tokens[s], 1), pos, &(*tables)[s]});
    }
    return model_->Forward(chunks, cache, &logits_);
  }

  Measurement Finish(const char* phase, int batch, int64_t passes,
                     int64_t tokens, double seconds) const {
    Measurement m;
    m.phase = phase;
    m.batch = batch;
    m.tokens = tokens;
    m.forward_passes = passes;
    m.seconds = seconds;
    m.tokens_per_s = static_cast<double>(tokens) / seconds;
    const double bytes =
        static_cast<double>(counting_->bytes()) +
        static_cast<double>(passes) * NonExpertBytes(tokens / passes);
    m.weight_bytes_per_pass = bytes / passes;
    m.weight_bytes_per_token = bytes / tokens;
    m.weight_gbps = bytes / seconds / 1e9;
    m.experts_per_pass =
        static_cast<double>(counting_->experts()) / static_cast<double>(passes);
    return m;
  }

  std::mt19937_64 rng_;
  double load_seconds_ = 0;
  std::unique_ptr<engine::ModelWeights> weights_;
  std::unique_ptr<engine::ResidentExperts> resident_;
  std::unique_ptr<CountingExperts> counting_;
  std::unique_ptr<engine::MoeModel> model_;
  std::vector<float> logits_;
};

void Describe(const Runner& r, const std::string& dir, ModelReport* out) {
  const engine::ModelConfig& c = r.weights().config();
  out->dir = dir;
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  out->name = trimmed.substr(trimmed.find_last_of('/') + 1);
  out->model_type = c.model_type;
  out->layers = c.num_hidden_layers;
  out->hidden = c.hidden_size;
  out->heads = c.num_attention_heads;
  out->kv_heads = c.num_key_value_heads;
  out->vocab = c.vocab_size;
  out->experts = c.num_experts;
  out->top_k = c.num_experts_per_tok;
  out->expert_ffn = c.expert_intermediate_size;
  out->shared_expert_ffn = c.shared_expert_intermediate_size;
  out->non_expert_bytes = r.weights().non_expert_bytes();
  out->expert_bytes = static_cast<uint64_t>(c.num_hidden_layers) *
                      c.num_experts * 3 * c.expert_intermediate_size *
                      c.hidden_size * 2;
  out->load_seconds = r.load_seconds();
}

// Repeats `measure` until the timed seconds add up to
// options.min_phase_seconds (at most options.max_repeats times) and returns
// the median repeat by tokens/s (the lower middle one for an even count, so
// every figure comes from one real run), with the slowest and fastest
// repeats' tokens/s beside it.
absl::StatusOr<Measurement> Median(
    const BenchOptions& options,
    const std::function<absl::StatusOr<Measurement>()>& measure) {
  std::vector<Measurement> runs;
  double total = 0;
  while (static_cast<int>(runs.size()) < std::max(1, options.max_repeats) &&
         (runs.empty() || total < options.min_phase_seconds)) {
    absl::StatusOr<Measurement> m = measure();
    if (!m.ok()) return m.status();
    total += m->seconds;
    runs.push_back(*std::move(m));
  }
  std::sort(runs.begin(), runs.end(),
            [](const Measurement& a, const Measurement& b) {
              return a.tokens_per_s < b.tokens_per_s;
            });
  Measurement median = runs[(runs.size() - 1) / 2];
  median.repeats = static_cast<int>(runs.size());
  median.tokens_per_s_min = runs.front().tokens_per_s;
  median.tokens_per_s_max = runs.back().tokens_per_s;
  return median;
}

}  // namespace

absl::StatusOr<ModelReport> BenchModel(const std::string& model_dir,
                                       const BenchOptions& options,
                                       kernels::cpu::CpuBackend* backend) {
  absl::StatusOr<std::unique_ptr<Runner>> runner =
      Runner::Create(model_dir, backend, options.seed);
  if (!runner.ok()) {
    return absl::Status(
        runner.status().code(),
        absl::StrCat(model_dir, ": ", runner.status().message()));
  }
  ModelReport report;
  Describe(**runner, model_dir, &report);
  Runner& r = **runner;
  for (int b : options.prefill_batches) {
    absl::StatusOr<Measurement> m =
        Median(options, [&] { return r.Prefill(b, options.prompt_len); });
    if (!m.ok()) return m.status();
    report.results.push_back(*m);
  }
  for (int b : options.decode_batches) {
    absl::StatusOr<Measurement> m = Median(options, [&] {
      return r.Decode(b, options.prompt_len, options.decode_steps);
    });
    if (!m.ok()) return m.status();
    report.results.push_back(*m);
  }
  return report;
}

}  // namespace moeserve::bench
