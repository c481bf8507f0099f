#include "tools/bench/policy_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/builder/engine_builder.h"
#include "engine/builder/engine_spec.h"
#include "engine/engine.h"
#include "engine/generation.h"
#include "engine/model_weights.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "engine/tokenizer.h"
#include "kernels/tensor.h"
#include "tools/bench/access_trace.h"
#include "tools/bench/belady.h"
#include "tools/bench/expert_compute.h"
#include "tools/bench/prompts.h"
#include "tools/bench/spec_summary.h"
#include "tools/bench/stand_in_tokenizer.h"

namespace moeserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

struct RequestTrace {
  std::vector<int32_t> tokens;
  Clock::time_point submitted;
  // One per token. The tokens of one event (a speculative verification
  // emits several) are spread evenly over the time since the previous
  // event, as the server's inter-token latency metric does, so TPOT and
  // its percentiles mean the same per emitted token with or without a
  // drafter (issue 33: gaps of 0 inside a verification made p50 read 0).
  std::vector<Clock::time_point> token_times;
  engine::FinishReason finish = engine::FinishReason::kNone;
  std::string error;
};

void Drain(engine::RequestStream* stream, RequestTrace* trace) {
  engine::GenerationEvent e;
  while (stream->Pop(&e, absl::Seconds(120))) {
    const auto now = Clock::now();
    const bool first = trace->token_times.empty();
    const Clock::time_point prev = first ? now : trace->token_times.back();
    const int64_t j = static_cast<int64_t>(e.tokens.size());
    for (int64_t i = 0; i < j; ++i) {
      trace->tokens.push_back(e.tokens[i]);
      // The first event's tokens all arrive at the first token's time.
      trace->token_times.push_back(first ? now
                                         : prev + (now - prev) * (i + 1) / j);
    }
    if (e.finish != engine::FinishReason::kNone) {
      trace->finish = e.finish;
      trace->error = e.error;
      return;
    }
  }
  trace->error = "no event for 120 s";
}

engine::GenerationRequest MakeRequest(const std::vector<int32_t>& prompt,
                                      int max_new_tokens) {
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;  // greedy: identical tokens for every policy
  r.max_new_tokens = max_new_tokens;
  r.ignore_eos = true;  // fixed lengths
  return r;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(
      v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - (p > 0));
  return v[i];
}

// One column of the matrix: a policy with a drafter entry, resolved.
struct Cell {
  std::string policy;  // The PolicyBenchOptions::policies entry (its label).
  std::string name;    // The registered policy it runs.
  engine::PolicyConfig config;  // policy_config, then the entry's own keys.
  std::string entry;            // As given in PolicyBenchOptions::drafters.
  std::string drafter;          // "none" or a registered drafter.
  int k = 0;  // num_speculative_tokens (0: adaptive); 0 for none.
  // EngineSpec::draft_budget for a drafter with its own pool, else "".
  std::string budget;
  uint64_t pool_bytes = 0;  // That pool's bytes (0: none).
};

// Appends `c` unless a cell of the same (policy, drafter, k) is there.
void AddCell(Cell c, std::vector<Cell>* cells) {
  const bool seen =
      std::any_of(cells->begin(), cells->end(), [&c](const Cell& x) {
        return x.policy == c.policy && x.drafter == c.drafter && x.k == c.k;
      });
  if (!seen) cells->push_back(std::move(c));
}

// A --policies entry "name" or "name:k=v:k2=v2": the registered name and
// `base` with the entry's keys set over it.
absl::StatusOr<std::pair<std::string, engine::PolicyConfig>> ParsePolicyEntry(
    const std::string& entry, const engine::PolicyConfig& base) {
  const size_t colon = entry.find(':');
  if (colon == std::string::npos) return std::make_pair(entry, base);
  std::vector<std::string> keys = absl::StrSplit(entry.substr(colon + 1), ':');
  absl::StatusOr<engine::PolicyConfig> own =
      engine::ParsePolicyConfig(absl::StrJoin(keys, ","));
  if (!own.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--policies entry '", entry, "': ", own.status().message()));
  }
  engine::PolicyConfig config = base;
  for (const auto& [key, value] : *own) config[key] = value;
  return std::make_pair(entry.substr(0, colon), std::move(config));
}

// Every (policy, drafter entry) of `o`, resolved as EngineSpec would be
// (policy_bench.h), in policy-major order; duplicates dropped. With
// spec_baselines, lru and lru + the drafter before each speculative cell.
absl::StatusOr<std::vector<Cell>> ResolveCells(
    const PolicyBenchOptions& o, const engine::PolicyConfig& config) {
  std::vector<Cell> cells;
  for (const std::string& policy : o.policies) {
    absl::StatusOr<std::pair<std::string, engine::PolicyConfig>> parsed =
        ParsePolicyEntry(policy, config);
    if (!parsed.ok()) return parsed.status();
    const auto& [name, policy_config] = *parsed;
    // The factory checks the config (as BuildEngine will); the policy's
    // registered traits give its own drafter and k.
    absl::StatusOr<std::unique_ptr<engine::OffloadPolicy>> p =
        engine::CreatePolicy(name, policy_config);
    if (!p.ok()) return p.status();
    absl::StatusOr<engine::SpeculationDefaults> own =
        engine::PolicySpeculation(name, policy_config);
    if (!own.ok()) return own.status();
    const std::string own_drafter = own->drafter;
    for (const std::string& entry : o.drafters) {
      Cell c{.policy = policy,
             .name = name,
             .config = policy_config,
             .entry = entry};
      if (entry == "off") {
        return absl::InvalidArgumentError(
            "--drafters: 'off' is gone; entries are EngineSpec::drafter "
            "verbatim: 'none' (no speculation), 'own' or '' (the policy's "
            "own drafter), or a registered drafter");
      }
      c.drafter = entry.empty() || entry == "own" ? own_drafter : entry;
      if (c.drafter != "none") {
        c.k = o.num_speculative_tokens >= 0 ? o.num_speculative_tokens
                                            : own->num_speculative_tokens;
      }
      if (o.spec_baselines && c.policy != "lru" && c.drafter != "none") {
        // The papers' two baselines, in this run (spec_summary.h).
        AddCell(Cell{.policy = "lru",
                     .name = "lru",
                     .config = config,
                     .entry = "baseline",
                     .drafter = "none"},
                &cells);
        AddCell(Cell{.policy = "lru",
                     .name = "lru",
                     .config = config,
                     .entry = "baseline",
                     .drafter = c.drafter,
                     .k = c.k},
                &cells);
      }
      AddCell(std::move(c), &cells);
    }
  }
  return cells;
}

