// moeserve_bench: decode and prefill throughput of the CPU engine against the
// machine's memory-read roofline, measured in one run. See README.md.
//
//   bazel run --config=opt //tools/bench:moeserve_bench -- [flags]
//
// For every model: prefill tokens/s, decode tokens/s at each batch size, the
// weight bytes read per token, the achieved GB/s, and that as a fraction of
// the read bandwidth measured at the start of the same process.
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/cpu_backend.h"
#include "tools/bench/machine.h"
#include "tools/bench/model_bench.h"
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
          "matches. Default: a temporary directory removed at exit.");
ABSL_FLAG(int, threads, 0, "Kernel threads; 0 = all logical CPUs.");
ABSL_FLAG(int, prompt_len, 128, "Tokens per prefilled sequence.");
ABSL_FLAG(int, decode_steps, 32, "Timed decode steps per batch size.");
ABSL_FLAG(std::string, batch_sizes, "1,8", "Decode batch sizes.");
ABSL_FLAG(std::string, prefill_batch_sizes, "1,4",
          "Sequences of prompt_len per timed prefill pass.");
ABSL_FLAG(double, min_phase_seconds, 1.0,
          "Repeat each phase until its timed seconds add up to this "
          "(at most --max_repeats times); the fastest repeat is reported.");
ABSL_FLAG(int, max_repeats, 20, "Upper bound on repeats per phase.");
ABSL_FLAG(int, bandwidth_mib, 1024, "Buffer for the read-bandwidth probe.");
ABSL_FLAG(int, bandwidth_repeats, 5, "Best of this many bandwidth runs.");
ABSL_FLAG(std::string, json_out, "", "Also write the results as JSON here.");

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

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes (or reuses) the generated model; returns its directory, or "" on
// error. Sets *temporary when the caller must remove it.
std::string Generate(bool* temporary) {
  QwenMoeShape shape;
  if (absl::GetFlag(FLAGS_gen_qwen_tiny)) shape = TinyQwenMoeShape();
  shape.num_layers = absl::GetFlag(FLAGS_gen_qwen_layers);
  std::string dir = Resolve(absl::GetFlag(FLAGS_gen_dir));
  *temporary = dir.empty();
  if (dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string tmpl = std::string(tmp ? tmp : "/tmp") + "/qwen_moe_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return "";
    dir = tmpl;
  }
  std::filesystem::create_directories(dir);
  if (ReadText(dir + "/config.json") == QwenMoeConfig(shape).dump(2) &&
      std::filesystem::exists(dir + "/model.safetensors")) {
    std::printf("reusing generated model in %s\n", dir.c_str());
    return dir;
  }
  std::printf("writing random-weight qwen2_moe (%lld layers) to %s ...\n",
              static_cast<long long>(shape.num_layers), dir.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = WriteRandomQwenMoe(dir, shape, /*seed=*/1);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return "";
  }
  std::printf(
      "  written in %.1f s\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  return dir;
}

int Main() {
  BenchOptions options;
  options.prompt_len = absl::GetFlag(FLAGS_prompt_len);
  options.decode_steps = absl::GetFlag(FLAGS_decode_steps);
  options.decode_batches = ParseInts(absl::GetFlag(FLAGS_batch_sizes));
  options.prefill_batches = ParseInts(absl::GetFlag(FLAGS_prefill_batch_sizes));
  options.min_phase_seconds = absl::GetFlag(FLAGS_min_phase_seconds);
  options.max_repeats = absl::GetFlag(FLAGS_max_repeats);
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0)
    threads = static_cast<int>(std::thread::hardware_concurrency());

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

  bool temporary = false;
  std::string generated;
  if (absl::GetFlag(FLAGS_gen_qwen_layers) > 0) {
    generated = Generate(&temporary);
    if (generated.empty()) return 1;
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
  if (temporary) std::filesystem::remove_all(generated);

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

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return moeserve::bench::Main();
}
