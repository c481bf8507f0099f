#include "tools/bench/optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/expert_provider.h"
#include "engine/kv_cache.h"
#include "engine/model_weights.h"
#include "engine/moe_model.h"
#include "tools/bench/policy_bench.h"

namespace moeserve::bench {

// ---- The model ------------------------------------------------------------

std::vector<double> FitNonNegative(const std::vector<std::vector<double>>& x,
                                   const std::vector<double>& y) {
  const size_t p = x.empty() ? 0 : x.front().size();
  std::vector<bool> active(p, true);
  std::vector<double> coef(p, 0.0);
  for (size_t round = 0; round <= p; ++round) {
    std::vector<size_t> cols;
    for (size_t j = 0; j < p; ++j) {
      if (active[j]) cols.push_back(j);
    }
    const size_t q = cols.size();
    if (q == 0) break;
    // Normal equations A c = b over the active columns, with a tiny ridge
    // so a column that is all zero does not make A singular.
    std::vector<std::vector<double>> a(q, std::vector<double>(q + 1, 0.0));
    for (size_t i = 0; i < x.size(); ++i) {
      for (size_t r = 0; r < q; ++r) {
        for (size_t c = 0; c < q; ++c) {
          a[r][c] += x[i][cols[r]] * x[i][cols[c]];
        }
        a[r][q] += x[i][cols[r]] * y[i];
      }
    }
    for (size_t r = 0; r < q; ++r) a[r][r] += 1e-12 * (1 + a[r][r]);
    for (size_t c = 0; c < q; ++c) {  // Gauss-Jordan, partial pivoting
      size_t piv = c;
      for (size_t r = c + 1; r < q; ++r) {
        if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
      }
      std::swap(a[c], a[piv]);
      if (a[c][c] == 0) continue;
      for (size_t r = 0; r < q; ++r) {
        if (r == c) continue;
        const double f = a[r][c] / a[c][c];
        for (size_t k = c; k <= q; ++k) a[r][k] -= f * a[c][k];
      }
    }
    std::fill(coef.begin(), coef.end(), 0.0);
    size_t worst = p;
    for (size_t r = 0; r < q; ++r) {
      coef[cols[r]] = a[r][r] != 0 ? a[r][q] / a[r][r] : 0;
      if (coef[cols[r]] < 0 && (worst == p || coef[cols[r]] < coef[worst])) {
        worst = cols[r];
      }
    }
    if (worst == p) return coef;
    active[worst] = false;  // drop the most negative and refit
  }
  for (double& c : coef) c = std::max(c, 0.0);
  return coef;
}

double Coverage(int experts, int top_k, double tokens) {
  if (experts <= 0 || tokens <= 0) return 0;
  return 1.0 - std::pow(std::max(0.0, 1.0 - double(top_k) / experts), tokens);
}

double ResidentShareOf(int layers, int experts, int slots) {
  const double all = static_cast<double>(layers) * experts;
  if (all <= 0 || slots >= all) return 1.0;
  return std::max(0.0, slots - static_cast<double>(experts)) / all;
}

double PipelineSeconds(int layers, double compute_per_layer,
                       double link_per_layer) {
  double load_done = link_per_layer;  // layer 0, from the step's start
  double compute_done = 0;
  for (int l = 0; l < layers; ++l) {
    const double start = std::max(compute_done, load_done);
    compute_done = start + compute_per_layer;
    // Layer l + 1 streams once layer l routed (its compute started) and
    // the link is free.
    load_done = std::max(load_done, start) + link_per_layer;
  }
  return compute_done;
}

double ExpectedTokens(const std::vector<double>& acceptance, int k) {
  double tokens = 1, run = 1;
  for (int i = 0; i < k; ++i) {
    run *= i < static_cast<int>(acceptance.size())
               ? std::clamp(acceptance[i], 0.0, 1.0)
               : 0.0;
    tokens += run;
  }
  return tokens;
}

double CostModel::Target(double n, double s) const {
  if (target.size() < 4) return 0;
  return target[0] + target[1] * n + target[2] * n * s +
         target[3] * layers * experts * Coverage(experts, top_k, n);
}

double CostModel::Draft(double n, double s) const {
  if (draft.size() < 3) return 0;
  return draft[0] + draft[1] * n + draft[2] * n * s;
}

double CostModel::LinkPerLayer(double n) const {
  return link_seconds_per_expert * experts * Coverage(experts, top_k, n) *
         (1.0 - ResidentShareOf(layers, experts, slots));
}

WorkloadEstimate EstimateWorkload(const CostModel& m, const Workload& w,
                                  int batch, int k) {
  WorkloadEstimate e;
  e.batch = batch;
  e.k = k;
  e.tokens_per_step = ExpectedTokens(m.acceptance, k);
  const int layers = std::max(m.layers, 1);
  // One decode step of `b` sequences at context s with `kk` drafts.
  auto step = [&](int b, int kk, double s, WorkloadEstimate* out) {
    const double n = static_cast<double>(b) * (kk + 1);
    const double c = m.Target(n, s + (kk + 1) / 2.0) / layers;
    const double x = m.LinkPerLayer(n);
    const double verify = PipelineSeconds(layers, c, x);
    const double draft = kk * m.Draft(b, s);
    if (out != nullptr) {
      out->compute_per_layer = c;
      out->link_per_layer = x;
      out->verify_seconds = verify;
      out->draft_seconds = draft;
    }
    return draft + verify + m.overhead_seconds_per_seq_step * b;
  };
  const int requests = static_cast<int>(w.prompt_lengths.size());
  const int g = std::max(w.max_new_tokens, 1);
  int64_t total_tokens = 0;
  for (int first = 0; first < requests; first += batch) {
    const int b = std::min(batch, requests - first);
    double prompt = 0;
    for (int i = first; i < first + b; ++i) prompt += w.prompt_lengths[i];
    const double mean_prompt = prompt / b;
    // Prefill: every prompt in one forward (and the draft's, with drafts).
    const double c = m.Target(prompt, mean_prompt / 2) / layers;
    e.seconds += PipelineSeconds(layers, c, m.LinkPerLayer(prompt));
    if (k > 0) e.seconds += m.Draft(prompt, mean_prompt / 2);
    total_tokens += static_cast<int64_t>(b) * g;
    if (g < 2) continue;
    const double context = mean_prompt + g / 2.0;
    e.seconds += step(b, 0, mean_prompt + 1, nullptr);  // never speculative
    e.seq_steps += b;
    const double steps = (g - 2) / e.tokens_per_step;
    e.seconds += steps * step(b, k, context, nullptr);
    e.seq_steps += steps * b;
  }
  const double mean_prompt =
      requests > 0 ? std::accumulate(w.prompt_lengths.begin(),
                                     w.prompt_lengths.end(), 0.0) /
                         requests
                   : 0;
  e.step_seconds = step(std::min(batch, std::max(requests, 1)), k,
                        mean_prompt + g / 2.0, &e);
  e.tokens_per_s = e.seconds > 0 ? total_tokens / e.seconds : 0;
  return e;
}

// ---- Profiling ------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBlockSize = 16;

// Times MoeModel::Forward on one model with every expert resident.
class ForwardProfiler {
 public:
  static absl::StatusOr<std::unique_ptr<ForwardProfiler>> Create(
      const std::string& dir, kernels::Backend* backend) {
    auto p = std::unique_ptr<ForwardProfiler>(new ForwardProfiler());
    absl::StatusOr<std::unique_ptr<engine::ModelWeights>> w =
        engine::ModelWeights::Load(dir);
    if (!w.ok()) return w.status();
    p->weights_ = *std::move(w);
    p->resident_ = std::make_unique<engine::ResidentExperts>(p->weights_.get());
    absl::StatusOr<std::unique_ptr<engine::MoeModel>> m =
        engine::MoeModel::Create(p->weights_.get(), backend,
                                 p->resident_.get());
    if (!m.ok()) return m.status();
    p->model_ = *std::move(m);
    return p;
  }

