// moeserve_bench: decode and prefill throughput of the CPU engine against the
// machine's memory-read roofline, measured in one run; or, with --policies,
// the offload-policy A/B comparison on the CPU or CUDA backend. See README.md.
//
//   bazel run --config=opt //tools/bench:moeserve_bench -- [flags]
//
// Roofline mode, for every model: prefill tokens/s, decode tokens/s at each
// batch size, the weight bytes read per token, the achieved GB/s, and that as
// a fraction of the read bandwidth measured at the start of the same process.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/flag_help.h"
#include "engine/builder/engine_setting_flags.h"
#include "engine/builder/engine_spec.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "tools/bench/generated_model.h"
#include "tools/bench/host_overhead.h"
#include "tools/bench/machine.h"
#include "tools/bench/model_bench.h"
#include "tools/bench/optimizer.h"
#include "tools/bench/policy_bench.h"
#include "tools/bench/policy_plot.h"
#include "tools/bench/random_model_writer.h"
#include "tools/bench/report.h"

ABSL_FLAG(std::vector<std::string>, model_dir, {},
          "Model directories (comma list). Default: models/demo if present. "
          "Relative paths resolve against the workspace under `bazel run`.");
ABSL_FLAG(int, gen_qwen_layers, 4,
          "Layers of the generated random-weight Qwen1.5-MoE-A2.7B-shaped "
          "model (hidden 2048, 60 experts x ffn 1408, top-4, shared expert "
          "5632, vocab 151936); 0 skips it.");
ABSL_FLAG(bool, gen_qwen_tiny, false,
          "Generate a tiny qwen2_moe (hidden 64) instead; for the smoke test.");
ABSL_FLAG(std::string, gen_dir, "",
          "Where to write the generated model; reused when its config.json "
          "matches. Roofline mode default: a temporary directory removed at "
          "exit. Policy mode: write --gen_model here (needed by "
          "--slow_tier=disk) instead of generating it in memory.");
ABSL_FLAG(std::string, gen_model, "",
          "Policy mode: run on a random-weight model generated in memory "
          "(seeded, on every hardware thread, no file) instead of "
          "--model_dir: qwen3_30b_a3b (Qwen3-30B-A3B shape), qwen "
          "(Qwen1.5-MoE-A2.7B), mixtral (Mixtral-8x7B), or qwen3_tiny / "
          "qwen_tiny / mixtral_tiny (tests). No tokenizer: the prompts are "
          "synthetic token ids.");
ABSL_FLAG(int, gen_layers, 0,
          "Policy mode, --gen_model: its first N layers; 0 = the whole model "
          "(qwen3_30b_a3b 48, qwen 24, mixtral 32, tiny 2).");
ABSL_FLAG(int, threads, 0, "Kernel threads; 0 = all logical CPUs.");
ABSL_FLAG(int, prompt_len, 128, "Tokens per prefilled sequence.");
ABSL_FLAG(int, decode_steps, 32, "Timed decode steps per batch size.");
ABSL_FLAG(std::string, batch_sizes, "1,8", "Decode batch sizes.");
ABSL_FLAG(std::string, prefill_batch_sizes, "1,4",
          "Sequences of prompt_len per timed prefill pass.");
ABSL_FLAG(double, min_phase_seconds, 1.0,
          "Repeat each phase until its timed seconds add up to this "
          "(at most --max_repeats times); the median repeat is reported, with "
          "the min and max.");
ABSL_FLAG(int, max_repeats, 20, "Upper bound on repeats per phase.");
ABSL_FLAG(int, bandwidth_mib, 1024, "Buffer for the read-bandwidth probe.");
ABSL_FLAG(int, bandwidth_repeats, 5, "Best of this many bandwidth runs.");
ABSL_FLAG(std::string, json_out, "", "Also write the results as JSON here.");
ABSL_FLAG(std::string, plot, "",
          "Policy mode: also render the comparison (tokens/s and link KiB "
          "per token by policy, concurrency and fast-tier ratio) as a PNG "
          "here, with gnuplot (Debian: gnuplot-nox); its data and script "
          "are kept beside it (.dat, .gp).");

