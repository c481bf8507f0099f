#include "tools/bench/host_overhead.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/builder/engine_builder.h"
#include "engine/builder/engine_spec.h"
#include "engine/engine.h"
#include "engine/generation.h"
#include "engine/offload/expert_residency.h"
#include "kernels/counting_backend.h"
#include "kernels/null_backend.h"
#include "tools/bench/stand_in_tokenizer.h"

namespace moeserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

// `batch` prompts of `len` ids, distinct per request, the same every run.
std::vector<std::vector<int32_t>> Prompts(int batch, int len, int64_t vocab) {
  std::vector<std::vector<int32_t>> prompts(batch);
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i < len; ++i) {
      prompts[r].push_back(
          static_cast<int32_t>((1 + 7919 * r + 104729 * int64_t{i}) % vocab));
    }
  }
  return prompts;
}

// Runs the prompts together to `new_tokens` each (greedy, EOS ignored),
// routed from the start of the null device's sequence; returns the seconds
// from the first token of request 0 to its last, i.e. new_tokens - 1 decode
// steps.
absl::StatusOr<double> Run(engine::Engine* engine, kernels::NullBackend* device,
                           const std::vector<std::vector<int32_t>>& prompts,
                           int new_tokens) {
  device->RestartRouting();
  std::vector<engine::GenerationRequest> requests;
  for (const std::vector<int32_t>& p : prompts) {
    engine::GenerationRequest r;
    r.prompt = p;
    r.sampling.temperature = 0;
    r.max_new_tokens = new_tokens;
    r.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  absl::StatusOr<std::vector<std::shared_ptr<engine::RequestStream>>> streams =
      engine->SubmitAll(std::move(requests));
  if (!streams.ok()) return streams.status();
  Clock::time_point first{}, last{};
  for (size_t i = 0; i < streams->size(); ++i) {
    int tokens = 0;
    engine::GenerationEvent e;
    bool finished = false;
    while (!finished && (*streams)[i]->Pop(&e, absl::Seconds(120))) {
      const Clock::time_point now = Clock::now();
      if (i == 0 && !e.tokens.empty()) {
        if (tokens == 0) first = now;
        last = now;
      }
      tokens += static_cast<int>(e.tokens.size());
      if (e.finish == engine::FinishReason::kError) {
        return absl::InternalError(absl::StrCat("request ", i, ": ", e.error));
      }
      finished = e.finish != engine::FinishReason::kNone;
    }
    if (!finished) return absl::DeadlineExceededError("no event for 120 s");
    if (tokens != new_tokens) {
      return absl::InternalError(absl::StrCat("request ", i, " got ", tokens,
                                              " tokens, not ", new_tokens));
    }
  }
  return std::chrono::duration<double>(last - first).count();
}

// The residency's target acquires, by kind, and its stall time.
struct Snapshot {
  double hits = 0, misses = 0, all = 0, stall_seconds = 0;
};

Snapshot SnapshotOf(const engine::ResidencyStats& s) {
  return {double(s.hits), double(s.misses),
          double(s.hits + s.hits_loading + s.misses + s.inplace),
          s.stall_seconds};
}

Snapshot Minus(const Snapshot& a, const Snapshot& b) {
  return {a.hits - b.hits, a.misses - b.misses, a.all - b.all,
          a.stall_seconds - b.stall_seconds};
}

// User + system CPU time of every thread of this process.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return t.tv_sec + 1e-6 * t.tv_usec; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

uint64_t KvBytes(const engine::ModelConfig& c, int batch, int tokens) {
  constexpr int kBlock = 16;  // EngineSpec's block size (engine default)
  const int64_t blocks_per_seq = (tokens + 2 * kBlock - 1) / kBlock;
  const uint64_t per_token =
      2 * c.num_key_value_heads * c.head_dim * sizeof(float);
  // The null device maps the pool lazily and never writes it: room is free.
  return std::max<uint64_t>(uint64_t{256} << 20,
                            uint64_t(batch) * blocks_per_seq * kBlock *
                                per_token * c.num_hidden_layers * 2);
}

absl::StatusOr<HostOverheadRow> RunCell(const engine::ModelWeights& weights,
                                        const engine::Tokenizer* tokenizer,
                                        const HostOverheadOptions& o,
                                        const std::string& policy, double ratio,
                                        int batch) {
  const engine::ModelConfig& c = weights.config();
  const int n = o.decode_steps;
  kernels::NullBackend null_device;
  kernels::CountingBackend counting(&null_device,
                                    {.simulate_graphs = o.graphs});
  if (o.graphs) counting.SetGraphs(true);
  engine::EngineSpec spec;
  spec.name = policy;
  spec.policy = policy;
  spec.drafter = "none";
  spec.num_speculative_tokens = -1;
  spec.expert_cache_ratio = ratio;
  spec.slow_tier = o.slow_tier;
  spec.fast_tier_in_backend_memory = true;
  // No emulated time: in-place experts (utility) cost what the host does.
  spec.link.inplace_compute_ratio = 1;
  spec.max_num_seqs = batch;
  spec.max_batched_tokens = std::max(2048, batch * o.prompt_len);
  spec.kv_cache_bytes = KvBytes(c, batch, o.prompt_len + 2 * n + 1);
  absl::StatusOr<engine::BuiltEngine> built =
      engine::BuildEngine({&weights, tokenizer, &counting, nullptr}, spec);
  if (!built.ok()) return built.status();
  engine::Engine* const engine = built->engine.get();
  const std::vector<std::vector<int32_t>> prompts =
      Prompts(batch, o.prompt_len, c.vocab_size);

  // Warm-up: every workspace grows to this cell's size.
  if (absl::StatusOr<double> t = Run(engine, &null_device, prompts, 1 + 2 * n);
      !t.ok()) {
    return t.status();
  }
  // Pairs of runs, 1 + N then 1 + 2N: the first pair's counts, every
  // pair's times.
  const kernels::BackendCounts c0 = counting.counts();
  const Snapshot s0 = SnapshotOf(built->residency->stats());
  kernels::BackendCounts c1, c2;
  Snapshot s1, s2;
  std::vector<double> wall_us, cpu_us;  // per decode step
  for (int r = 0; r < o.timed_runs; ++r) {
    const double cpu_a = ProcessCpuSeconds();
    if (absl::StatusOr<double> t = Run(engine, &null_device, prompts, 1 + n);
        !t.ok()) {
      return t.status();
    }
    const double cpu_b = ProcessCpuSeconds();
    if (r == 0) {
      c1 = counting.counts();
      s1 = SnapshotOf(built->residency->stats());
    }
    absl::StatusOr<double> t = Run(engine, &null_device, prompts, 1 + 2 * n);
    if (!t.ok()) return t.status();
    const double cpu_c = ProcessCpuSeconds();
    if (r == 0) {
      c2 = counting.counts();
      s2 = SnapshotOf(built->residency->stats());
    }
    wall_us.push_back(1e6 * *t / (2 * n));
    cpu_us.push_back(1e6 * ((cpu_c - cpu_b) - (cpu_b - cpu_a)) / n);
  }

  // (1 + 2N run) - (1 + N run) = N decode steps.
  const kernels::BackendCounts d = c2.Minus(c1).Minus(c1.Minus(c0));
  const Snapshot acq = Minus(Minus(s2, s1), Minus(s1, s0));
  const double steps = n, layers = double(c.num_hidden_layers);
  const double per_layer = 1.0 / (steps * layers);
  HostOverheadRow row;
  row.policy = policy;
  row.ratio = ratio;
  row.batch = batch;
  row.slots = built->residency->stats().slots;
  row.launches_per_moe_layer = d.launches * per_layer;
  row.syncs_per_moe_layer = d.syncs * per_layer;
  row.copies_to_device_per_moe_layer = d.copies_to_device * per_layer;
  row.copies_to_host_per_moe_layer = d.copies_to_host * per_layer;
  row.bytes_to_device_per_step = d.bytes_to_device / steps;
  row.bytes_to_host_per_step = d.bytes_to_host / steps;
  row.allocations_per_step = d.allocations / steps;
  row.allocated_bytes_per_step = d.allocated_bytes / steps;
  row.run_us_per_step = wall_us;
  row.run_cpu_us_per_step = cpu_us;
  row.host_us_per_step = Median(wall_us);
  row.host_us_per_layer = row.host_us_per_step / layers;
  row.host_cpu_us_per_step = Median(cpu_us);
  row.host_cpu_us_per_layer = row.host_cpu_us_per_step / layers;
  row.stall_us_per_step = 1e6 * acq.stall_seconds / steps;
  row.hit_rate = acq.all > 0 ? acq.hits / acq.all : 0;
  row.misses_per_moe_layer = acq.misses * per_layer;
  return row;
}

}  // namespace