  // Best of `repeats` forwards of `batch` chunks of `chunk` tokens at
  // positions [start, start + chunk) (the KV before `start` is whatever the
  // cache holds: its values do not change the time).
  absl::StatusOr<double> Time(int batch, int chunk, int64_t start,
                              int repeats) {
    const int64_t per_seq = start + chunk + kBlockSize;
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
        engine::KvCache::Create(weights_->config(),
                                batch * (per_seq / kBlockSize + 1), kBlockSize);
    if (!cache.ok()) return cache.status();
    std::vector<engine::BlockTable> tables(batch);
    std::vector<std::vector<int32_t>> tokens(batch);
    std::uniform_int_distribution<int32_t> id(
        0, static_cast<int32_t>(weights_->config().vocab_size - 1));
    std::vector<engine::SequenceChunk> chunks;
    for (int s = 0; s < batch; ++s) {
      tokens[s].resize(chunk);
      for (int32_t& t : tokens[s]) t = id(rng_);
      absl::Status st = (*cache)->Grow(&tables[s], start + chunk);
      if (!st.ok()) return st;
      chunks.push_back({tokens[s], start, &tables[s], chunk});
    }
    absl::Status st = model_->Forward(chunks, cache->get(), &logits_);
    if (!st.ok()) return st;  // warm-up
    double best = 1e30;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      const auto t0 = Clock::now();
      st = model_->Forward(chunks, cache->get(), &logits_);
      if (!st.ok()) return st;
      best = std::min(best,
                      std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  }

  const engine::ModelWeights& weights() const { return *weights_; }

 private:
  ForwardProfiler() = default;
  std::mt19937_64 rng_{7};
  std::unique_ptr<engine::ModelWeights> weights_;
  std::unique_ptr<engine::ResidentExperts> resident_;
  std::unique_ptr<engine::MoeModel> model_;
  std::vector<float> logits_;
};

// Mean attended context of a chunk at [start, start + chunk).
double MeanContext(int64_t start, int chunk) {
  return start + (chunk + 1) / 2.0;
}

PolicyBenchOptions BenchOptions(const OptimizerOptions& o, int batch, int k,
                                int new_tokens) {
  PolicyBenchOptions b;
  b.model_dir = o.model_dir;
  b.draft_model_dir = o.draft_model_dir;
  b.policies = {o.policy};
  b.drafters = {k > 0 ? "own" : "none"};
  b.num_speculative_tokens = k > 0 ? k : -1;
  b.ratios = {o.ratio};
  b.concurrencies = {batch};
  b.link_gbps = o.link_gbps;
  b.link_latency_us = o.link_latency_us;
  b.slow_tier = o.slow_tier;
  b.num_requests = o.num_requests;
  b.max_new_tokens = new_tokens;
  b.warmup_tokens = o.warmup_tokens;
  b.threads = o.threads;
  return b;
}

}  // namespace

absl::StatusOr<OptimizerReport> RunOptimizer(const OptimizerOptions& o,
                                             kernels::Backend* backend) {
  if (backend->device() != kernels::Device::kCpu) {
    return absl::InvalidArgumentError("--optimize runs on the CPU backend");
  }
  if (o.batches.empty() || o.max_k < 0 || o.max_k > 16 || o.num_requests < 1 ||
      o.max_new_tokens < 2 || o.profile_new_tokens < 2) {
    return absl::InvalidArgumentError(
        "--optimize needs batches, k in [0, 16], >= 1 request and >= 2 new "
        "tokens");
  }
  OptimizerReport rep;
  rep.options = o;
  rep.model_name = std::filesystem::path(o.model_dir).filename().string();
  if (rep.model_name.empty()) {
    rep.model_name =
        std::filesystem::path(o.model_dir).parent_path().filename().string();
  }
  CostModel& m = rep.model;

  // 1a. The short speculative run: link, acceptance, prompts, overhead.
  std::fprintf(stderr, "optimize: profiling run (b=1, k=%d) ...\n", o.max_k);
  absl::StatusOr<PolicyReport> profile = RunPolicyBench(
      BenchOptions(o, 1, o.max_k, o.profile_new_tokens), backend);
  if (!profile.ok()) return profile.status();
  const PolicyResult& pr = profile->results.front();
  rep.layers = m.layers = profile->layers;
  rep.experts = m.experts = profile->experts;
  rep.top_k = m.top_k = profile->top_k;
  rep.slots = m.slots = pr.slots;
  rep.expert_blob_bytes = profile->expert_blob_bytes;
  rep.emulated_seconds_per_expert = profile->miss_transfer_us * 1e-6;
  rep.profile_run_tokens_per_s = pr.tokens_per_s;
  rep.outputs_identical = profile->outputs_identical;
  m.link_seconds_per_expert =
      pr.link_transfers > 0 ? pr.link_busy_seconds / pr.link_transfers : 0;
  {
    double prev = static_cast<double>(pr.drafts);
    for (int i = 0; i < o.max_k; ++i) {
      const double acc = i < static_cast<int>(pr.accepted_per_position.size())
                             ? pr.accepted_per_position[i]
                             : 0;
      m.acceptance.push_back(prev > 0 ? acc / prev : 0);
      prev = acc;
    }
  }
  rep.workload.prompt_lengths = profile->prompt_lengths;
  rep.workload.max_new_tokens = o.max_new_tokens;

  // 1b. Forward passes, compute only.
  double mean_prompt = 0;
  for (int len : rep.workload.prompt_lengths) mean_prompt += len;
  mean_prompt /= std::max<size_t>(rep.workload.prompt_lengths.size(), 1);
  const int64_t short_ctx = static_cast<int64_t>(std::lround(mean_prompt));
  const int64_t long_ctx = short_ctx + o.max_new_tokens;
  const int max_b = *std::max_element(o.batches.begin(), o.batches.end());
  for (const char* which : {"target", "draft"}) {
    const bool target = std::string(which) == "target";
    std::fprintf(stderr, "optimize: profiling %s forward passes ...\n", which);
    absl::StatusOr<std::unique_ptr<ForwardProfiler>> prof =
        ForwardProfiler::Create(target ? o.model_dir : o.draft_model_dir,
                                backend);
    if (!prof.ok()) return prof.status();
    struct Shape {
      int batch, chunk;
      int64_t start;
    };
    std::vector<Shape> shapes;
    std::vector<int> chunks = {1};
    if (target && o.max_k > 0) {
      chunks.push_back(1 + std::max(o.max_k / 2, 1));
      chunks.push_back(1 + o.max_k);
    }
    chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
    for (int b : o.batches) {
      for (int c : chunks) {
        for (int64_t s : {short_ctx, long_ctx}) shapes.push_back({b, c, s});
      }
    }
    const int prefill = std::max<int>(static_cast<int>(short_ctx), 2);
    shapes.push_back({1, prefill, 0});
    shapes.push_back({max_b, prefill, 0});
    std::vector<std::vector<double>> x;
    std::vector<double> y;
    const size_t first = rep.samples.size();
    for (const Shape& sh : shapes) {
      absl::StatusOr<double> t =
          (*prof)->Time(sh.batch, sh.chunk, sh.start, o.forward_repeats);
      if (!t.ok()) return t.status();
      const double n = static_cast<double>(sh.batch) * sh.chunk;
      const double s = MeanContext(sh.start, sh.chunk);
      std::vector<double> row = {1.0, n, n * s};
      if (target) {
        row.push_back(m.layers * m.experts * Coverage(m.experts, m.top_k, n));
      }
      x.push_back(row);
      y.push_back(*t);
      rep.samples.push_back({which, sh.batch, sh.chunk, sh.start, *t, 0});
    }
    std::vector<double> coef = FitNonNegative(x, y);
    (target ? m.target : m.draft) = coef;
    for (size_t i = first; i < rep.samples.size(); ++i) {
      ForwardSample& fs = rep.samples[i];
      const double n = static_cast<double>(fs.batch) * fs.chunk;
      const double s = MeanContext(fs.context, fs.chunk);
      fs.fitted = target ? m.Target(n, s) : m.Draft(n, s);
    }
  }

  // 1c. The per-step overhead, from the profiling run's wall time.
  {
    Workload pw = rep.workload;
    pw.max_new_tokens = o.profile_new_tokens;
    const WorkloadEstimate bare = EstimateWorkload(m, pw, 1, o.max_k);
    if (bare.seq_steps > 0) {
      m.overhead_seconds_per_seq_step =
          std::max(0.0, (pr.wall_seconds - bare.seconds) / bare.seq_steps);
    }
  }

  // 2. The search.
  for (int b : o.batches) {
    for (int k = 0; k <= o.max_k; ++k) {
      rep.grid.push_back(EstimateWorkload(m, rep.workload, b, k));
      if (rep.grid.back().tokens_per_s > rep.best.tokens_per_s) {
        rep.best = rep.grid.back();
      }
    }
  }

  // 3. Measured runs: the recommendation, its b without drafts, its k at the
  // smallest b, the largest b at max_k.
  const int min_b = *std::min_element(o.batches.begin(), o.batches.end());
  std::vector<std::pair<int, int>> points = {{rep.best.batch, rep.best.k},
                                             {rep.best.batch, 0},
                                             {min_b, rep.best.k},
                                             {max_b, o.max_k}};
  double err_sum = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [b, k] = points[i];
    bool seen = false;
    for (size_t j = 0; j < i; ++j) seen |= points[j] == points[i];
    if (seen) continue;
    std::fprintf(stderr, "optimize: measuring b=%d k=%d ...\n", b, k);
    absl::StatusOr<PolicyReport> run =
        RunPolicyBench(BenchOptions(o, b, k, o.max_new_tokens), backend);
    if (!run.ok()) return run.status();
    const PolicyResult& r = run->results.front();
    if (!run->outputs_identical) rep.outputs_identical = false;
    OptimizerCheck c;
    c.batch = b;
    c.k = k;
    c.recommended = i == 0;
    c.estimated_tokens_per_s =
        EstimateWorkload(m, rep.workload, b, k).tokens_per_s;
    CostModel bare = m;
    bare.overhead_seconds_per_seq_step = 0;
    c.estimated_no_overhead =
        EstimateWorkload(bare, rep.workload, b, k).tokens_per_s;
    c.measured_tokens_per_s = r.tokens_per_s;
    c.relative_error = (c.estimated_tokens_per_s - c.measured_tokens_per_s) /
                       c.measured_tokens_per_s;
    c.measured_mean_k = r.mean_k;
    c.measured_acceptance = r.acceptance_rate;
    err_sum += std::abs(c.relative_error);
    rep.checks.push_back(c);
  }
  rep.mean_abs_relative_error =
      err_sum / std::max<size_t>(rep.checks.size(), 1);
  return rep;
}

