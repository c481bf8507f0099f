// moeserve: the gRPC inference server binary (and, with --http_port, the
// OpenAI-compatible HTTP API: server/openai/).
//
// Start-up: flags -> options; SIGINT/SIGTERM blocked in every thread (a
// sigwait below owns them); gRPC server (and the HTTP API) up with health
// NOT_SERVING; model loaded and warmed up -> SERVING. Shutdown on
// SIGINT/SIGTERM: NOT_SERVING, refuse new work, let in-flight generations
// finish, cancel the rest, and exit 0 within --drain_seconds of the signal
// (server/README.md, "Bounds and shutdown"): a load still running (a read may
// block for good) or an engine still inside a step (seconds on a slow link) is
// not waited for.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/flag_help.h"
#include "kernels/backend_factory.h"
#include "metrics/http_exporter.h"
#include "metrics/registry.h"
#include "server/client_message.h"
#include "server/grpc_server.h"
#include "server/inference_service.h"
#include "server/model_host_factory.h"
#include "server/openai/chat_template.h"
#include "server/openai/http_api_options.h"
#include "server/openai/http_api_server.h"
#include "server/openai/openai_frontend.h"
#include "server/security/grpc_credentials.h"
#include "server/security/security_options.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "server/serving_bounds.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(bool, exit_on_load_failure, true,
          "Exit with status 1 and the reason when the model (or any engine) "
          "fails to load, so that an orchestrator sees the failure and "
          "restarts or reports it. false: stay up with health NOT_SERVING "
          "and the reason in the log, /healthz and ListModels.");