// Offload-policy mode (README "Offload policies"): replaces the roofline
// benchmark when --policies is given.
ABSL_FLAG(std::string, policies, "",
          "Comma list of offload policies (e.g. on_demand,lru,lfu_static,"
          "overlap): run the policy comparison on the first --model_dir "
          "(default models/demo) instead of the roofline benchmark. An "
          "entry name:k=v:k2=v2 runs that policy with those keys over "
          "--policy_config, e.g. self_spec,self_spec:draft_from=ready.");
ABSL_FLAG(std::string, drafters, "own",
          "Policy mode: comma list of drafters; every policy runs with each. "
          "An entry is EngineSpec::drafter verbatim: a registered drafter "
          "(self, int4, ...), none (no speculation, even for self_spec or "
          "quant_draft), or own / an empty entry (the policy's own drafter), "
          "e.g. --drafters=own,none,int4.");
ABSL_FLAG(bool, spec_baselines, true,
          "Policy mode: beside every speculative cell (a policy other than "
          "lru with a drafter) also run lru and lru with the same drafter "
          "and k, and end with a summary of each speculative cell against "
          "both, all from this run (the papers' baselines draft too).");
ABSL_FLAG(std::string, draft_budget, "shared",
          "Policy mode: comma list of EngineSpec::draft_budget values for "
          "cells whose drafter has its own pool in fast memory (int4): "
          "shared (taken from the fast-tier budget: same memory) and/or "
          "extra (added on top: same expert cache).");
ABSL_FLAG(double, expert_cache_mb, 0,
          "Policy mode: a fast tier of this many MiB instead of "
          "--expert_cache_ratio (reported as the ratio it is of the model's "
          "expert bytes), to compare checkpoints of one model in different "
          "formats (bf16, fp8, int4) at the same memory.");
ABSL_FLAG(std::string, expert_cache_ratio, "0.25,0.5",
          "Policy mode: fast-tier budget(s) as a share of all expert bytes.");
// The engine settings the bench takes as they are (their name, default,
// help and range are the settings table's, engine/builder/engine_settings.h;
// policy and optimize modes). --expert_cache_ratio, --draft_budget,
// --drafters and --concurrency above and below are lists to sweep instead.
MOESERVE_ENGINE_SETTING_FLAG(std::string, slow_tier);
MOESERVE_ENGINE_SETTING_FLAG(double, link_gbps);
MOESERVE_ENGINE_SETTING_FLAG(double, link_latency_us);
MOESERVE_ENGINE_SETTING_FLAG(double, inplace_compute_ratio);
MOESERVE_ENGINE_SETTING_FLAG(int, num_speculative_tokens);
MOESERVE_ENGINE_SETTING_FLAG(std::string, draft_model_dir);
MOESERVE_ENGINE_SETTING_FLAG(int, cpu_moe_layers);
MOESERVE_ENGINE_SETTING_FLAG(int, host_expert_threads);
MOESERVE_ENGINE_SETTING_FLAG(int, host_attention);
MOESERVE_ENGINE_SETTING_FLAG(int, kv_cache_mb);
ABSL_FLAG(bool, hybrid_on_cpu, false,
          "Policy mode, --backend=cpu: put the fast tier in the backend's "
          "memory (as on a GPU), so that in-place experts (--cpu_moe_layers, "
          "utility, cpu_cold) run the hybrid path: a host CPU pool of their "
          "own (--host_expert_threads), rows copied down and up, measured "
          "rather than charged --inplace_compute_ratio.");
ABSL_FLAG(std::string, policy_config, "",
          "Policy mode: k=v,... passed to every policy.");
ABSL_FLAG(int, num_requests, 8, "Policy mode: requests per run.");
ABSL_FLAG(std::string, concurrency, "1",
          "Policy mode: comma list of engine max_num_seqs values.");
ABSL_FLAG(int, policy_repeats, 1,
          "Policy mode: run each (ratio, concurrency) group's policies "
          "round-robin this many times; report each policy's median run.");