// The drafter's own pool in fast memory (BuiltEngine::draft_bytes) for
// every drafter of `cells`, measured by building a small engine with
// draft_budget "extra" (no pool: 0).
absl::StatusOr<std::map<std::string, uint64_t>> DraftPools(
    const std::vector<Cell>& cells, const engine::ModelWeights* weights,
    const engine::Tokenizer* tokenizer, kernels::Backend* backend,
    const PolicyBenchOptions& o) {
  std::map<std::string, uint64_t> pools;
  for (const Cell& c : cells) {
    if (c.drafter == "none" || pools.contains(c.drafter)) continue;
    engine::EngineSpec spec;
    spec.name = c.name;
    spec.policy = c.name;
    spec.policy_config = c.config;
    spec.drafter = c.drafter;
    spec.num_speculative_tokens = c.k;
    spec.expert_cache_ratio = 0.01;  // one blob at least
    spec.slow_tier = o.slow_tier;
    spec.max_num_seqs = 1;
    spec.kv_cache_bytes = 8 << 20;
    spec.draft_budget = "extra";
    spec.draft_model_dir = o.draft_model_dir;
    absl::StatusOr<engine::BuiltEngine> built =
        engine::BuildEngine({weights, tokenizer, backend, nullptr}, spec);
    if (!built.ok()) return built.status();
    pools[c.drafter] = built->draft_bytes;
  }
  return pools;
}

// `cells` with the budget axis: a drafter with a pool once per budget.
std::vector<Cell> WithBudgets(const std::vector<Cell>& cells,
                              const std::map<std::string, uint64_t>& pools,
                              const std::vector<std::string>& budgets) {
  std::vector<Cell> out;
  for (const Cell& c : cells) {
    auto it = pools.find(c.drafter);
    if (it == pools.end() || it->second == 0) {
      out.push_back(c);
      continue;
    }
    for (const std::string& b : budgets) {
      Cell x = c;
      x.budget = b;
      x.pool_bytes = it->second;
      const bool seen =
          std::any_of(out.begin(), out.end(), [&x](const Cell& y) {
            return y.policy == x.policy && y.drafter == x.drafter &&
                   y.k == x.k && y.budget == x.budget;
          });
      if (!seen) out.push_back(std::move(x));
    }
  }
  return out;
}

// `v` with `digits` decimals, or "n/a" for a negative (undefined) value.
std::string OrNa(double v, int digits) {
  return v < 0 ? "n/a" : absl::StrFormat("%.*f", digits, v);
}