// ---- Output ---------------------------------------------------------------

void PrintOptimizerReport(const OptimizerReport& rep, std::FILE* out) {
  const OptimizerOptions& o = rep.options;
  const CostModel& m = rep.model;
  std::fprintf(out,
               "throughput optimiser (SpecMoEOff §5.3) for policy %s\n"
               "model: %s (%d layers x %d experts, top-%d), draft model %s; "
               "expert cache ratio %.3g -> %d slots; %d CPU kernel threads\n",
               o.policy.c_str(), rep.model_name.c_str(), rep.layers,
               rep.experts, rep.top_k, o.draft_model_dir.c_str(), o.ratio,
               rep.slots, o.threads);
  if (o.link_gbps > 0) {
    std::fprintf(out,
                 "link: emulated %.3g GB/s, %.3g us latency (%.1f us per "
                 "expert blob of %.1f KiB by the formula)\n",
                 o.link_gbps, o.link_latency_us,
                 rep.emulated_seconds_per_expert * 1e6,
                 rep.expert_blob_bytes / 1024.0);
  } else {
    std::fprintf(out, "link: no emulation (memory-speed copies)\n");
  }
  std::fprintf(out,
               "workload: %zu requests, %d new tokens each, greedy; "
               "profiling run: b=1 k=%d, %d new tokens, %.1f tok/s\n\n",
               rep.workload.prompt_lengths.size(), o.max_new_tokens, o.max_k,
               o.profile_new_tokens, rep.profile_run_tokens_per_s);
  std::fprintf(out, "profiled costs:\n");
  std::fprintf(out,
               "  target forward t(N, s) = %.3g + %.3g N + %.3g N s + %.3g "
               "L E Cov(N)  [s]\n",
               m.target[0], m.target[1], m.target[2], m.target[3]);
  std::fprintf(out,
               "  draft forward  t(N, s) = %.3g + %.3g N + %.3g N s  [s]\n",
               m.draft[0], m.draft[1], m.draft[2]);
  std::fprintf(out,
               "  link: %.1f us per expert transfer (measured: link busy / "
               "transfers)\n",
               m.link_seconds_per_expert * 1e6);
  std::string acc;
  for (double p : m.acceptance) absl::StrAppendFormat(&acc, " %.2f", p);
  std::fprintf(out, "  acceptance per position:%s\n", acc.c_str());
  std::fprintf(out,
               "  overhead: %.1f us per sequence per step (calibrated on the "
               "profiling run)\n\n",
               m.overhead_seconds_per_seq_step * 1e6);
  std::fprintf(out,
               "| model | batch | chunk | start | measured ms | fitted ms |\n");
  std::fprintf(out, "|---|---|---|---|---|---|\n");
  for (const ForwardSample& s : rep.samples) {
    std::fprintf(out, "| %s | %d | %d | %lld | %.3f | %.3f |\n",
                 s.model.c_str(), s.batch, s.chunk,
                 static_cast<long long>(s.context), 1e3 * s.seconds,
                 1e3 * s.fitted);
  }
  std::fprintf(
      out, "\nestimated tokens/s (rows: max_num_seqs b, columns: k):\n\n| b |");
  for (int k = 0; k <= o.max_k; ++k) std::fprintf(out, " k=%d |", k);
  std::fprintf(out, "\n|---|");
  for (int k = 0; k <= o.max_k; ++k) std::fprintf(out, "---|");
  std::fprintf(out, "\n");
  for (size_t i = 0; i < rep.grid.size(); ++i) {
    const WorkloadEstimate& e = rep.grid[i];
    if (e.k == 0) std::fprintf(out, "| %d |", e.batch);
    const bool best = e.batch == rep.best.batch && e.k == rep.best.k;
    std::fprintf(out, best ? " **%.1f** |" : " %.1f |", e.tokens_per_s);
    if (e.k == o.max_k) std::fprintf(out, "\n");
  }
  const WorkloadEstimate& b = rep.best;
  std::fprintf(out,
               "\nrecommended: --max_num_seqs=%d --num_speculative_tokens=%d "
               "(estimated %.1f tok/s; a full step: draft %.2f ms, verify "
               "%.2f ms with %.3f ms compute and %.3f ms link per layer, "
               "%.2f tokens per sequence)\n\n",
               b.batch, b.k, b.tokens_per_s, 1e3 * b.draft_seconds,
               1e3 * b.verify_seconds, 1e3 * b.compute_per_layer,
               1e3 * b.link_per_layer, b.tokens_per_step);
  std::fprintf(out,
               "| b | k | estimated tok/s | measured tok/s | relative error | "
               "estimate without overhead | measured mean k | measured "
               "acceptance |\n|---|---|---|---|---|---|---|---|\n");
  for (const OptimizerCheck& c : rep.checks) {
    std::fprintf(out,
                 "| %d%s | %d | %.1f | %.1f | %+.1f%% | %.1f | %s | %s |\n",
                 c.batch, c.recommended ? " (recommended)" : "", c.k,
                 c.estimated_tokens_per_s, c.measured_tokens_per_s,
                 100 * c.relative_error, c.estimated_no_overhead,
                 c.measured_mean_k < 0
                     ? "-"
                     : absl::StrFormat("%.2f", c.measured_mean_k).c_str(),
                 c.measured_acceptance < 0
                     ? "-"
                     : absl::StrFormat("%.3f", c.measured_acceptance).c_str());
  }
  std::fprintf(out,
               "\nmean |relative error| %.1f%%; outputs identical across the "
               "measured runs: %s\n",
               100 * rep.mean_abs_relative_error,
               rep.outputs_identical ? "yes" : "no");
}

