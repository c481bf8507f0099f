// moeserve_loadgen: a bounded, loopback-only, closed-loop load generator.
//
//   moeserve_loadgen --target=127.0.0.1:50051 --concurrency=1,4,16,64
//       --max_new_tokens=64 --json_out=/tmp/loadgen.json
//
// For each concurrency level C it runs C client threads, each issuing
// streaming Generate calls back to back over a fixed, compiled-in prompt set
// (greedy, ignore_eos so every request makes exactly max_new_tokens), and
// prints per level: tokens/s, TTFT p50/p99, TPOT p50/p99 and errors by
// status code, then throughput(highest C) / throughput(lowest C) from the
// same run, labelled with the machine and the server's ListModels answer.
// Bounded: at most --requests_per_level (<= 1024) requests and
// --max_seconds_per_level of issuing per level; loopback targets only.
// Exit status: 0 when every request succeeded, 1 on request errors or an
// unreachable server, 2 on bad flags.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/flag_help.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/moeserve.grpc.pb.h"
#include "tools/loadgen/level_runner.h"
#include "tools/loadgen/loopback.h"
#include "tools/loadgen/prompts.h"
#include "tools/loadgen/report.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address; loopback only (127.0.0.0/8, ::1, localhost).");
ABSL_FLAG(std::vector<std::string>, concurrency,
          std::vector<std::string>({"1", "4", "16", "64"}),
          "Concurrency levels (client threads), each in 1..256.");
ABSL_FLAG(int, requests_per_level, 0,
          "Requests per level; 0 = max(64, 4 x concurrency). At most 1024.");
ABSL_FLAG(double, max_seconds_per_level, 120,
          "Stop issuing requests in a level after this many seconds and "
          "report what completed.");
ABSL_FLAG(double, request_deadline_seconds, 300,
          "gRPC deadline of each Generate call.");
ABSL_FLAG(uint32_t, max_new_tokens, 64, "Tokens per request (1..4096).");
ABSL_FLAG(std::string, policy, "", "Engine instance to drive (A/B name).");
ABSL_FLAG(bool, ignore_eos, true,
          "Generate past EOS so every request makes max_new_tokens tokens.");
ABSL_FLAG(std::string, json_out, "", "Also write the report as JSON here.");
ABSL_FLAG(double, wait_ready_seconds, 0,
          "Retry ListModels and a 1-token Generate for up to this long "
          "before the run (0: try once).");
ABSL_FLAG(int, repeats, 1,
          "Sweeps over all levels (1..10); the table shows per-level "
          "medians and the ratio is the median of each sweep's own ratio.");
ABSL_FLAG(int, warmup_requests, 1,
          "Untimed requests (max_new_tokens each) before the first level.");
ABSL_FLAG(uint32_t, prompt_tokens, 0,
          "0: the 16 compiled-in text prompts. N > 0: 16 fixed prompts of N "
          "token ids each (BOS, then uniform random ids, fixed seed), sent as "
          "prompt_token_ids; e.g. 512 with --max_new_tokens=1 measures the "
          "TTFT of a 512-token prefill.");

namespace {

namespace lg = moeserve::loadgen;
using moeserve::v1::Inference;

constexpr int kMaxConcurrency = 256;
constexpr int kMaxRequestsPerLevel = 1024;

absl::StatusOr<std::vector<int>> ParseLevels() {
  std::vector<int> levels;
  for (const std::string& text : absl::GetFlag(FLAGS_concurrency)) {
    int c = 0;
    if (!absl::SimpleAtoi(text, &c) || c < 1 || c > kMaxConcurrency) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--concurrency: '", text, "' is not in 1..", kMaxConcurrency));
    }
    levels.push_back(c);
  }
  if (levels.empty()) return absl::InvalidArgumentError("--concurrency empty");
  return levels;
}

absl::Status CheckFlags() {
  const int n = absl::GetFlag(FLAGS_requests_per_level);
  if (n < 0 || n > kMaxRequestsPerLevel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--requests_per_level must be in 0..", kMaxRequestsPerLevel));
  }
  const uint32_t tokens = absl::GetFlag(FLAGS_max_new_tokens);
  if (tokens < 1 || tokens > 4096) {
    return absl::InvalidArgumentError("--max_new_tokens must be in 1..4096");
  }
  if (absl::GetFlag(FLAGS_prompt_tokens) > 65536) {
    return absl::InvalidArgumentError("--prompt_tokens must be in 0..65536");
  }
  if (!(absl::GetFlag(FLAGS_max_seconds_per_level) > 0) ||
      !(absl::GetFlag(FLAGS_request_deadline_seconds) > 0) ||
      absl::GetFlag(FLAGS_wait_ready_seconds) < 0 ||
      absl::GetFlag(FLAGS_warmup_requests) < 0 ||
      absl::GetFlag(FLAGS_repeats) < 1 || absl::GetFlag(FLAGS_repeats) > 10) {
    return absl::InvalidArgumentError(
        "time limits must be positive (wait_ready_seconds, warmup_requests "
        ">= 0), repeats in 1..10");
  }
  return lg::CheckLoopbackTarget(absl::GetFlag(FLAGS_target));
}