ABSL_FLAG(double, max_seconds, 0,
          "Policy mode: a time budget; once it has passed no new run starts "
          "and the bench exits 0 with what finished (\"complete\": false in "
          "the JSON). 0: none. Each finished (ratio, concurrency) group is "
          "printed and the JSON rewritten as the run goes, so a run cut "
          "short keeps its figures.");
ABSL_FLAG(int, max_new_tokens, 48,
          "Policy mode: tokens generated per request (EOS ignored).");
ABSL_FLAG(int, warmup_tokens, 4,
          "Policy mode: tokens of the untimed warm-up request each engine "
          "runs before the timed workload.");
ABSL_FLAG(std::string, backend, "cpu",
          "Policy mode: compute backend, cpu or cuda (expert slots in VRAM, "
          "link copies on CUDA streams). Roofline mode is CPU-only.");
ABSL_FLAG(int, cuda_device, 0, "Policy mode, --backend=cuda: device ordinal.");
ABSL_FLAG(bool, cuda_graphs, false,
          "Policy mode, --backend=cuda: record the dense sub-steps of decode "
          "steps as CUDA graphs and replay them (off by default). With "
          "--host_overhead: count the null device as a recording backend "
          "would (simulated graphs: the launches graph mode leaves).");

// Host-overhead mode (README "Host overhead (null device)"): replaces the
// other modes when given.
ABSL_FLAG(bool, host_overhead, false,
          "Time and count a decode step's host work per MoE layer on the null "
          "device (no arithmetic) for each --policies (default on_demand,lru) "
          "x --expert_cache_ratio x --batch_sizes, on the first --model_dir "
          "or --gen_model (--prompt_len, --decode_steps, --slow_tier).");

// Throughput optimiser (README "Throughput optimiser"): replaces the other
// modes when given.
ABSL_FLAG(bool, optimize, false,
          "Profile the first --model_dir (default models/demo) and its "
          "--draft_model_dir, recommend (max_num_seqs, k) for the "
          "--optimize_policy at the first --expert_cache_ratio and "
          "--link_gbps/--link_latency_us, and check the estimate against "
          "measured policy-bench runs (--num_requests, --max_new_tokens).");
ABSL_FLAG(std::string, optimize_policy, "throughput",
          "Optimize mode: the policy run and measured.");
ABSL_FLAG(std::string, optimize_batches, "1,2,4,8",
          "Optimize mode: max_num_seqs candidates.");
ABSL_FLAG(int, optimize_max_k, 6, "Optimize mode: k candidates 0..this.");
ABSL_FLAG(int, optimize_profile_tokens, 24,
          "Optimize mode: new tokens per request of the profiling run.");