absl::StatusOr<PolicyResult> RunOne(
    const engine::ModelWeights* weights, const engine::Tokenizer* tokenizer,
    kernels::Backend* backend, const PolicyBenchOptions& o,
    const std::vector<std::vector<int32_t>>& prompts, const Cell& cell,
    double ratio, int concurrency) {
  const std::string& policy = cell.policy;
  engine::EngineSpec spec;
  spec.name = cell.name;
  spec.policy = cell.name;
  spec.policy_config = cell.config;
  spec.drafter = cell.drafter;
  spec.num_speculative_tokens = cell.drafter == "none" ? -1 : cell.k;
  spec.draft_budget = cell.budget.empty() ? "shared" : cell.budget;
  spec.draft_model_dir = o.draft_model_dir;
  spec.expert_cache_ratio = ratio;
  spec.slow_tier = o.slow_tier;
  spec.link = {.gbps = o.link_gbps,
               .latency_us = o.link_latency_us,
               .inplace_compute_ratio = o.inplace_compute_ratio};
  spec.cpu_moe_layers = o.cpu_moe_layers;
  spec.host_expert_threads = o.host_expert_threads;
  spec.fast_tier_in_backend_memory = o.fast_tier_in_backend_memory;
  spec.host_attention = o.host_attention;
  spec.kv_cache_bytes = o.kv_cache_bytes;
  spec.max_num_seqs = concurrency;
  // On a device backend the builder puts the slots in device memory and the
  // link copies on the device (the all-host fast tier is the CPU's case).
  // The policy is wrapped to record the target's acquires (access_trace.h).
  TraceRegistration trace;
  absl::StatusOr<engine::BuiltEngine> built = engine::BuildEngine(
      {weights, tokenizer, backend, nullptr}, trace.Wrap(spec));
  if (!built.ok()) return built.status();
  engine::Engine* const engine = built->engine.get();
  const engine::ExpertResidency* const stack = built->residency;

  // Untimed warm-up request (kernels, allocations, a first fill of the tier).
  {
    absl::StatusOr<std::shared_ptr<engine::RequestStream>> s =
        engine->Submit(MakeRequest(prompts[0], o.warmup_tokens));
    if (!s.ok()) return s.status();
    RequestTrace t;
    Drain(s->get(), &t);
    if (!t.error.empty()) return absl::InternalError("warm-up: " + t.error);
  }

  const engine::ResidencyStats before = stack->stats();
  const engine::SpecStats spec_before = engine->stats().spec;
  trace.trace().Start();
  std::vector<RequestTrace> traces(o.num_requests);
  std::vector<std::thread> drainers;
  const auto start = Clock::now();
  for (int i = 0; i < o.num_requests; ++i) {
    traces[i].submitted = Clock::now();
    absl::StatusOr<std::shared_ptr<engine::RequestStream>> s = engine->Submit(
        MakeRequest(prompts[i % prompts.size()], o.max_new_tokens));
    if (!s.ok()) {
      for (std::thread& t : drainers) t.join();
      return s.status();
    }
    drainers.emplace_back([stream = *std::move(s), trace = &traces[i]] {
      Drain(stream.get(), trace);
    });
  }
  for (std::thread& t : drainers) t.join();
  const auto end = Clock::now();
  const std::vector<engine::ExpertId> accesses = trace.trace().Stop();
  const engine::ResidencyStats after = stack->stats();
  const engine::SpecStats spec_after = engine->stats().spec;

  PolicyResult r;
  r.policy = policy;
  r.drafter_entry = cell.entry;
  r.drafter = built->spec.drafter;
  r.draft_budget = cell.budget;
  r.draft_bytes = built->draft_bytes;
  r.num_speculative_tokens =
      r.drafter == "none" ? 0 : built->spec.num_speculative_tokens;
  r.ratio = ratio;
  r.concurrency = concurrency;
  r.slots = after.slots;
  r.wall_seconds = Seconds(end - start);
  std::vector<double> gaps;
  double tpot_sum = 0, ttft_sum = 0;
  for (const RequestTrace& t : traces) {
    if (!t.error.empty()) return absl::InternalError(policy + ": " + t.error);
    r.tokens += t.tokens.size();
    r.outputs.push_back(t.tokens);
    if (t.token_times.empty()) continue;
    ttft_sum += Seconds(t.token_times.front() - t.submitted);
    for (size_t k = 1; k < t.token_times.size(); ++k) {
      gaps.push_back(Seconds(t.token_times[k] - t.token_times[k - 1]));
    }
    if (t.token_times.size() > 1) {
      tpot_sum += Seconds(t.token_times.back() - t.token_times.front()) /
                  (t.token_times.size() - 1);
    }
  }
  r.tokens_per_s = r.tokens / r.wall_seconds;
  r.tpot_mean_ms = 1e3 * tpot_sum / traces.size();
  r.tpot_p50_ms = 1e3 * Percentile(gaps, 0.5);
  r.tpot_p99_ms = 1e3 * Percentile(gaps, 0.99);
  r.ttft_mean_ms = 1e3 * ttft_sum / traces.size();
  r.hits = after.hits - before.hits;
  r.hits_loading = after.hits_loading - before.hits_loading;
  r.misses = after.misses - before.misses;
  r.inplace = after.inplace - before.inplace;
  if (const uint64_t acquires =
          r.hits + r.hits_loading + r.misses + r.inplace) {
    r.hit_rate = double(r.hits) / acquires;
    r.hit_loading_share = double(r.hits_loading) / acquires;
    r.inplace_share = double(r.inplace) / acquires;
  }
  {
    // The hybrid path's host compute, as the residency timed it at start.
    const engine::ExpertCosts costs = stack->expert_costs();
    r.host_expert_us = 1e6 * costs.host_seconds_first_row;
    r.host_expert_us_per_row = 1e6 * costs.host_seconds_per_row;
    r.inplace_seconds = after.inplace_seconds - before.inplace_seconds;
  }
  {
    const OracleHits oracle = BeladyHits(accesses, r.slots, /*warm=*/true);
    r.trace_accesses = oracle.accesses;
    r.oracle_hits = oracle.hits;
    r.oracle_hit_rate = oracle.hit_rate();
  }
  r.link_bytes = after.link_bytes - before.link_bytes;
  r.link_transfers = after.link_transfers - before.link_transfers;
  r.link_bytes_per_token = r.tokens ? double(r.link_bytes) / r.tokens : 0;
  r.transfers_per_token = r.tokens ? double(r.link_transfers) / r.tokens : 0;
  r.link_busy_seconds = after.link_busy_seconds - before.link_busy_seconds;
  r.expert_copy_gbps =
      r.link_busy_seconds > 0 ? r.link_bytes / r.link_busy_seconds / 1e9 : 0;
  r.stall_seconds = after.stall_seconds - before.stall_seconds;
  r.stall_share = r.stall_seconds / r.wall_seconds;
  r.link_busy_share = r.link_busy_seconds / r.wall_seconds;
  r.prefetch_loads = after.prefetch_loads - before.prefetch_loads;
  r.prefetch_used = after.prefetch_used - before.prefetch_used;
  r.prefetch_wasted = after.prefetch_wasted - before.prefetch_wasted;
  r.prefetch_cancelled = after.prefetch_cancelled - before.prefetch_cancelled;
  r.prefetch_precision =
      r.prefetch_loads ? double(r.prefetch_used) / r.prefetch_loads : -1;
  r.drafts = spec_after.drafts - spec_before.drafts;
  r.draft_tokens = spec_after.draft_tokens - spec_before.draft_tokens;
  r.accepted_tokens = spec_after.accepted_tokens - spec_before.accepted_tokens;
  r.accepted_per_position = spec_after.accepted_per_position;
  for (size_t i = 0; i < r.accepted_per_position.size() &&
                     i < spec_before.accepted_per_position.size();
       ++i) {
    r.accepted_per_position[i] -= spec_before.accepted_per_position[i];
  }
  if (r.draft_tokens > 0) {
    r.acceptance_rate = double(r.accepted_tokens) / r.draft_tokens;
  }
  if (r.drafts > 0) {
    r.tokens_per_verification = 1 + double(r.accepted_tokens) / r.drafts;
    r.mean_k = double(r.draft_tokens) / r.drafts;
  }
  r.draft_seconds = spec_after.draft_seconds - spec_before.draft_seconds;
  r.verify_seconds = spec_after.verify_seconds - spec_before.verify_seconds;
  r.draft_share = r.draft_seconds / r.wall_seconds;
  r.verify_share = r.verify_seconds / r.wall_seconds;
  return r;
}

// "576.0 KiB", "336.0 MiB", "26.25 GiB".
std::string HumanBytes(uint64_t bytes) {
  if (bytes < (uint64_t{1} << 20)) {
    return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  }
  if (bytes < (uint64_t{1} << 30)) {
    return absl::StrFormat("%.1f MiB", bytes / double(1 << 20));
  }
  return absl::StrFormat("%.2f GiB", bytes / double(1 << 30));
}

}  // namespace

std::string DrafterLabel(const std::string& drafter, int k) {
  if (drafter == "none") return drafter;
  return k > 0 ? absl::StrFormat("%s k=%d", drafter, k)
               : absl::StrCat(drafter, " k=adaptive");
}