absl::StatusOr<HostOverheadReport> RunHostOverhead(
    const HostOverheadOptions& o, const engine::ModelWeights& weights) {
  if (o.policies.empty() || o.ratios.empty() || o.batch_sizes.empty()) {
    return absl::InvalidArgumentError("need >= 1 policy, ratio and batch size");
  }
  if (o.decode_steps < 1 || o.prompt_len < 1 || o.timed_runs < 1) {
    return absl::InvalidArgumentError(
        "decode_steps, prompt_len and timed_runs must be >= 1");
  }
  const engine::ModelConfig& c = weights.config();
  absl::StatusOr<std::unique_ptr<engine::Tokenizer>> tokenizer =
      StandInTokenizer(c.vocab_size);
  if (!tokenizer.ok()) return tokenizer.status();

  HostOverheadReport report;
  report.machine = DescribeMachine();
  report.backend = kernels::NullBackend().name();
  report.options = o;
  report.options.on_row_done = nullptr;
  report.model_name = o.model_name;
  report.layers = c.num_hidden_layers;
  report.experts = c.num_experts;
  report.top_k = c.num_experts_per_tok;
  report.expert_blob_bytes = weights.expert({0, 0}).bytes;
  for (const std::string& policy : o.policies) {
    for (double ratio : o.ratios) {
      for (int batch : o.batch_sizes) {
        absl::StatusOr<HostOverheadRow> row =
            RunCell(weights, tokenizer->get(), o, policy, ratio, batch);
        if (!row.ok()) {
          return absl::Status(
              row.status().code(),
              absl::StrCat(policy, " ratio ", ratio, " batch ", batch, ": ",
                           row.status().message()));
        }
        report.rows.push_back(*std::move(row));
        if (o.on_row_done) o.on_row_done(report);
      }
    }
  }
  return report;
}