namespace moeserve::bench {
namespace {

std::vector<int> ParseInts(const std::string& list) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      std::fprintf(stderr, "bad batch size '%s'\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

std::string Resolve(const std::string& path) {
  const char* ws = getenv("BUILD_WORKSPACE_DIRECTORY");
  if (path.empty() || path[0] == '/' || ws == nullptr) return path;
  return std::string(ws) + "/" + path;
}

// The roofline mode's generated Qwen-shaped model, written or reused; null
// (error printed) on failure.
std::unique_ptr<GeneratedModel> GenerateRooflineModel() {
  QwenMoeShape shape;
  if (absl::GetFlag(FLAGS_gen_qwen_tiny)) shape = TinyQwenMoeShape();
  shape.num_layers = absl::GetFlag(FLAGS_gen_qwen_layers);
  absl::StatusOr<std::unique_ptr<GeneratedModel>> model =
      GeneratedModel::Prepare(QwenMoeConfig(shape),
                              Resolve(absl::GetFlag(FLAGS_gen_dir)), stdout);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(model);
}

std::vector<double> ParseDoubles(const std::string& list) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || !(v > 0) || v > 1) {
      std::fprintf(stderr, "bad ratio '%s'\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

int WriteJson(const nlohmann::json& j) {
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (json_out.empty()) return 0;
  std::ofstream out(json_out);
  out << j.dump(2) << "\n";
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", json_out.c_str());
    return 1;
  }
  return 0;
}

// The engine settings taken as flags, each checked by its flag's name;
// nullopt (after saying why) for a value the settings table refuses.
std::optional<engine::EngineSpec> SettingsFromFlags() {
  engine::EngineSpec spec;
  if (absl::Status st = engine::EngineSettingsFromFlags(&spec); !st.ok()) {
    std::fprintf(stderr, "moeserve_bench: %s\n",
                 std::string(st.message()).c_str());
    return std::nullopt;
  }
  spec.draft_model_dir = Resolve(spec.draft_model_dir);
  return spec;
}

int PolicyMain(int threads) {
  PolicyBenchOptions o;
  const std::optional<engine::EngineSpec> settings = SettingsFromFlags();
  if (!settings) return 2;
  const std::vector<std::string> dirs = absl::GetFlag(FLAGS_model_dir);
  const GeneratedModelSpec gen{.kind = absl::GetFlag(FLAGS_gen_model),
                               .layers = absl::GetFlag(FLAGS_gen_layers)};
  if (!gen.kind.empty() && !dirs.empty()) {
    std::fprintf(stderr, "give --model_dir or --gen_model, not both\n");
    return 2;
  }
  absl::StatusOr<nlohmann::json> gen_config = nlohmann::json();
  if (!gen.kind.empty()) gen_config = GeneratedModelConfig(gen);
  if (!gen_config.ok()) {
    std::fprintf(stderr, "%s\n", gen_config.status().ToString().c_str());
    return 2;
  }
  o.model_dir = Resolve(dirs.empty() ? "models/demo" : dirs.front());
  o.draft_model_dir = settings->draft_model_dir;
  o.policies =
      absl::StrSplit(absl::GetFlag(FLAGS_policies), ',', absl::SkipEmpty());
  // Empty entries are kept: "" is the policy's own drafter (as "own").
  o.drafters = absl::StrSplit(absl::GetFlag(FLAGS_drafters), ',');
  o.draft_budgets =
      absl::StrSplit(absl::GetFlag(FLAGS_draft_budget), ',', absl::SkipEmpty());
  o.spec_baselines = absl::GetFlag(FLAGS_spec_baselines);
  o.num_speculative_tokens = settings->num_speculative_tokens;
  o.ratios = ParseDoubles(absl::GetFlag(FLAGS_expert_cache_ratio));
  o.expert_cache_mb = absl::GetFlag(FLAGS_expert_cache_mb);
  o.concurrencies = ParseInts(absl::GetFlag(FLAGS_concurrency));
  o.link_gbps = settings->link.gbps;
  o.link_latency_us = settings->link.latency_us;
  o.inplace_compute_ratio = settings->link.inplace_compute_ratio;
  o.slow_tier = settings->slow_tier;
  o.cpu_moe_layers = settings->cpu_moe_layers;
  o.host_expert_threads = settings->host_expert_threads;
  o.host_attention = settings->host_attention;
  o.kv_cache_bytes = settings->kv_cache_bytes;
  o.fast_tier_in_backend_memory = absl::GetFlag(FLAGS_hybrid_on_cpu);
  o.policy_config = absl::GetFlag(FLAGS_policy_config);
  o.num_requests = absl::GetFlag(FLAGS_num_requests);
  o.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  o.repeats = absl::GetFlag(FLAGS_policy_repeats);
  o.warmup_tokens = absl::GetFlag(FLAGS_warmup_tokens);
  o.max_seconds = absl::GetFlag(FLAGS_max_seconds);
  if (!(o.max_seconds >= 0)) {
    std::fprintf(stderr, "moeserve_bench: --max_seconds must be >= 0\n");
    return 2;
  }
  // Each finished group: its rows on stdout, the JSON so far rewritten.
  size_t rows_printed = 0;
  o.on_group_done = [&rows_printed](const PolicyReport& so_far) {
    for (; rows_printed < so_far.results.size(); ++rows_printed) {
      const PolicyResult& r = so_far.results[rows_printed];
      std::printf(
          "done: ratio %.2f concurrency %d %s + %s: %.2f tok/s, hit rate "
          "%.3f, %.2f transfers/token\n",
          r.ratio, r.concurrency, r.policy.c_str(), r.drafter.c_str(),
          r.tokens_per_s, r.hit_rate, r.transfers_per_token);
    }
    std::fflush(stdout);
    WriteJson(PolicyReportJson(so_far));
  };
  // The backend first: a missing GPU is reported before any model is
  // loaded.
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateBackend({.name = backend_name,
                              .cpu_threads = threads,
                              .cuda_device = absl::GetFlag(FLAGS_cuda_device),
                              .cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs)});
  if (!backend.ok()) {
    std::fprintf(stderr,
                 "moeserve_bench: --backend=%s: cannot create the %s "
                 "backend: %s\n",
                 backend_name.c_str(),
                 absl::AsciiStrToUpper(backend_name).c_str(),
                 backend.status().ToString().c_str());
    return 1;
  }
  o.threads = (*backend)->device() == kernels::Device::kCpu ? threads : 0;
  std::unique_ptr<GeneratedModel> model;  // --gen_dir: the written files
  if (!gen.kind.empty()) {
    const std::string gen_dir = Resolve(absl::GetFlag(FLAGS_gen_dir));
    if (gen_dir.empty() && o.slow_tier == "disk") {
      std::fprintf(stderr,
                   "moeserve_bench: --slow_tier=disk preads the experts from "
                   "model files, and --gen_model=%s generates the model in "
                   "memory; add --gen_dir=DIR to write it there first\n",
                   gen.kind.c_str());
      return 2;
    }
    if (gen_dir.empty()) {
      o.model_dir = "";
      // On every hardware thread, whatever --threads says for the kernels.
      o.make_weights = [config = *gen_config] {
        return GenerateModelInMemory(config, stderr);
      };
    } else {
      absl::StatusOr<std::unique_ptr<GeneratedModel>> m =
          GeneratedModel::Prepare(*gen_config, gen_dir, stderr);
      if (!m.ok()) {
        std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
        return 1;
      }
      model = *std::move(m);
      o.model_dir = model->dir();
    }
    o.model_name = GeneratedModelName(gen);
  }
  std::fprintf(stderr, "policy bench on %s, backend %s ...\n",
               o.make_weights ? o.model_name.c_str() : o.model_dir.c_str(),
               (*backend)->name().c_str());
  absl::StatusOr<PolicyReport> report = RunPolicyBench(o, backend->get());
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.status().ToString().c_str());
    return 1;
  }
  PrintPolicyReport(*report, stdout);
  if (int rc = WriteJson(PolicyReportJson(*report)); rc != 0) return rc;
  if (const std::string plot = Resolve(absl::GetFlag(FLAGS_plot));
      !plot.empty()) {
    if (absl::Status st = WritePolicyPlot(*report, plot); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    std::printf("plot: %s\n", plot.c_str());
  }
  return report->outputs_identical ? 0 : 3;
}

int HostOverheadMain() {
  HostOverheadOptions o;
  const std::optional<engine::EngineSpec> settings = SettingsFromFlags();
  if (!settings) return 2;
  const std::vector<std::string> dirs = absl::GetFlag(FLAGS_model_dir);
  o.gen = {.kind = absl::GetFlag(FLAGS_gen_model),
           .layers = absl::GetFlag(FLAGS_gen_layers)};
  if (!o.gen.kind.empty() && !dirs.empty()) {
    std::fprintf(stderr, "give --model_dir or --gen_model, not both\n");
    return 2;
  }
  o.model_dir = Resolve(dirs.empty() ? "models/demo" : dirs.front());
  o.gen_dir = Resolve(absl::GetFlag(FLAGS_gen_dir));
  if (!absl::GetFlag(FLAGS_policies).empty()) {
    o.policies =
        absl::StrSplit(absl::GetFlag(FLAGS_policies), ',', absl::SkipEmpty());
  }
  o.ratios = ParseDoubles(absl::GetFlag(FLAGS_expert_cache_ratio));
  o.batch_sizes = ParseInts(absl::GetFlag(FLAGS_batch_sizes));
  o.slow_tier = settings->slow_tier;
  o.prompt_len = absl::GetFlag(FLAGS_prompt_len);
  o.decode_steps = absl::GetFlag(FLAGS_decode_steps);
  o.graphs = absl::GetFlag(FLAGS_cuda_graphs);
  o.on_row_done = [](const HostOverheadReport& so_far) {
    PrintHostOverheadRow(so_far.rows.back(), stdout);
    std::fflush(stdout);
    WriteJson(HostOverheadJson(so_far));
  };
  absl::StatusOr<HostOverheadReport> report = RunHostOverhead(o);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.status().ToString().c_str());
    return 1;
  }
  PrintHostOverheadReport(*report, stdout);
  return WriteJson(HostOverheadJson(*report));
}