namespace {

const moeserve::base::ProgramHelp& Help() {
  static const auto* help = new moeserve::base::ProgramHelp{
      .program = "moeserve",
      .summary =
          "gRPC inference server for Mixture-of-Experts models whose experts "
          "are offloaded to host memory or disk (README.md), with an "
          "optional OpenAI-compatible HTTP API (--http_port).\n  moeserve "
          "--model_dir=models/demo --port=50051 --metrics_port=9400 "
          "--http_port=8000",
      .groups =
          {{"Model and compute",
            {"model_dir", "backend", "cuda_device", "cuda_graphs", "threads"}},
           {"Engines and policies",
            {"policy", "policy_config", "ab", "engines", "engines_config"}},
           {"Memory tiers and link",
            {"expert_cache_ratio", "expert_cache_mb", "slow_tier", "link_gbps",
             "link_latency_us", "inplace_compute_ratio", "kv_cache_mb"}},
           {"Hybrid CPU/GPU execution",
            {"cpu_moe_layers", "host_expert_threads", "host_attention"}},
           {"Scheduler and request limits",
            {"max_num_seqs", "max_batched_tokens", "max_waiting",
             "max_running_per_caller", "max_waiting_per_caller",
             "max_new_tokens_cap", "max_input_tokens", "max_prompt_bytes",
             "max_stop_strings", "max_stop_string_bytes"}},
           {"Speculation",
            {"drafter", "num_speculative_tokens", "draft_model_dir",
             "draft_budget"}},
           {"Network and security",
            {"host", "port", "http_port", "http_host", "http_head_timeout_s",
             "max_receive_message_mb", "keepalive_time_ms",
             "keepalive_timeout_ms", "max_open_streams",
             "max_streams_per_connection", "grpc_max_threads", "tls_cert_file",
             "tls_key_file", "tls_client_ca_file", "auth_token_file",
             "metrics_auth"}},
           {"Observability", {"metrics_port"}},
           {"Lifecycle", {"drain_seconds", "exit_on_load_failure"}}},
      .version_details = moeserve::kernels::DescribeCompute};
  return *help;
}

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Of the drain, what the engines get to stop in after the calls are
// cancelled: a quarter, at most this.
constexpr absl::Duration kMaxStopGrace = absl::Seconds(1);
// The least time the engines get to stop in, whatever the drain.
constexpr absl::Duration kMinStopWait = absl::Milliseconds(100);

// Destroys `host` (joining its loader and engine threads) by `deadline`;
// false, leaving it to the process exit, when it cannot: a load still
// running, or an engine step that outlasts the deadline.
bool StopHost(std::unique_ptr<moeserve::server::AsyncModelHost> host,
              absl::Time deadline) {
  if (!host->LoadFinished()) {
    (void)host.release();  // its loader thread may never return
    return false;
  }
  auto stopped = std::make_shared<absl::Notification>();
  std::thread stopper([host = std::move(host), stopped]() mutable {
    host.reset();
    stopped->Notify();
  });
  if (stopped->WaitForNotificationWithDeadline(deadline)) {
    stopper.join();
    return true;
  }
  stopper.detach();
  return false;
}

// Exits now, without running destructors that would wait for the threads
// StopHost could not stop. Logs are flushed first.
[[noreturn]] void ExitWithoutWaiting() {
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  std::_Exit(EXIT_SUCCESS);
}

// The metrics port's options: the same host, TLS material as gRPC, and the
// token check when --metrics_auth.
moeserve::metrics::HttpExporterOptions HttpOptions(
    const moeserve::server::ServerOptions& options,
    const moeserve::server::security::SecurityOptions& security) {
  moeserve::metrics::HttpExporterOptions http;
  http.host = options.host;
  http.port = options.metrics_port;
  http.head_timeout_s = options.http_head_timeout_s;
  http.tls_cert_pem = security.tls_cert_pem;
  http.tls_key_pem = security.tls_key_pem;
  http.tls_client_ca_pem = security.tls_client_ca_pem;
  if (security.metrics_auth) {
    http.authorize = [tokens = security.tokens](absl::string_view header) {
      return tokens->IdentifyAuthorization(header).has_value();
    };
  }
  return http;
}

// The OpenAI-compatible HTTP API (--http_port), or null when it is off.
// The frontend must outlive the server.
absl::StatusOr<std::unique_ptr<moeserve::server::openai::OpenAiHttpServer>>
StartOpenAiApi(const moeserve::server::ServerOptions& options,
               const moeserve::server::security::SecurityOptions& security,
               moeserve::server::openai::OpenAiFrontend* frontend) {
  namespace openai = moeserve::server::openai;
  if (options.http_port == 0) {
    return std::unique_ptr<openai::OpenAiHttpServer>();
  }
  absl::StatusOr<std::unique_ptr<openai::OpenAiHttpServer>> http =
      openai::OpenAiHttpServer::Start(
          openai::HttpApiOptionsFor(options, security), frontend);
  if (!http.ok()) return http.status();
  spdlog::info("OpenAI-compatible API on {}://{}:{}/v1",
               security.tls() ? "https" : "http",
               openai::HttpApiOptionsFor(options, security).host,
               (*http)->port());
  return http;
}

int Run(const moeserve::server::ServerOptions& options,
        const moeserve::server::ServingBounds& bounds,
        const moeserve::server::security::SecurityOptions& security) {
  using namespace moeserve::server;
  namespace metrics = moeserve::metrics;
  namespace openai = moeserve::server::openai;
  metrics::Registry registry;
  std::unique_ptr<AsyncModelHost> host = CreateModelHost(options, &registry);
  absl::StatusOr<std::unique_ptr<ServerMetrics>> server_metrics =
      ServerMetrics::Create(&registry, options,
                            [&host] { return host->CheckReady().ok(); });
  if (!server_metrics.ok()) {
    spdlog::critical("metrics: {}", server_metrics.status().ToString());
    return EXIT_FAILURE;
  }
  InferenceService service(host.get(), options.limits, server_metrics->get(),
                           bounds.max_open_streams);

  absl::StatusOr<std::unique_ptr<GrpcServer>> grpc_server = GrpcServer::Start(
      options, &service, bounds, security::MakeGrpcServerCredentials(security));
  if (!grpc_server.ok()) {
    spdlog::critical("{}", grpc_server.status().ToString());
    return EXIT_FAILURE;
  }
  spdlog::info("gRPC listening on {}:{}", options.host, (*grpc_server)->port());
  absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> http =
      metrics::MetricsHttpServer::Start(
          HttpOptions(options, security), &registry,
          [&host] { return host->CheckReady().ok(); });
  if (!http.ok()) {
    spdlog::critical("metrics endpoint: {}", http.status().ToString());
    return EXIT_FAILURE;
  }
  spdlog::info("metrics on {}://{}:{}/metrics",
               security.tls() ? "https" : "http", options.host,
               (*http)->port());
  absl::StatusOr<openai::ChatTemplate> chat_template =
      openai::ChatTemplate::LoadFromModelDir(options.model_dir);
  if (options.http_port != 0) {
    if (chat_template.ok()) {
      spdlog::info("chat template: {}",
                   std::string(chat_template->family_name()));
    } else {
      spdlog::warn("no chat template, /v1/chat/completions answers 400: {}",
                   std::string(chat_template.status().message()));
    }
  }
  openai::OpenAiFrontend openai_frontend(
      host.get(), server_metrics->get(), options.limits,
      PublicModelName(options.model_dir), std::move(chat_template));
  absl::StatusOr<std::unique_ptr<openai::OpenAiHttpServer>> openai_http =
      StartOpenAiApi(options, security, &openai_frontend);
  if (!openai_http.ok()) {
    spdlog::critical("OpenAI API: {}", openai_http.status().ToString());
    return EXIT_FAILURE;
  }
  // Health turns SERVING once the model is loaded and warmed up; the
  // waiter thread must not outlive the server it flips. A failed load ends
  // the process (the signal wakes the sigwait below) unless
  // --exit_on_load_failure=false.
  std::atomic<bool> load_failed{false};
  std::thread health_flipper([&] {
    if (absl::Status loaded = host->WaitUntilLoaded(); loaded.ok()) {
      (*grpc_server)->SetServing(true);
      spdlog::info("model ready; health SERVING");
    } else if (!absl::IsCancelled(loaded)) {
      if (absl::GetFlag(FLAGS_exit_on_load_failure)) {
        spdlog::critical(
            "the model failed to load; exiting (--exit_on_load_failure): {}",
            loaded.ToString());
        load_failed = true;
        kill(getpid(), SIGTERM);
      } else {
        spdlog::error("serving without a model (health NOT_SERVING): {}",
                      loaded.ToString());
      }
    }
  });

  const sigset_t signals = ShutdownSignals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  (*http)->StartDraining();  // /healthz 503 now, as gRPC health goes
  if (*openai_http != nullptr) (*openai_http)->StartDraining();  // /health
  const absl::Time deadline = absl::Now() + options.drain;
  spdlog::info("signal {}: draining for up to {}", strsignal(signal_number),
               absl::FormatDuration(options.drain));
  host->StopWaiting();  // a load still running is not waited for
  health_flipper.join();
  const absl::Duration grace = std::min(options.drain / 4, kMaxStopGrace);
  (*grpc_server)->Shutdown(deadline - grace);
  if (*openai_http != nullptr) {
    // Both drained at once: the HTTP generations ran on meanwhile.
    (*openai_http)->WaitForOpenCalls(deadline - grace);
    (*openai_http)->Stop();  // cancels what is left
  }
  (*http)->Stop();
  if (!StopHost(std::move(host),
                std::max(deadline, absl::Now() + kMinStopWait))) {
    spdlog::warn(
        "the model load or an engine step outlasted the drain; exiting "
        "without waiting for it");
    ExitWithoutWaiting();
  }
  if (load_failed) return EXIT_FAILURE;
  spdlog::info("shut down cleanly");
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> exit_code =
          moeserve::base::HandleHelpAndVersion(argc, argv, Help())) {
    return *exit_code;
  }
  absl::SetProgramUsageMessage(
      "gRPC inference server for offloaded Mixture-of-Experts models.\n"
      "  moeserve --model_dir=models/demo --port=50051 --metrics_port=9400");
  // Block first, before any thread can exist, so every thread inherits the
  // mask and only the sigwait in Run() sees the signals.
  const sigset_t signals = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::ParseCommandLine(argc, argv);

