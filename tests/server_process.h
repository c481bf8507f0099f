// Test helper: runs the real `moeserve` binary as a child process on free
// loopback ports and stops it with a signal, the way an operator would.
#ifndef MOESERVE_TESTS_SERVER_PROCESS_H_
#define MOESERVE_TESTS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "proto/moeserve.grpc.pb.h"

namespace moeserve::testing {

// Returns a TCP port on 127.0.0.1 that was free a moment ago.
int PickFreePort();

class ServerProcess {
 public:
  // Starts `binary` with --port and --metrics_port set to free ports plus
  // `extra_flags`, and waits (up to 60 s) until its gRPC port accepts a
  // channel.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& extra_flags);
  ~ServerProcess();  // SIGKILLs the child if it is still running

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

  // Sends `signal` and waits for exit; returns the exit status as
  // waitpid's WEXITSTATUS, or -signal if it was killed by one.
  int StopWith(int signal);

  // As StopWith, but waits at most `timeout`: kStillRunning (after a
  // SIGKILL) if the process had not exited by then. `*took`, when given, is
  // how long the exit took.
  static constexpr int kStillRunning = -1000;
  int StopWithin(int signal, absl::Duration timeout,
                 absl::Duration* took = nullptr);

  // The number of threads of the running process (/proc), or -1.
  int ThreadCount() const;

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

// What a process that was expected to exit printed and how it ended.
struct ExitResult {
  int exit_code = -1;  // WEXITSTATUS, or -signal when killed by one
  std::string output;  // stdout and stderr, interleaved
};

// Runs `binary` with `flags` to its exit (killed after `timeout`), e.g. a
// server that must refuse its configuration at start.
absl::StatusOr<ExitResult> RunToExit(const std::string& binary,
                                     const std::vector<std::string>& flags,
                                     absl::Duration timeout);

// grpc.health.v1.Health/Check for `service` ("" = the server); *status is
// 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN (0 when unset).
grpc::Status HealthCheck(grpc::Channel* channel, const std::string& service,
                         int* status);

// Calls Generate and reads the stream to its end, appending every message
// to *out; returns the RPC's status. The call's deadline is `deadline` from
// now; with `cancel_after` > 0 the client cancels it after that many
// messages.
grpc::Status ReadGenerateStream(v1::Inference::Stub* stub,
                                const v1::GenerateRequest& request,
                                std::vector<v1::GenerateResponse>* out,
                                absl::Duration deadline = absl::Seconds(30),
                                int cancel_after = 0);

// Polls health until SERVING (model loaded and warmed up), up to `timeout`.
bool WaitUntilServing(grpc::Channel* channel, absl::Duration timeout);

// An open grpc.health.v1.Health/Watch stream, as a load balancer keeps one:
// Open() returns once the first status has arrived; the destructor cancels
// the stream.
class HealthWatch {
 public:
  // *status: 1 SERVING, 2 NOT_SERVING.
  static absl::StatusOr<std::unique_ptr<HealthWatch>> Open(
      grpc::Channel* channel, int* status);
  ~HealthWatch();

 private:
  HealthWatch() = default;
  struct State;
  std::unique_ptr<State> state_;
};

// Plain HTTP/1.0 GET against 127.0.0.1:port; returns "<status>\n<body>".
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

}  // namespace moeserve::testing

#endif  // MOESERVE_TESTS_SERVER_PROCESS_H_