int OptimizeMain(int threads) {
  OptimizerOptions o;
  const std::optional<engine::EngineSpec> settings = SettingsFromFlags();
  if (!settings) return 2;
  const std::vector<std::string> dirs = absl::GetFlag(FLAGS_model_dir);
  o.model_dir = Resolve(dirs.empty() ? "models/demo" : dirs.front());
  o.draft_model_dir = settings->draft_model_dir;
  o.policy = absl::GetFlag(FLAGS_optimize_policy);
  o.ratio = ParseDoubles(absl::GetFlag(FLAGS_expert_cache_ratio)).front();
  o.link_gbps = settings->link.gbps;
  o.link_latency_us = settings->link.latency_us;
  o.slow_tier = settings->slow_tier;
  o.batches = ParseInts(absl::GetFlag(FLAGS_optimize_batches));
  o.max_k = absl::GetFlag(FLAGS_optimize_max_k);
  o.num_requests = absl::GetFlag(FLAGS_num_requests);
  o.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  o.warmup_tokens = absl::GetFlag(FLAGS_warmup_tokens);
  o.profile_new_tokens = absl::GetFlag(FLAGS_optimize_profile_tokens);
  o.threads = threads;
  if (absl::GetFlag(FLAGS_backend) != "cpu") {
    std::fprintf(stderr, "moeserve_bench: --optimize runs on the CPU only\n");
    return 2;
  }
  kernels::cpu::CpuBackend backend({.num_threads = threads});
  absl::StatusOr<OptimizerReport> report = RunOptimizer(o, &backend);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.status().ToString().c_str());
    return 1;
  }
  PrintOptimizerReport(*report, stdout);
  if (int rc = WriteJson(OptimizerReportJson(*report)); rc != 0) return rc;
  return report->outputs_identical ? 0 : 3;
}