  absl::StatusOr<moeserve::server::ServerOptions> options =
      moeserve::server::ServerOptionsFromFlags();
  // Bad flags or --engines_config (unknown policy, policy_config key, ...)
  // refuse to start rather than serve nothing.
  if (!options.ok()) {
    spdlog::critical("{}", options.status().ToString());
    return 2;
  }
  absl::StatusOr<moeserve::server::ServingBounds> bounds =
      moeserve::server::ServingBoundsFromFlags();
  if (!bounds.ok()) {
    spdlog::critical("{}", bounds.status().ToString());
    return 2;
  }
  absl::StatusOr<moeserve::server::security::SecurityOptions> security =
      moeserve::server::security::SecurityOptionsFromFlags();
  if (!security.ok()) {
    spdlog::critical("{}", security.status().ToString());
    return 2;
  }
  if (const std::string warning =
          moeserve::server::security::ExposureWarning(options->host, *security);
      !warning.empty()) {
    spdlog::warn("{}", warning);
  }
  if (options->http_port != 0 && options->http_host != options->host) {
    if (const std::string warning = moeserve::server::security::ExposureWarning(
            options->http_host, *security);
        !warning.empty()) {
      spdlog::warn("--http_host: {}", warning);
    }
  }
  return Run(*options, *bounds, *security);
}
