// moeserve_soak: a soak benchmark (not a test). N clients make a mix of calls
// (streams read to the end, client cancels, deadlines, server time limits,
// unary calls, Aborts, Tokenize, invalid requests, dropped connections) for a
// given time against a running server, while the server process's RSS,
// thread count and open file descriptors are sampled from /proc. Reports
// growth from the post-warm-up baseline to the end and after the clients
// stop, error counts per action and status, and throughput. See README.md.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flag_help.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "nlohmann/json.hpp"
#include "tools/loadgen/loopback.h"
#include "tools/soak/process_probe.h"
#include "tools/soak/soak_client.h"
#include "tools/soak/tally.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "The server's gRPC address (loopback only).");
ABSL_FLAG(int, server_pid, 0,
          "The server's process id, for RSS / threads / fds (required).");
ABSL_FLAG(int, clients, 8, "Concurrent client threads (1..256).");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(60),
          "How long the clients run, after the warm-up.");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(10),
          "Load before the baseline sample (lets caches and pools settle).");
ABSL_FLAG(absl::Duration, report_every, absl::Seconds(10),
          "Interval of the progress lines.");
ABSL_FLAG(absl::Duration, settle, absl::Seconds(5),
          "Idle time after the clients stop before the last sample.");
ABSL_FLAG(uint32_t, max_new_tokens, 48, "Longest random completion.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the clients' random choices.");
ABSL_FLAG(std::string, bearer_token_file, "",
          "File whose first line is sent as 'authorization: Bearer ...'.");
ABSL_FLAG(int64_t, max_unexpected, 0,
          "Exit 1 when more calls than this end with an unexpected status.");
ABSL_FLAG(std::string, json_out, "", "Also write the report here as JSON.");