int RequestsFor(int concurrency) {
  const int n = absl::GetFlag(FLAGS_requests_per_level);
  if (n > 0) return n;
  // At least 64 requests and 4 rounds per thread: with fewer, a level lasts
  // under a second and its figures are dominated by the start-up burst
  // (every thread prefilling at once) and by noise from other processes.
  return std::min(kMaxRequestsPerLevel, std::max(64, 4 * concurrency));
}

// One 1-token Generate, then ListModels; retried until both succeed (with a
// model listed) or --wait_ready_seconds pass.
absl::StatusOr<moeserve::v1::ListModelsResponse> WaitReady(
    Inference::Stub& stub, const lg::LevelOptions& base) {
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(
                           absl::GetFlag(FLAGS_wait_ready_seconds) * 1000));
  lg::LevelOptions probe = base;
  probe.max_new_tokens = 1;
  std::string last_error;
  while (true) {
    moeserve::v1::ListModelsResponse models;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    // Generate first: ListModels answers (empty) while the model loads, so
    // only a ListModels taken after a successful Generate describes it.
    const lg::RequestSample sample = lg::RunOneRequest(
        stub, lg::MakeRequest(lg::FixedPrompts()[0], probe), 60);
    if (sample.ok) {
      const grpc::Status status =
          stub.ListModels(&context, moeserve::v1::ListModelsRequest(), &models);
      if (status.ok() && models.models_size() > 0) return models;
      last_error = absl::StrCat("ListModels: ", status.error_code(), " ",
                                status.error_message());
    } else {
      last_error = absl::StrCat("Generate: ", sample.status_code);
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      return absl::UnavailableError(absl::StrCat("server not ready at ",
                                                 absl::GetFlag(FLAGS_target),
                                                 " (", last_error, ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// The requests every level cycles through: the text prompts, or
// --prompt_tokens token-id prompts over the served model's vocabulary.
absl::StatusOr<std::vector<moeserve::v1::GenerateRequest>> LevelRequests(
    const moeserve::v1::ListModelsResponse& models,
    const lg::LevelOptions& base) {
  std::vector<moeserve::v1::GenerateRequest> requests;
  const uint32_t length = absl::GetFlag(FLAGS_prompt_tokens);
  if (length == 0) {
    for (const std::string& p : lg::FixedPrompts()) {
      requests.push_back(lg::MakeRequest(p, base));
    }
    return requests;
  }
  const uint32_t vocab = models.models(0).vocab_size();
  if (vocab <= 3) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--prompt_tokens: the server reports a vocabulary of ", vocab));
  }
  for (const std::vector<uint32_t>& ids :
       lg::TokenIdPrompts(static_cast<int>(lg::FixedPrompts().size()),
                          static_cast<int>(length), vocab)) {
    requests.push_back(lg::MakeTokenRequest(ids, base));
  }
  return requests;
}

const moeserve::base::ProgramHelp& Help() {
  static const auto* help = new moeserve::base::ProgramHelp{
      .program = "moeserve_loadgen",
      .summary =
          "bounded, loopback-only closed-loop load generator: drives "
          "Generate at several concurrency levels and reports tok/s, "
          "TTFT and TPOT percentiles per level.\n  moeserve_loadgen "
          "--target=127.0.0.1:50051 --concurrency=1,4,16,64",
      .groups = {{"Target", {"target", "wait_ready_seconds", "policy"}},
                 {"Load",
                  {"concurrency", "requests_per_level", "max_seconds_per_level",
                   "request_deadline_seconds", "warmup_requests", "repeats"}},
                 {"Requests",
                  {"max_new_tokens", "ignore_eos", "prompt_tokens"}},
                 {"Output", {"json_out"}}},
      .version_details = [] {
        return std::vector<std::string>{"backends: none (a gRPC client)"};
      }};
  return *help;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> exit_code =
          moeserve::base::HandleHelpAndVersion(argc, argv, Help())) {
    return *exit_code;
  }
  absl::SetProgramUsageMessage(
      "Bounded loopback load generator for moeserve: moeserve_loadgen "
      "--target=127.0.0.1:50051 --concurrency=1,4,16,64");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::vector<int>> levels = ParseLevels();
  absl::Status flags = levels.ok() ? CheckFlags() : levels.status();
  if (!flags.ok()) {
    std::cerr << "moeserve_loadgen: " << flags.message() << "\n";
    return 2;
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  auto stub = Inference::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));

  lg::LevelOptions base;
  base.max_seconds = absl::GetFlag(FLAGS_max_seconds_per_level);
  base.request_deadline_s = absl::GetFlag(FLAGS_request_deadline_seconds);
  base.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  base.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  base.policy = absl::GetFlag(FLAGS_policy);

  absl::StatusOr<moeserve::v1::ListModelsResponse> models =
      WaitReady(*stub, base);
  if (!models.ok()) {
    std::cerr << "moeserve_loadgen: " << models.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<moeserve::v1::GenerateRequest>> requests =
      LevelRequests(*models, base);
  if (!requests.ok()) {
    std::cerr << "moeserve_loadgen: " << requests.status().message() << "\n";
    return 1;
  }
  const uint32_t prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  const lg::MachineInfo machine = lg::DescribeMachine();
  std::cout << "machine: " << machine.cpu_model << ", " << machine.cores
            << " logical CPUs\n"
            << "target: " << target << "\n"
            << lg::DescribeServer(*models)
            << absl::StrFormat(
                   "load: closed loop, %d prompts%s, max_new_tokens=%u, "
                   "ignore_eos=%s, greedy, policy=%s\n",
                   requests->size(),
                   prompt_tokens == 0
                       ? std::string(" (text)")
                       : absl::StrCat(" of ", prompt_tokens, " token ids"),
                   base.max_new_tokens, base.ignore_eos ? "true" : "false",
                   base.policy.empty() ? "(server default)" : base.policy);

  for (int i = 0; i < absl::GetFlag(FLAGS_warmup_requests); ++i) {
    lg::RunOneRequest(*stub, (*requests)[i % requests->size()],
                      base.request_deadline_s);
  }

  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::vector<lg::Sweep> sweeps;
  bool any_error = false;
  for (int r = 0; r < repeats; ++r) {
    lg::Sweep sweep;
    for (int c : *levels) {
      lg::LevelOptions options = base;
      options.concurrency = c;
      options.requests = RequestsFor(c);
      absl::StatusOr<lg::LevelSummary> level =
          lg::RunLevel(*stub, *requests, options);
      if (!level.ok()) {
        std::cerr << "moeserve_loadgen: " << level.status().message() << "\n";
        return 1;
      }
      std::cerr << absl::StrFormat(
          "sweep %d level %d: %d/%d ok, %.1f tok/s, %.1fs\n", r + 1, c,
          level->requests_ok, level->requests_issued, level->tokens_per_s,
          level->wall_s);
      any_error = any_error || level->requests_ok != level->requests_issued;
      sweep.push_back(*std::move(level));
    }
    if (repeats > 1) {
      std::cout << "\nsweep " << r + 1 << "\n" << lg::FormatTable(sweep);
    }
    sweeps.push_back(std::move(sweep));
  }

  std::vector<double> per_sweep;
  for (const lg::Sweep& s : sweeps)
    per_sweep.push_back(lg::ComputeRatio(s).ratio);
  if (repeats > 1) std::cout << "\nmedian of " << repeats << " sweeps";
  std::cout << "\n" << lg::FormatTable(lg::MedianSweep(sweeps));
  const lg::ThroughputRatio ratio = lg::MedianRatio(sweeps);
  if (ratio.high_concurrency != ratio.low_concurrency) {
    std::cout << absl::StrFormat(
        "throughput ratio tok/s(c=%d) / tok/s(c=%d) = %.2f (levels of the "
        "same sweep; median over sweeps of: %s)\n",
        ratio.high_concurrency, ratio.low_concurrency, ratio.ratio,
        absl::StrJoin(per_sweep, " ", [](std::string* out, double v) {
          absl::StrAppendFormat(out, "%.2f", v);
        }));
  }
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (!json_out.empty()) {
    const absl::Status written = lg::WriteFile(
        json_out, lg::ToJson(machine, target, base.max_new_tokens,
                             base.ignore_eos, prompt_tokens, *models, sweeps));
    if (!written.ok()) {
      std::cerr << "moeserve_loadgen: " << written.message() << "\n";
      return 1;
    }
  }
  return any_error ? 1 : 0;
}