int Main() {
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0)
    threads = static_cast<int>(std::thread::hardware_concurrency());
  if (absl::GetFlag(FLAGS_host_overhead)) return HostOverheadMain();
  if (absl::GetFlag(FLAGS_optimize)) return OptimizeMain(threads);
  if (!absl::GetFlag(FLAGS_policies).empty()) return PolicyMain(threads);
  if (absl::GetFlag(FLAGS_backend) != "cpu") {
    std::fprintf(stderr,
                 "moeserve_bench: the roofline mode measures the CPU engine "
                 "only; --backend=%s needs --policies (the policy mode)\n",
                 absl::GetFlag(FLAGS_backend).c_str());
    return 2;
  }

  BenchOptions options;
  options.prompt_len = absl::GetFlag(FLAGS_prompt_len);
  options.decode_steps = absl::GetFlag(FLAGS_decode_steps);
  options.decode_batches = ParseInts(absl::GetFlag(FLAGS_batch_sizes));
  options.prefill_batches = ParseInts(absl::GetFlag(FLAGS_prefill_batch_sizes));
  options.min_phase_seconds = absl::GetFlag(FLAGS_min_phase_seconds);
  options.max_repeats = absl::GetFlag(FLAGS_max_repeats);

  std::vector<std::string> dirs;
  for (const std::string& d : absl::GetFlag(FLAGS_model_dir)) {
    dirs.push_back(Resolve(d));
  }
  if (dirs.empty() &&
      std::filesystem::exists(Resolve("models/demo/config.json"))) {
    dirs.push_back(Resolve("models/demo"));
  }

  RunReport report;
  report.machine = DescribeMachine();
  report.threads = threads;
  report.options = options;
  report.bandwidth_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_bandwidth_mib)) << 20;
  std::printf("measuring read bandwidth (%d MiB, %d threads) ...\n",
              absl::GetFlag(FLAGS_bandwidth_mib), threads);
  std::fflush(stdout);
  report.bandwidth_gbps = MeasureReadBandwidthGbps(
      report.bandwidth_bytes, threads, absl::GetFlag(FLAGS_bandwidth_repeats));

  std::unique_ptr<GeneratedModel> model;
  std::string generated;
  if (absl::GetFlag(FLAGS_gen_qwen_layers) > 0) {
    model = GenerateRooflineModel();
    if (model == nullptr) return 1;
    generated = model->dir();
    dirs.push_back(generated);
  }

  kernels::cpu::CpuBackend backend({.num_threads = threads});
  int rc = 0;
  for (const std::string& dir : dirs) {
    std::printf("benchmarking %s ...\n", dir.c_str());
    std::fflush(stdout);
    absl::StatusOr<ModelReport> m = BenchModel(dir, options, &backend);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
      rc = 1;
      continue;
    }
    if (dir == generated) {
      m->name = absl::GetFlag(FLAGS_gen_qwen_tiny)
                    ? "qwen2_moe-tiny-random"
                    : "qwen1.5-moe-a2.7b-shape-random";
    }
    report.models.push_back(*std::move(m));
  }
  model.reset();  // a temporary directory is removed here

  PrintReport(report, stdout);
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (!json_out.empty()) {
    std::ofstream out(json_out);
    out << ReportJson(report).dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json_out.c_str());
      return 1;
    }
  }
  return rc;
}

}  // namespace
}  // namespace moeserve::bench