namespace moeserve::soak {
namespace {

double Mib(int64_t bytes) { return bytes / (1024.0 * 1024.0); }

nlohmann::json SampleJson(const ProcessSample& s) {
  return {{"rss_mib", Mib(s.rss_bytes)},
          {"hwm_mib", Mib(s.hwm_bytes)},
          {"threads", s.threads},
          {"open_fds", s.open_fds}};
}

int Run() {
  const std::string target = absl::GetFlag(FLAGS_target);
  if (absl::Status ok = loadgen::CheckLoopbackTarget(target); !ok.ok()) {
    std::cerr << "--target: " << ok.message() << "\n";
    return 2;
  }
  const pid_t pid = absl::GetFlag(FLAGS_server_pid);
  const int clients = absl::GetFlag(FLAGS_clients);
  if (pid <= 0) {
    std::cerr << "--server_pid: required (the server's process id)\n";
    return 2;
  }
  if (clients < 1 || clients > 256) {
    std::cerr << "--clients: must be in [1, 256]\n";
    return 2;
  }
  SoakClientOptions options;
  options.target = target;
  options.max_new_tokens =
      std::max<uint32_t>(1, absl::GetFlag(FLAGS_max_new_tokens));
  if (const std::string file = absl::GetFlag(FLAGS_bearer_token_file);
      !file.empty()) {
    std::ifstream in(file);
    if (!in || !std::getline(in, options.bearer_token) ||
        options.bearer_token.empty()) {
      std::cerr << "--bearer_token_file: cannot read a token from " << file
                << "\n";
      return 2;
    }
    options.bearer_token =
        std::string(absl::StripAsciiWhitespace(options.bearer_token));
  }
  absl::StatusOr<ProcessSample> start = SampleProcess(pid);
  if (!start.ok()) {
    std::cerr << "--server_pid: " << start.status().message() << "\n";
    return 2;
  }

  Tally tally;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      SoakClient client(channel, options, seed * 1000003 + i, i, &tally);
      client.Run(stop);
    });
  }

  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::GetFlag(FLAGS_warmup));
  absl::StatusOr<ProcessSample> baseline = SampleProcess(pid);
  const absl::Time t_base = absl::Now();
  const int64_t calls_base = tally.calls();
  const int64_t tokens_base = tally.tokens();
  ProcessSample peak = baseline.ok() ? *baseline : *start;
  bool server_gone = !baseline.ok();
  nlohmann::json progress = nlohmann::json::array();
  std::printf("%8s %10s %8s %6s %10s %10s %10s\n", "t_s", "rss_mib", "threads",
              "fds", "calls", "tokens", "unexpected");
  const absl::Time end = t_base + absl::GetFlag(FLAGS_duration);
  while (!server_gone && absl::Now() < end) {
    absl::SleepFor(
        std::min(absl::GetFlag(FLAGS_report_every), end - absl::Now()));
    absl::StatusOr<ProcessSample> s = SampleProcess(pid);
    if (!s.ok()) {
      server_gone = true;
      break;
    }
    peak.rss_bytes = std::max(peak.rss_bytes, s->rss_bytes);
    peak.threads = std::max(peak.threads, s->threads);
    peak.open_fds = std::max(peak.open_fds, s->open_fds);
    const double t = absl::ToDoubleSeconds(absl::Now() - t0);
    std::printf("%8.0f %10.1f %8d %6d %10lld %10lld %10lld\n", t,
                Mib(s->rss_bytes), s->threads, s->open_fds,
                static_cast<long long>(tally.calls()),
                static_cast<long long>(tally.tokens()),
                static_cast<long long>(tally.unexpected()));
    std::fflush(stdout);
    nlohmann::json line = SampleJson(*s);
    line["t_s"] = t;
    line["calls"] = tally.calls();
    line["unexpected"] = tally.unexpected();
    progress.push_back(std::move(line));
  }
  absl::StatusOr<ProcessSample> loaded_end = SampleProcess(pid);
  const double measured_s = absl::ToDoubleSeconds(absl::Now() - t_base);
  const int64_t calls = tally.calls() - calls_base;
  const int64_t tokens = tally.tokens() - tokens_base;
  stop = true;
  for (std::thread& t : threads) t.join();
  absl::SleepFor(absl::GetFlag(FLAGS_settle));
  absl::StatusOr<ProcessSample> settled = SampleProcess(pid);
  server_gone |= !loaded_end.ok() || !settled.ok();

  nlohmann::json report = {{"target", target},
                           {"clients", clients},
                           {"measured_seconds", measured_s},
                           {"calls_per_second", calls / measured_s},
                           {"tokens_per_second", tokens / measured_s},
                           {"server_exited", server_gone},
                           {"start", SampleJson(*start)},
                           {"progress", progress},
                           {"tally", tally.ToJson()}};
  if (!server_gone) {
    report["baseline"] = SampleJson(*baseline);
    report["end_under_load"] = SampleJson(*loaded_end);
    report["after_settle"] = SampleJson(*settled);
    report["peak"] = SampleJson(peak);
    report["rss_growth_percent"] =
        100.0 * (loaded_end->rss_bytes - baseline->rss_bytes) /
        baseline->rss_bytes;
    std::printf(
        "\nmeasured %.0f s, %d clients: %.1f calls/s, %.1f tokens/s\n"
        "RSS MiB: baseline %.1f, end %.1f (%+.2f%%), peak %.1f, after %s "
        "idle %.1f\n"
        "threads: baseline %d, end %d, peak %d, after idle %d\n"
        "open fds: baseline %d, end %d, peak %d, after idle %d\n",
        measured_s, clients, calls / measured_s, tokens / measured_s,
        Mib(baseline->rss_bytes), Mib(loaded_end->rss_bytes),
        report["rss_growth_percent"].get<double>(), Mib(peak.rss_bytes),
        absl::FormatDuration(absl::GetFlag(FLAGS_settle)).c_str(),
        Mib(settled->rss_bytes), baseline->threads, loaded_end->threads,
        peak.threads, settled->threads, baseline->open_fds,
        loaded_end->open_fds, peak.open_fds, settled->open_fds);
  } else {
    std::printf("\nTHE SERVER EXITED during the soak\n");
  }
  std::printf("calls: %lld, unexpected: %lld\n%s\n",
              static_cast<long long>(tally.calls()),
              static_cast<long long>(tally.unexpected()),
              tally.ToJson().dump(1).c_str());
  if (const std::string path = absl::GetFlag(FLAGS_json_out); !path.empty()) {
    std::ofstream(path) << report.dump(2) << "\n";
  }
  return server_gone || tally.unexpected() > absl::GetFlag(FLAGS_max_unexpected)
             ? 1
             : 0;
}

}  // namespace
}  // namespace moeserve::soak

namespace {

const moeserve::base::ProgramHelp& Help() {
  static const auto* help = new moeserve::base::ProgramHelp{
      .program = "moeserve_soak",
      .summary =
          "soak benchmark: mixed calls against a running moeserve for "
          "a given time; reports the server's RSS, threads and fds, "
          "and error counts. See tools/soak/README.md.\n  "
          "moeserve_soak --target=127.0.0.1:50051 --server_pid=PID "
          "--clients=8 --duration=1h",
      .groups = {{"Target", {"target", "server_pid", "bearer_token_file"}},
                 {"Load",
                  {"clients", "duration", "warmup", "settle", "max_new_tokens",
                   "seed"}},
                 {"Report", {"report_every", "max_unexpected", "json_out"}}},
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
      "Soak benchmark: mixed calls against a running moeserve for a given "
      "time; reports the server's RSS, threads and fds, and error counts.\n"
      "  moeserve_soak --target=127.0.0.1:50051 --server_pid=PID "
      "--clients=8 --duration=1h");
  absl::ParseCommandLine(argc, argv);
  return moeserve::soak::Run();
}