namespace {

// The report's figures that span its results: identical outputs (with
// `identical`, what the repeats agreed on), distinct generated tokens,
// expert copy rate against the plain copy probe.
void FinishReport(bool identical, PolicyReport* report) {
  report->outputs_identical = identical;
  if (report->results.empty()) return;
  {
    // How varied the generated text is: a model that repeats one token
    // routes every decode step alike, which flatters the caching policies.
    std::set<int32_t> distinct;
    for (const std::vector<int32_t>& out : report->results.front().outputs) {
      distinct.insert(out.begin(), out.end());
    }
    report->distinct_generated_tokens = static_cast<int>(distinct.size());
  }
  for (PolicyResult& r : report->results) {
    if (report->copy_probe.event_gbps > 0) {
      r.expert_copy_vs_plain =
          r.expert_copy_gbps / report->copy_probe.event_gbps;
    }
  }
  for (const PolicyResult& r : report->results) {
    if (r.outputs != report->results.front().outputs) {
      report->outputs_identical = false;
    }
  }
}

}  // namespace

absl::StatusOr<PolicyReport> RunPolicyBench(const PolicyBenchOptions& options,
                                            kernels::Backend* backend) {
  // Mutable: --expert_cache_mb turns into this model's ratio below.
  PolicyBenchOptions o = options;
  if (o.slow_tier != "host" && o.slow_tier != "disk") {
    return absl::InvalidArgumentError("--slow_tier must be host or disk");
  }
  if (o.num_requests < 1 || o.max_new_tokens < 1 || o.policies.empty() ||
      o.drafters.empty() || o.ratios.empty() || o.concurrencies.empty()) {
    return absl::InvalidArgumentError(
        "need >= 1 request, token, policy, drafter, ratio and concurrency");
  }
  if (o.num_speculative_tokens < -1 ||
      o.num_speculative_tokens > engine::kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_speculative_tokens must be in [-1, ",
                     engine::kMaxSpeculativeTokens,
                     "] (-1: the policy's own, 0: adaptive)"));
  }
  absl::StatusOr<engine::PolicyConfig> config =
      engine::ParsePolicyConfig(o.policy_config);
  if (!config.ok()) return config.status();
  for (const std::string& b : o.draft_budgets) {
    if (b != "shared" && b != "extra") {
      return absl::InvalidArgumentError(
          "--draft_budget entries must be shared or extra");
    }
  }
  if (o.draft_budgets.empty()) {
    return absl::InvalidArgumentError("need >= 1 draft budget");
  }
  absl::StatusOr<std::vector<Cell>> cells = ResolveCells(o, *config);
  if (!cells.ok()) return cells.status();
  absl::StatusOr<std::unique_ptr<engine::ModelWeights>> weights =
      o.make_weights
          ? o.make_weights()
          : engine::ModelWeights::Load(o.model_dir,
                                       {.pack_experts = o.slow_tier == "host"});
  if (!weights.ok()) return weights.status();
  if (o.expert_cache_mb > 0) {
    // The same bytes of fast memory for every checkpoint of a model: a
    // quantized one holds more of its (smaller) experts.
    o.ratios = {
        std::min(1.0, o.expert_cache_mb * 1048576.0 /
                          static_cast<double>((*weights)->expert_bytes()))};
  }
  // Text prompts need the model's tokenizer; a model without one (the
  // generated random-weight models) gets synthetic ids and a stand-in
  // tokenizer that only satisfies the engine.
  const bool synthetic =
      o.make_weights ||
      !std::filesystem::exists(o.model_dir + "/tokenizer.model");
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      synthetic ? StandInTokenizer((*weights)->config().vocab_size)
                : engine::Tokenizer::LoadFromModelDir(o.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();

  {
    absl::StatusOr<std::map<std::string, uint64_t>> pools =
        DraftPools(*cells, weights->get(), tokenizer->get(), backend, o);
    if (!pools.ok()) return pools.status();
    *cells = WithBudgets(*cells, *pools, o.draft_budgets);
  }

  PolicyReport report;
  {
    const absl::Time now = absl::Now();
    report.started_utc =
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", now, absl::UTCTimeZone());
    report.run_id = absl::StrCat(
        absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone()), "-p",
        static_cast<int64_t>(getpid()));
  }
  report.machine = DescribeMachine();
  report.backend = backend->name();
  report.fast_tier_on_device = backend->device() != kernels::Device::kCpu;
  report.threads = o.threads;
  report.options = o;
  report.model_name =
      !o.model_name.empty()
          ? o.model_name
          : std::filesystem::path(o.model_dir).filename().string();
  if (report.model_name.empty()) {
    report.model_name =
        std::filesystem::path(o.model_dir).parent_path().filename().string();
  }
  const engine::ModelConfig& c = (*weights)->config();
  report.layers = c.num_hidden_layers;
  report.experts = c.num_experts;
  report.top_k = c.num_experts_per_tok;
  report.expert_blob_bytes = (*weights)->expert({0, 0}).bytes;
  report.all_expert_bytes = (*weights)->expert_bytes();
  if (o.link_gbps > 0) {
    report.miss_transfer_us =
        o.link_latency_us + report.expert_blob_bytes / (o.link_gbps * 1e3);
  }
  report.hybrid = o.fast_tier_in_backend_memory || o.cpu_moe_layers > 0 ||
                  report.fast_tier_on_device;
  if (report.hybrid) {
    // What the host's CPU kernels read experts from: its memory bandwidth
    // (512 MiB, the host pool's threads), beside the link's.
    const int host_threads = engine::HostExpertThreads(o.host_expert_threads);
    report.host_read_gbps =
        MeasureReadBandwidthGbps(512ull << 20, host_threads, 3);
    report.host_read_threads = host_threads;
  }
  {
    absl::StatusOr<ExpertComputeTiming> t =
        ExpertComputeMicros(**weights, backend);
    if (!t.ok()) return t.status();
    report.expert_compute_us = t->micros_per_expert;
    report.expert_compute_samples = t->distinct_experts;
  }
  {
    // Before the policy runs: what the same backend achieves copying one
    // blob at a time with nothing else running.
    absl::StatusOr<CopyProbe> probe =
        MeasurePinnedCopy(backend, report.expert_blob_bytes);
    if (!probe.ok()) return probe.status();
    report.copy_probe = *probe;
  }

  std::vector<std::vector<int32_t>> prompts;
  report.synthetic_prompts = synthetic;
  if (synthetic) {
    report.prompt_seed = kSyntheticPromptSeed;
    prompts = SyntheticPrompts(c.vocab_size, kSyntheticPromptSeed);
  } else {
    for (const std::string& text : TextPrompts()) {
      absl::StatusOr<std::vector<int32_t>> ids =
          (*tokenizer)->Encode(text, /*add_bos=*/true);
      if (!ids.ok()) return ids.status();
      prompts.push_back(*std::move(ids));
    }
  }
  for (int i = 0; i < o.num_requests; ++i) {
    report.prompt_lengths.push_back(prompts[i % prompts.size()].size());
  }

  bool identical = true;
  // The time budget: checked before each run but the first.
  const absl::Time began = absl::Now();
  bool out_of_time = false;
  int runs_started = 0;
  auto may_start = [&]() {
    if (out_of_time) return false;
    if (o.max_seconds > 0 && runs_started > 0 &&
        absl::ToDoubleSeconds(absl::Now() - began) >= o.max_seconds) {
      out_of_time = true;
      report.complete = false;
      return false;
    }
    ++runs_started;
    return true;
  };
  // A shared draft pool must leave at least one expert slot (as
  // BuildEngine checks); cells where it does not are skipped, not failed.
  auto runnable_at = [&](const Cell& cell, double ratio) {
    return cell.budget != "shared" ||
           engine::ExpertCacheBytes(**weights, ratio, 0) >=
               cell.pool_bytes + report.expert_blob_bytes;
  };
  int runs_planned = 0;
  for (double ratio : o.ratios) {
    for (const Cell& cell : *cells) {
      if (!runnable_at(cell, ratio)) continue;  // skipped below, not planned
      runs_planned +=
          static_cast<int>(o.concurrencies.size()) * std::max(1, o.repeats);
    }
  }
  for (double ratio : o.ratios) {
    for (int conc : o.concurrencies) {
      if (out_of_time) break;
      const size_t first = report.results.size();
      const uint64_t budget = engine::ExpertCacheBytes(**weights, ratio, 0);
      std::vector<bool> runnable(cells->size(), true);
      for (size_t p = 0; p < cells->size(); ++p) {
        const Cell& cell = (*cells)[p];
        if (runnable_at(cell, ratio)) continue;
        runnable[p] = false;
        if (conc != o.concurrencies.front()) continue;
        report.skipped.push_back(absl::StrFormat(
            "ratio %.2f: %s + %s, budget shared: the draft pool (%s) leaves "
            "no expert slot in the %s fast tier",
            ratio, cell.policy, DrafterLabel(cell.drafter, cell.k),
            HumanBytes(cell.pool_bytes), HumanBytes(budget)));
      }
      std::vector<std::vector<PolicyResult>> runs(cells->size());
      for (int rep = 0; rep < std::max(1, o.repeats); ++rep) {
        for (size_t p = 0; p < cells->size(); ++p) {
          if (!runnable[p]) continue;
          if (!may_start()) break;
          const Cell& cell = (*cells)[p];
          std::fprintf(stderr,
                       "  ratio %.2f concurrency %d policy %s drafter %s%s "
                       "(repeat %d) ...\n",
                       ratio, conc, cell.policy.c_str(),
                       DrafterLabel(cell.drafter, cell.k).c_str(),
                       cell.budget.empty() ? "" : (" " + cell.budget).c_str(),
                       rep + 1);
          absl::StatusOr<PolicyResult> r =
              RunOne(weights->get(), tokenizer->get(), backend, o, prompts,
                     cell, ratio, conc);
          if (!r.ok()) return r.status();
          runs[p].push_back(*std::move(r));
        }
      }
      for (std::vector<PolicyResult>& v : runs) {
        if (v.empty()) continue;  // skipped
        std::vector<double> tps;
        for (const PolicyResult& r : v) tps.push_back(r.tokens_per_s);
        // Every repeat must generate the same tokens as the reported one.
        for (const PolicyResult& r : v) {
          if (r.outputs != v.front().outputs) identical = false;
        }
        std::sort(v.begin(), v.end(),
                  [](const PolicyResult& a, const PolicyResult& b) {
                    return a.tokens_per_s < b.tokens_per_s;
                  });
        PolicyResult median = std::move(v[v.size() / 2]);
        median.repeat_tokens_per_s = std::move(tps);
        report.results.push_back(std::move(median));
      }
      // The same group's run of `policy` without drafter, or null.
      auto undrafted = [&](const std::string& policy) -> const PolicyResult* {
        for (size_t i = first; i < report.results.size(); ++i) {
          const PolicyResult& r = report.results[i];
          if (r.policy == policy && r.drafter == "none") return &r;
        }
        return nullptr;
      };
      const PolicyResult* base = undrafted("on_demand");
      for (size_t i = first; i < report.results.size(); ++i) {
        PolicyResult& r = report.results[i];
        if (base != nullptr) {
          r.speedup_vs_on_demand = r.tokens_per_s / base->tokens_per_s;
        }
        const PolicyResult* plain = undrafted(r.policy);
        if (r.drafter != "none" && plain != nullptr) {
          r.speedup_vs_no_drafter = r.tokens_per_s / plain->tokens_per_s;
        }
      }
      if (o.on_group_done) {
        PolicyReport so_far = report;
        FinishReport(identical, &so_far);
        o.on_group_done(so_far);
      }
    }
  }
  report.runs_not_started = runs_planned - runs_started;
  FinishReport(identical, &report);
  return report;
}