nlohmann::json OptimizerReportJson(const OptimizerReport& rep) {
  const OptimizerOptions& o = rep.options;
  const CostModel& m = rep.model;
  nlohmann::json j;
  j["mode"] = "optimize";
  j["policy"] = o.policy;
  j["model"] = {{"name", rep.model_name},
                {"dir", o.model_dir},
                {"draft_dir", o.draft_model_dir},
                {"layers", rep.layers},
                {"experts", rep.experts},
                {"top_k", rep.top_k},
                {"expert_blob_bytes", rep.expert_blob_bytes}};
  j["expert_cache_ratio"] = o.ratio;
  j["slots"] = rep.slots;
  j["link"] = {{"gbps", o.link_gbps},
               {"latency_us", o.link_latency_us},
               {"emulated_seconds_per_expert", rep.emulated_seconds_per_expert},
               {"measured_seconds_per_expert", m.link_seconds_per_expert}};
  j["threads"] = o.threads;
  j["workload"] = {{"prompt_lengths", rep.workload.prompt_lengths},
                   {"max_new_tokens", rep.workload.max_new_tokens},
                   {"profile_new_tokens", o.profile_new_tokens}};
  j["profile"] = {
      {"target_coefficients", m.target},
      {"draft_coefficients", m.draft},
      {"acceptance", m.acceptance},
      {"overhead_seconds_per_seq_step", m.overhead_seconds_per_seq_step},
      {"run_tokens_per_s", rep.profile_run_tokens_per_s}};
  j["samples"] = nlohmann::json::array();
  for (const ForwardSample& s : rep.samples) {
    j["samples"].push_back({{"model", s.model},
                            {"batch", s.batch},
                            {"chunk", s.chunk},
                            {"start", s.context},
                            {"seconds", s.seconds},
                            {"fitted", s.fitted}});
  }
  j["grid"] = nlohmann::json::array();
  for (const WorkloadEstimate& e : rep.grid) {
    j["grid"].push_back({{"batch", e.batch},
                         {"k", e.k},
                         {"tokens_per_s", e.tokens_per_s},
                         {"step_seconds", e.step_seconds}});
  }
  j["recommended"] = {{"max_num_seqs", rep.best.batch},
                      {"num_speculative_tokens", rep.best.k},
                      {"estimated_tokens_per_s", rep.best.tokens_per_s}};
  j["checks"] = nlohmann::json::array();
  for (const OptimizerCheck& c : rep.checks) {
    j["checks"].push_back(
        {{"batch", c.batch},
         {"k", c.k},
         {"recommended", c.recommended},
         {"estimated_tokens_per_s", c.estimated_tokens_per_s},
         {"estimated_no_overhead_tokens_per_s", c.estimated_no_overhead},
         {"measured_tokens_per_s", c.measured_tokens_per_s},
         {"relative_error", c.relative_error},
         {"measured_mean_k", c.measured_mean_k < 0
                                 ? nlohmann::json(nullptr)
                                 : nlohmann::json(c.measured_mean_k)},
         {"measured_acceptance", c.measured_acceptance < 0
                                     ? nlohmann::json(nullptr)
                                     : nlohmann::json(c.measured_acceptance)}});
  }
  j["mean_abs_relative_error"] = rep.mean_abs_relative_error;
  j["outputs_identical"] = rep.outputs_identical;
  return j;
}

}  // namespace moeserve::bench