absl::StatusOr<HostOverheadReport> RunHostOverhead(
    const HostOverheadOptions& options) {
  HostOverheadOptions o = options;
  std::unique_ptr<GeneratedModel> generated;  // --gen_dir: the written files
  absl::StatusOr<std::unique_ptr<engine::ModelWeights>> weights;
  if (!o.gen.kind.empty()) {
    absl::StatusOr<nlohmann::json> config = GeneratedModelConfig(o.gen);
    if (!config.ok()) return config.status();
    if (o.model_name.empty()) o.model_name = GeneratedModelName(o.gen);
    if (o.gen_dir.empty() && o.slow_tier == "disk") {
      return absl::InvalidArgumentError(
          "a disk slow tier preads the experts from model files: give a "
          "gen_dir to write the generated model to");
    }
    if (o.gen_dir.empty()) {
      weights = GenerateModelInMemory(*config, stderr);
    } else {
      absl::StatusOr<std::unique_ptr<GeneratedModel>> m =
          GeneratedModel::Prepare(*config, o.gen_dir, stderr);
      if (!m.ok()) return m.status();
      generated = *std::move(m);
      o.model_dir = generated->dir();
    }
  }
  if (o.model_name.empty()) {
    const std::filesystem::path p(o.model_dir);
    o.model_name = p.has_filename() ? p.filename().string()
                                    : p.parent_path().filename().string();
  }
  if (generated != nullptr || o.gen.kind.empty()) {
    weights = engine::ModelWeights::Load(
        o.model_dir, {.pack_experts = o.slow_tier == "host"});
  }
  if (!weights.ok()) return weights.status();
  return RunHostOverhead(o, **weights);
}