void PrintPolicyReport(const PolicyReport& rep, std::FILE* out) {
  const PolicyBenchOptions& o = rep.options;
  if (!rep.complete) {
    std::fprintf(out,
                 "INCOMPLETE: the %.0f s budget (--max_seconds) ended the run; "
                 "%d planned runs did not start\n",
                 o.max_seconds, rep.runs_not_started);
  }
  std::fprintf(out, "run: %s (started %s)\n", rep.run_id.c_str(),
               rep.started_utc.c_str());
  std::fprintf(out,
               "machine: %s, %d logical CPUs, %.1f GiB, %s; backend %s, %d "
               "CPU kernel threads\n",
               rep.machine.cpu_model.c_str(), rep.machine.logical_cpus,
               rep.machine.memory_bytes / double(1ull << 30),
               rep.machine.simd.c_str(), rep.backend.c_str(), rep.threads);
  std::fprintf(out,
               "model: %s (%d layers x %d experts, top-%d); expert blob "
               "%s, all experts %s\n",
               rep.model_name.c_str(), rep.layers, rep.experts, rep.top_k,
               HumanBytes(rep.expert_blob_bytes).c_str(),
               HumanBytes(rep.all_expert_bytes).c_str());
  if (o.link_gbps > 0) {
    std::fprintf(out,
                 "link emulation: ON, %.3g GB/s, %.3g us latency -> one miss "
                 "transfer %.1f us\n",
                 o.link_gbps, o.link_latency_us, rep.miss_transfer_us);
  } else {
    std::fprintf(out,
                 "link emulation: OFF (transfers are %s-tier copies at "
                 "memory speed)\n",
                 o.slow_tier.c_str());
  }
  const CopyProbe& p = rep.copy_probe;
  std::fprintf(out,
               "plain pinned copy: %d copies of one blob (%s) from "
               "AllocateHost memory into backend memory, one stream, %d "
               "distinct buffers: %.2f GB/s (events), %.2f GB/s (wall)\n",
               p.copies, HumanBytes(p.bytes_per_copy).c_str(), p.buffers,
               p.event_gbps, p.wall_gbps);
  std::fprintf(
      out, "expert copy GB/s (table) = link bytes / link busy seconds, %s\n",
      o.link_gbps > 0
          ? "here the EMULATED link's rate (busy time includes the "
            "emulation's sleep), not the hardware's"
          : (rep.fast_tier_on_device
                 ? "busy = event time of each copy on the link's copy "
                   "stream (plus any host read into staging)"
                 : "busy = wall time of each slow-tier read into the slot "
                   "(host RAM)"));
  std::fprintf(out,
               "expert compute (ExpertFfn, 1 token, measured over %d "
               "experts in backend memory): %.1f us; miss transfer / "
               "compute = %s\n",
               rep.expert_compute_samples, rep.expert_compute_us,
               o.link_gbps > 0
                   ? absl::StrFormat(
                         "%.1fx", rep.miss_transfer_us / rep.expert_compute_us)
                         .c_str()
                   : "n/a");
  if (rep.hybrid) {
    double first = 0, per_row = 0;
    for (const PolicyResult& r : rep.results) {
      if (r.host_expert_us > 0) {
        first = r.host_expert_us;
        per_row = r.host_expert_us_per_row;
        break;
      }
    }
    std::fprintf(out,
                 "hybrid: cpu_moe_layers %d, host expert pool %d threads; "
                 "host memory read %.1f GB/s (%d threads, measured here); "
                 "host expert compute %.1f us at 1 row + %.2f us per further "
                 "row (timed at engine start, this run's kernels)%s\n",
                 o.cpu_moe_layers, rep.host_read_threads, rep.host_read_gbps,
                 rep.host_read_threads, first, per_row,
                 o.fast_tier_in_backend_memory && !rep.fast_tier_on_device
                     ? "; the CPU backend stands in for the device "
                       "(--hybrid_on_cpu): both sides share this CPU"
                     : "");
  }
  if (o.host_attention != 0) {
    std::fprintf(out,
                 "host attention: KV cache (%llu MiB) in host memory, "
                 "attention on a host CPU pool of %d threads%s\n",
                 static_cast<unsigned long long>(o.kv_cache_bytes >> 20),
                 engine::HostExpertThreads(o.host_expert_threads),
                 o.fast_tier_in_backend_memory
                     ? "; its bytes join the expert slots (see slots)"
                     : "");
  }
  std::fprintf(
      out, "prompts: %s\n",
      rep.synthetic_prompts
          ? absl::StrFormat("synthetic (the model has no tokenizer.model): "
                            "token ids uniform in [0, vocab) from seed %d, "
                            "lengths of the 8 text prompts",
                            rep.prompt_seed)
                .c_str()
          : "text (8 fixed prompts, the model's tokenizer.model, BOS added)");
  std::fprintf(out,
               "workload: %d requests (prompt tokens %s), %d new tokens each, "
               "greedy, ignore_eos; %d-token untimed warm-up request per "
               "engine; slow tier %s; policy_config '%s'; median of %d "
               "interleaved repeats\n",
               o.num_requests, absl::StrJoin(rep.prompt_lengths, ",").c_str(),
               o.max_new_tokens, o.warmup_tokens, o.slow_tier.c_str(),
               o.policy_config.c_str(), o.repeats);
  std::fprintf(out,
               "outputs identical across policies: %s; %d distinct token ids "
               "among the %lld generated\n\n",
               rep.outputs_identical ? "yes" : "no",
               rep.distinct_generated_tokens,
               static_cast<long long>(rep.results.front().tokens));
  std::fprintf(
      out,
      "drafters: %s (EngineSpec::drafter: none = no speculation; own or '' "
      "= the policy's own drafter); num_speculative_tokens %d (-1: the "
      "policy's own, 0: adaptive); draft_budget %s (drafters with their own "
      "pool: shared = taken from the fast-tier budget, extra = on top)\n",
      absl::StrJoin(o.drafters, ",",
                    [](std::string* out, const std::string& d) {
                      absl::StrAppend(out, d.empty() ? "''" : d);
                    })
          .c_str(),
      o.num_speculative_tokens, absl::StrJoin(o.draft_budgets, ",").c_str());
  if (o.spec_baselines) {
    std::fprintf(out,
                 "spec baselines: on (lru, and lru with the same drafter and "
                 "k, run beside every speculative cell; drafter entry "
                 "'baseline'; see the summary at the end)\n");
  }
  std::fprintf(out,
               "oracle hit: Belady's MIN on the cell's own target access "
               "trace at its slots, starting with the first `slots` "
               "distinct experts resident (no demand-caching policy can "
               "hit more; a prefetching one can)\n");
  for (const std::string& s : rep.skipped) {
    std::fprintf(out, "skipped: %s\n", s.c_str());
  }
  std::fprintf(out, "\n");
  std::fprintf(
      out,
      "| ratio | conc | policy | drafter | budget | draft MiB | slots "
      "| tok/s | vs on_demand | vs no drafter | TPOT mean/p50/p99 ms "
      "| hit rate | oracle hit | hit_loading | in place | transfers/tok | link "
      "KiB/tok | stall share | link busy | expert copy GB/s (x "
      "plain) | prefetch precision (used/loads) | cancelled "
      "prefetches |\n");
  std::fprintf(out,
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
               "---|---|---|---|---|---|---|\n");
  for (const PolicyResult& r : rep.results) {
    const std::string vs =
        r.speedup_vs_on_demand > 0
            ? absl::StrFormat("%.2fx", r.speedup_vs_on_demand)
            : "n/a";
    const std::string vs_plain =
        r.speedup_vs_no_drafter > 0
            ? absl::StrFormat("%.2fx", r.speedup_vs_no_drafter)
            : (r.drafter == "none" ? "-" : "n/a");
    const std::string prec =
        r.prefetch_precision < 0
            ? "n/a"
            : absl::StrFormat("%.2f (%d/%d)", r.prefetch_precision,
                              r.prefetch_used, r.prefetch_loads);
    const std::string copy =
        r.expert_copy_gbps > 0
            ? absl::StrFormat("%.2f (%.2fx)", r.expert_copy_gbps,
                              r.expert_copy_vs_plain)
            : "n/a";
    std::fprintf(
        out,
        "| %.2f | %d | %s | %s | %s | %s | %d | %.1f | %s | %s | %.2f "
        "/ %.2f / %.2f | %.3f | %.3f | %.3f | %.3f | %.2f | %.1f | %.1f%% | "
        "%.1f%% | %s | %s | %d |\n",
        r.ratio, r.concurrency, r.policy.c_str(),
        DrafterLabel(r.drafter, r.num_speculative_tokens).c_str(),
        r.draft_budget.empty() ? "-" : r.draft_budget.c_str(),
        r.draft_bytes > 0
            ? absl::StrFormat("%.2f", r.draft_bytes / double(1 << 20)).c_str()
            : "-",
        r.slots, r.tokens_per_s, vs.c_str(), vs_plain.c_str(), r.tpot_mean_ms,
        r.tpot_p50_ms, r.tpot_p99_ms, r.hit_rate, r.oracle_hit_rate,
        r.hit_loading_share, r.inplace_share, r.transfers_per_token,
        r.link_bytes_per_token / 1024.0, 100 * r.stall_share,
        100 * r.link_busy_share, copy.c_str(), prec.c_str(),
        static_cast<int>(r.prefetch_cancelled));
  }
  // Speculation: only when some cell drafted.
  const bool any_drafter =
      std::any_of(rep.results.begin(), rep.results.end(),
                  [](const PolicyResult& r) { return r.drafter != "none"; });
  if (!any_drafter) return;
  std::fprintf(out,
               "\nspeculative decoding (cells with a drafter; acceptance = "
               "accepted / draft tokens, tokens/verification = 1 + accepted "
               "/ drafts, mean k = draft tokens / drafts, shares of wall "
               "time):\n\n");
  std::fprintf(out,
               "| ratio | conc | policy | drafter | budget | tok/s | vs "
               "on_demand | vs no drafter | drafts | draft tokens | accepted | "
               "acceptance | "
               "tokens/verification | mean k | draft share | verify share "
               "|\n");
  std::fprintf(out,
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
               "---|\n");
  for (const PolicyResult& r : rep.results) {
    if (r.drafter == "none") continue;
    std::fprintf(
        out,
        "| %.2f | %d | %s | %s | %s | %.1f | %s | %s | %d | %d | %d | %s | %s "
        "| %s | %.1f%% | %.1f%% |\n",
        r.ratio, r.concurrency, r.policy.c_str(),
        DrafterLabel(r.drafter, r.num_speculative_tokens).c_str(),
        r.draft_budget.empty() ? "-" : r.draft_budget.c_str(), r.tokens_per_s,
        r.speedup_vs_on_demand > 0
            ? absl::StrFormat("%.2fx", r.speedup_vs_on_demand).c_str()
            : "n/a",
        r.speedup_vs_no_drafter > 0
            ? absl::StrFormat("%.2fx", r.speedup_vs_no_drafter).c_str()
            : "n/a",
        static_cast<int>(r.drafts), static_cast<int>(r.draft_tokens),
        static_cast<int>(r.accepted_tokens), OrNa(r.acceptance_rate, 3).c_str(),
        OrNa(r.tokens_per_verification, 2).c_str(), OrNa(r.mean_k, 2).c_str(),
        100 * r.draft_share, 100 * r.verify_share);
  }
  PrintSpecSummary(rep, out);
}