namespace {

const moeserve::base::ProgramHelp& Help() {
  static const auto* help = new moeserve::base::ProgramHelp{
      .program = "moeserve_bench",
      .summary =
          "benchmarks moeserve's engine: the roofline mode (prefill and "
          "decode tok/s against the measured read bandwidth), the policy "
          "mode (offload policies on an emulated link, vs on_demand and "
          "Belady's oracle) and the throughput optimizer. See "
          "tools/bench/README.md.\n  moeserve_bench --model_dir=models/demo "
          "--policies=on_demand,lru --expert_cache_ratio=0.5 --link_gbps=2",
      .groups = {{"Model",
                  {"model_dir", "draft_model_dir", "gen_model", "gen_layers",
                   "gen_qwen_layers", "gen_qwen_tiny", "gen_dir"}},
                 {"Roofline mode",
                  {"threads", "prompt_len", "decode_steps", "batch_sizes",
                   "prefill_batch_sizes", "min_phase_seconds", "max_repeats",
                   "bandwidth_mib", "bandwidth_repeats"}},
                 {"Policy mode: engines and policies",
                  {"policies", "policy_config", "drafters", "draft_budget",
                   "num_speculative_tokens", "spec_baselines"}},
                 {"Policy mode: memory tiers and link",
                  {"expert_cache_ratio", "expert_cache_mb", "slow_tier",
                   "link_gbps", "link_latency_us", "inplace_compute_ratio"}},
                 {"Policy mode: hybrid CPU/GPU execution",
                  {"cpu_moe_layers", "host_expert_threads", "hybrid_on_cpu",
                   "host_attention", "kv_cache_mb"}},
                 {"Policy mode: load",
                  {"num_requests", "concurrency", "max_new_tokens",
                   "warmup_tokens", "policy_repeats", "max_seconds"}},
                 {"Host overhead (null device)", {"host_overhead"}},
                 {"Throughput optimizer",
                  {"optimize", "optimize_policy", "optimize_batches",
                   "optimize_max_k", "optimize_profile_tokens"}},
                 {"Backend", {"backend", "cuda_device", "cuda_graphs"}},
                 {"Output", {"json_out", "plot"}}},
      .version_details = moeserve::kernels::DescribeCompute};
  return *help;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> exit_code =
          moeserve::base::HandleHelpAndVersion(argc, argv, Help())) {
    return *exit_code;
  }
  absl::ParseCommandLine(argc, argv);
  return moeserve::bench::Main();
}
