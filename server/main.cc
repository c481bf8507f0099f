// moeserve: the gRPC inference server binary.
//
// Start-up: flags -> options; SIGINT/SIGTERM blocked in every thread (a
// sigwait below owns them); gRPC server up with health NOT_SERVING; model
// loaded and warmed up -> SERVING. Shutdown on SIGINT/SIGTERM: NOT_SERVING,
// refuse new work, let in-flight streams finish within --drain_seconds,
// cancel the rest, exit 0.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "metrics/http_exporter.h"
#include "metrics/registry.h"
#include "server/grpc_server.h"
#include "server/inference_service.h"
#include "server/model_host_factory.h"
#include "server/server_metrics.h"
#include "server/server_options.h"
#include "spdlog/spdlog.h"

namespace {

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

int Run(const moeserve::server::ServerOptions& options) {
  using namespace moeserve::server;
  namespace metrics = moeserve::metrics;
  metrics::Registry registry;
  std::unique_ptr<AsyncModelHost> host = CreateModelHost(options, &registry);
  absl::StatusOr<std::unique_ptr<ServerMetrics>> server_metrics =
      ServerMetrics::Create(&registry, options,
                            [&host] { return host->CheckReady().ok(); });
  if (!server_metrics.ok()) {
    spdlog::critical("metrics: {}", server_metrics.status().ToString());
    return EXIT_FAILURE;
  }
  InferenceService service(host.get(), options.limits, server_metrics->get());

  absl::StatusOr<std::unique_ptr<GrpcServer>> grpc_server =
      GrpcServer::Start(options, &service);
  if (!grpc_server.ok()) {
    spdlog::critical("{}", grpc_server.status().ToString());
    return EXIT_FAILURE;
  }
  spdlog::info("gRPC listening on {}:{}", options.host, (*grpc_server)->port());
  absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> http =
      metrics::MetricsHttpServer::Start(
          options.host, options.metrics_port, &registry,
          [&host] { return host->CheckReady().ok(); });
  if (!http.ok()) {
    spdlog::critical("metrics endpoint: {}", http.status().ToString());
    return EXIT_FAILURE;
  }
  spdlog::info("metrics on http://{}:{}/metrics", options.host,
               (*http)->port());
  // Health turns SERVING once the model is loaded and warmed up; the
  // waiter thread must not outlive the server it flips.
  std::thread health_flipper([&] {
    if (absl::Status loaded = host->WaitUntilLoaded(); loaded.ok()) {
      (*grpc_server)->SetServing(true);
      spdlog::info("model ready; health SERVING");
    } else {
      spdlog::error("serving without a model (health NOT_SERVING): {}",
                    loaded.ToString());
    }
  });

  const sigset_t signals = ShutdownSignals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: draining for up to {}", strsignal(signal_number),
               absl::FormatDuration(options.drain));
  health_flipper.join();
  (*grpc_server)->Shutdown(options.drain);
  (*http)->Stop();
  spdlog::info("shut down cleanly");
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
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
  return Run(*options);
}