namespace {

// FNV-1a over the first run's generated token ids (every run's, when
// outputs_identical), in hex: two reports of one workload on the same
// weights (a model generated in memory and the same one written to disk)
// compare by it. "" without runs.
std::string OutputsFingerprint(const PolicyReport& rep) {
  if (rep.results.empty()) return "";
  uint64_t h = 1469598103934665603ull;
  for (const std::vector<int32_t>& out : rep.results.front().outputs) {
    for (int32_t id : out) {
      for (int b = 0; b < 4; ++b) {
        h = (h ^ ((static_cast<uint32_t>(id) >> (8 * b)) & 0xff)) *
            1099511628211ull;
      }
    }
    h = (h ^ 0xff) * 1099511628211ull;  // request separator
  }
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

}  // namespace

nlohmann::json PolicyReportJson(const PolicyReport& rep) {
  const PolicyBenchOptions& o = rep.options;
  nlohmann::json j;
  j["mode"] = "policies";
  j["run"] = {{"id", rep.run_id}, {"started_utc", rep.started_utc}};
  j["machine"] = {{"cpu_model", rep.machine.cpu_model},
                  {"logical_cpus", rep.machine.logical_cpus},
                  {"memory_bytes", rep.machine.memory_bytes},
                  {"simd", rep.machine.simd}};
  j["backend"] = rep.backend;
  j["fast_tier_on_device"] = rep.fast_tier_on_device;
  j["threads"] = rep.threads;
  j["model"] = {{"name", rep.model_name},
                {"dir", o.model_dir},
                {"in_memory", static_cast<bool>(o.make_weights)},
                {"layers", rep.layers},
                {"experts", rep.experts},
                {"top_k", rep.top_k},
                {"expert_blob_bytes", rep.expert_blob_bytes},
                {"all_expert_bytes", rep.all_expert_bytes}};
  j["link"] = {{"emulated", o.link_gbps > 0},
               {"gbps", o.link_gbps},
               {"latency_us", o.link_latency_us},
               {"inplace_compute_ratio", o.inplace_compute_ratio},
               {"miss_transfer_us", rep.miss_transfer_us},
               {"expert_copy_rate_emulated", o.link_gbps > 0}};
  j["copy_probe"] = {{"bytes_per_copy", rep.copy_probe.bytes_per_copy},
                     {"copies", rep.copy_probe.copies},
                     {"buffers", rep.copy_probe.buffers},
                     {"event_seconds", rep.copy_probe.event_seconds},
                     {"wall_seconds", rep.copy_probe.wall_seconds},
                     {"event_gbps", rep.copy_probe.event_gbps},
                     {"wall_gbps", rep.copy_probe.wall_gbps}};
  j["expert_compute_us"] = rep.expert_compute_us;
  if (rep.hybrid) {
    j["hybrid"] = {{"cpu_moe_layers", o.cpu_moe_layers},
                   {"host_attention", o.host_attention},
                   {"fast_tier_in_backend_memory",
                    o.fast_tier_in_backend_memory || rep.fast_tier_on_device},
                   {"host_read_gbps", rep.host_read_gbps},
                   {"host_read_threads", rep.host_read_threads}};
  }
  j["expert_compute_samples"] = rep.expert_compute_samples;
  j["workload"] = {
      {"num_requests", o.num_requests},
      {"max_new_tokens", o.max_new_tokens},
      {"warmup_tokens", o.warmup_tokens},
      {"prompt_lengths", rep.prompt_lengths},
      {"prompts", rep.synthetic_prompts ? "synthetic" : "text"},
      {"prompt_seed", rep.synthetic_prompts ? nlohmann::json(rep.prompt_seed)
                                            : nlohmann::json(nullptr)},
      {"slow_tier", o.slow_tier},
      {"policy_config", o.policy_config},
      {"repeats", o.repeats},
      {"drafters", o.drafters},
      {"draft_budgets", o.draft_budgets},
      {"spec_baselines", o.spec_baselines},
      {"num_speculative_tokens", o.num_speculative_tokens},
      {"greedy", true}};
  j["complete"] = rep.complete;
  j["runs_not_started"] = rep.runs_not_started;
  j["max_seconds"] = rep.options.max_seconds;
  j["outputs_identical"] = rep.outputs_identical;
  j["distinct_generated_tokens"] = rep.distinct_generated_tokens;
  j["outputs_fingerprint"] = OutputsFingerprint(rep);
  j["skipped"] = rep.skipped;
  j["results"] = nlohmann::json::array();
  for (const PolicyResult& r : rep.results) {
    nlohmann::json x = {
        {"policy", r.policy},
        {"drafter_entry", r.drafter_entry},
        {"drafter", r.drafter},
        {"num_speculative_tokens", r.num_speculative_tokens},
        {"draft_budget", r.draft_budget},
        {"draft_bytes", r.draft_bytes},
        {"expert_cache_ratio", r.ratio},
        {"concurrency", r.concurrency},
        {"slots", r.slots},
        {"tokens", r.tokens},
        {"wall_seconds", r.wall_seconds},
        {"tokens_per_s", r.tokens_per_s},
        {"tpot_mean_ms", r.tpot_mean_ms},
        {"tpot_p50_ms", r.tpot_p50_ms},
        {"tpot_p99_ms", r.tpot_p99_ms},
        {"ttft_mean_ms", r.ttft_mean_ms},
        {"hits", r.hits},
        {"hits_loading", r.hits_loading},
        {"misses", r.misses},
        {"hit_rate", r.hit_rate},
        {"hit_loading_share", r.hit_loading_share},
        {"inplace", r.inplace},
        {"inplace_share", r.inplace_share},
        {"inplace_seconds", r.inplace_seconds},
        {"host_expert_us", r.host_expert_us},
        {"host_expert_us_per_row", r.host_expert_us_per_row},
        {"trace_accesses", r.trace_accesses},
        {"oracle_hits", r.oracle_hits},
        {"oracle_hit_rate", r.oracle_hit_rate},
        {"link_bytes", r.link_bytes},
        {"link_transfers", r.link_transfers},
        {"link_bytes_per_token", r.link_bytes_per_token},
        {"transfers_per_token", r.transfers_per_token},
        {"link_busy_seconds", r.link_busy_seconds},
        {"stall_seconds", r.stall_seconds},
        {"stall_share", r.stall_share},
        {"link_busy_share", r.link_busy_share},
        {"repeat_tokens_per_s", r.repeat_tokens_per_s},
        {"prefetch_loads", r.prefetch_loads},
        {"prefetch_used", r.prefetch_used},
        {"prefetch_wasted", r.prefetch_wasted},
        {"prefetch_cancelled", r.prefetch_cancelled},
        {"drafts", r.drafts},
        {"draft_tokens", r.draft_tokens},
        {"accepted_tokens", r.accepted_tokens},
        {"draft_seconds", r.draft_seconds},
        {"verify_seconds", r.verify_seconds},
        {"draft_share", r.draft_share},
        {"verify_share", r.verify_share},
    };
    // Ratios that are undefined (no on_demand / undrafted cell, no drafts)
    // are null.
    auto or_null = [](double v, bool defined) {
      return defined ? nlohmann::json(v) : nlohmann::json(nullptr);
    };
    x["speedup_vs_no_drafter"] =
        or_null(r.speedup_vs_no_drafter, r.speedup_vs_no_drafter > 0);
    x["acceptance_rate"] = or_null(r.acceptance_rate, r.acceptance_rate >= 0);
    x["tokens_per_verification"] =
        or_null(r.tokens_per_verification, r.tokens_per_verification >= 0);
    x["mean_k"] = or_null(r.mean_k, r.mean_k >= 0);
    x["speedup_vs_on_demand"] = r.speedup_vs_on_demand > 0
                                    ? nlohmann::json(r.speedup_vs_on_demand)
                                    : nlohmann::json(nullptr);
    x["expert_copy_gbps"] = r.expert_copy_gbps > 0
                                ? nlohmann::json(r.expert_copy_gbps)
                                : nlohmann::json(nullptr);
    x["expert_copy_vs_plain"] = r.expert_copy_vs_plain > 0
                                    ? nlohmann::json(r.expert_copy_vs_plain)
                                    : nlohmann::json(nullptr);
    x["prefetch_precision"] = r.prefetch_precision >= 0
                                  ? nlohmann::json(r.prefetch_precision)
                                  : nlohmann::json(nullptr);
    j["results"].push_back(std::move(x));
  }
  j["spec_summary"] = SpecSummaryJson(rep);
  return j;
}

}  // namespace moeserve::bench