void PrintHostOverheadRow(const HostOverheadRow& r, std::FILE* out) {
  std::fprintf(out,
               "host_overhead: %-10s r=%.2f batch %3d: %6.2f us/layer wall, "
               "%6.2f CPU (%7.1f, %7.1f us/step); per MoE layer %5.1f "
               "launches, %4.2f syncs, %4.2f copies h2d, %4.2f d2h, %4.2f "
               "misses; %.2f allocations per step; hit rate %.3f\n",
               r.policy.c_str(), r.ratio, r.batch, r.host_us_per_layer,
               r.host_cpu_us_per_layer, r.host_us_per_step,
               r.host_cpu_us_per_step, r.launches_per_moe_layer,
               r.syncs_per_moe_layer, r.copies_to_device_per_moe_layer,
               r.copies_to_host_per_moe_layer, r.misses_per_moe_layer,
               r.allocations_per_step, r.hit_rate);
}

void PrintHostOverheadReport(const HostOverheadReport& rep, std::FILE* out) {
  std::fprintf(
      out,
      "host overhead on the %s device: %s (%d layers, %d experts, "
      "top-%d), prompt %d, %d decode steps, median of %d runs%s\n"
      "machine: %s, %d logical CPUs, %.1f GiB, %s\n",
      rep.backend.c_str(), rep.model_name.c_str(), rep.layers, rep.experts,
      rep.top_k, rep.options.prompt_len, rep.options.decode_steps,
      rep.options.timed_runs,
      rep.options.graphs ? "; graph mode, counted as a recording backend would "
                           "(simulated: the ops still run eagerly)"
                         : "",
      rep.machine.cpu_model.c_str(), rep.machine.logical_cpus,
      rep.machine.memory_bytes / double(1ull << 30), rep.machine.simd.c_str());
  for (const HostOverheadRow& r : rep.rows) PrintHostOverheadRow(r, out);
}

nlohmann::json HostOverheadJson(const HostOverheadReport& rep) {
  nlohmann::json j;
  j["mode"] = "host_overhead";
  j["machine"] = {{"cpu_model", rep.machine.cpu_model},
                  {"logical_cpus", rep.machine.logical_cpus},
                  {"memory_bytes", rep.machine.memory_bytes},
                  {"simd", rep.machine.simd}};
  j["backend"] = rep.backend;
  j["graphs_simulated"] = rep.options.graphs;
  j["model"] = rep.model_name;
  j["layers"] = rep.layers;
  j["moe_layers"] = rep.layers;
  j["experts"] = rep.experts;
  j["top_k"] = rep.top_k;
  j["expert_blob_bytes"] = rep.expert_blob_bytes;
  j["slow_tier"] = rep.options.slow_tier;
  j["prompt_len"] = rep.options.prompt_len;
  j["decode_steps"] = rep.options.decode_steps;
  j["timed_runs"] = rep.options.timed_runs;
  nlohmann::json rows = nlohmann::json::array();
  for (const HostOverheadRow& r : rep.rows) {
    rows.push_back(
        {{"policy", r.policy},
         {"expert_cache_ratio", r.ratio},
         {"batch", r.batch},
         {"slots", r.slots},
         {"launches_per_moe_layer", r.launches_per_moe_layer},
         {"syncs_per_moe_layer", r.syncs_per_moe_layer},
         {"copies_to_device_per_moe_layer", r.copies_to_device_per_moe_layer},
         {"copies_to_host_per_moe_layer", r.copies_to_host_per_moe_layer},
         {"bytes_to_device_per_step", r.bytes_to_device_per_step},
         {"bytes_to_host_per_step", r.bytes_to_host_per_step},
         {"allocations_per_step", r.allocations_per_step},
         {"allocated_bytes_per_step", r.allocated_bytes_per_step},
         {"host_us_per_step", r.host_us_per_step},
         {"host_us_per_layer", r.host_us_per_layer},
         {"run_us_per_step", r.run_us_per_step},
         {"host_cpu_us_per_step", r.host_cpu_us_per_step},
         {"host_cpu_us_per_layer", r.host_cpu_us_per_layer},
         {"run_cpu_us_per_step", r.run_cpu_us_per_step},
         {"stall_us_per_step", r.stall_us_per_step},
         {"hit_rate", r.hit_rate},
         {"misses_per_moe_layer", r.misses_per_moe_layer}});
  }
  j["host_overhead"] = std::move(rows);
  return j;
}

}  // namespace moeserve::bench
