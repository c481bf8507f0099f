#include "tests/server_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"

namespace moeserve::testing {

int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& binary, const std::vector<std::string>& extra_flags) {
  auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
  server->grpc_port_ = PickFreePort();
  server->metrics_port_ = PickFreePort();
  std::vector<std::string> args = {
      binary, absl::StrCat("--port=", server->grpc_port_),
      absl::StrCat("--metrics_port=", server->metrics_port_)};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  server->pid_ = fork();
  if (server->pid_ < 0) return absl::InternalError("fork failed");
  if (server->pid_ == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  server->channel_ =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->grpc_port_),
                          grpc::InsecureChannelCredentials());
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(60);
  if (!server->channel_->WaitForConnected(deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat(binary, " did not accept gRPC connections within 60 s"));
  }
  return server;
}

int ServerProcess::StopWithin(int signal, absl::Duration timeout,
                              absl::Duration* took) {
  if (pid_ <= 0) return -1;
  const absl::Time start = absl::Now();
  kill(pid_, signal);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid_, &status, WNOHANG)) == 0 &&
         absl::Now() - start < timeout) {
    absl::SleepFor(absl::Milliseconds(20));  // polling a child's exit
  }
  if (took != nullptr) *took = absl::Now() - start;
  if (done == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return kStillRunning;
  }
  pid_ = -1;
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return WEXITSTATUS(status);
}

int ServerProcess::ThreadCount() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

int ServerProcess::StopWith(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return WEXITSTATUS(status);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) StopWith(SIGKILL);
}

// grpc.health.v1 is not shipped as a .proto by Debian; its two messages are
// tiny, so the test speaks them as raw protobuf bytes through a generic stub:
// HealthCheckRequest{string service = 1}, HealthCheckResponse{enum status =
// 1} with SERVING = 1, NOT_SERVING = 2, SERVICE_UNKNOWN = 3.
grpc::Status HealthCheck(grpc::Channel* channel, const std::string& service,
                         int* status) {
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1);
  grpc::ByteBuffer recv;
  grpc::GenericStub stub(channel->shared_from_this());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  absl::Notification done;
  grpc::Status result;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", {}, &send, &recv,
                 [&](grpc::Status s) {
                   result = s;     // read only after done: the Notification
                   done.Notify();  // orders the two threads
                 });
  done.WaitForNotification();
  if (!result.ok()) return result;
  std::vector<grpc::Slice> slices;
  recv.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // An all-default message (status UNKNOWN = 0) is empty on the wire.
  *status = bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
  return result;
}

struct HealthWatch::State {
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  grpc::ByteBuffer received;

  // Waits for the one operation in flight; its ok.
  bool Await() {
    void* tag;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  }
};

absl::StatusOr<std::unique_ptr<HealthWatch>> HealthWatch::Open(
    grpc::Channel* channel, int* status) {
  auto watch = std::unique_ptr<HealthWatch>(new HealthWatch());
  watch->state_ = std::make_unique<State>();
  State& s = *watch->state_;
  grpc::GenericStub stub(channel->shared_from_this());
  s.call = stub.PrepareCall(&s.context, "/grpc.health.v1.Health/Watch", &s.cq);
  s.call->StartCall(nullptr);
  if (!s.Await()) return absl::UnavailableError("Watch: call did not start");
  const std::string request;  // HealthCheckRequest{service = ""}
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1);
  s.call->Write(send, nullptr);
  if (!s.Await()) return absl::UnavailableError("Watch: write failed");
  s.call->WritesDone(nullptr);
  if (!s.Await()) return absl::UnavailableError("Watch: half-close failed");
  s.call->Read(&s.received, nullptr);
  if (!s.Await()) return absl::UnavailableError("Watch: no first status");
  std::vector<grpc::Slice> slices;
  s.received.Dump(&slices);
  std::string bytes;
  for (const auto& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  *status = bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
  return watch;
}

HealthWatch::~HealthWatch() {
  if (state_ == nullptr || state_->call == nullptr) return;
  state_->context.TryCancel();
  grpc::Status status;
  state_->call->Finish(&status, nullptr);
  state_->Await();
  state_->cq.Shutdown();
  void* tag;
  bool ok;
  while (state_->cq.Next(&tag, &ok)) {
  }
}

grpc::Status ReadGenerateStream(v1::Inference::Stub* stub,
                                const v1::GenerateRequest& request,
                                std::vector<v1::GenerateResponse>* out,
                                absl::Duration deadline, int cancel_after) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  v1::GenerateResponse response;
  int messages = 0;
  while (reader->Read(&response)) {
    out->push_back(response);
    if (++messages == cancel_after) context.TryCancel();
  }
  return reader->Finish();
}

bool WaitUntilServing(grpc::Channel* channel, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (absl::Now() < deadline) {
    if (HealthCheck(channel, "", &status).ok() && status == 1) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

absl::StatusOr<ExitResult> RunToExit(const std::string& binary,
                                     const std::vector<std::string>& flags,
                                     absl::Duration timeout) {
  std::vector<std::string> args = {binary};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  ExitResult result;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  while (true) {
    pollfd p = {out[0], POLLIN, 0};
    const int ms = static_cast<int>(std::max<int64_t>(
        0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (poll(&p, 1, ms) <= 0) {  // timed out: it did not exit by itself
      kill(pid, SIGKILL);
      break;
    }
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    result.output.append(buf, n);
  }
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code =
      WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
  return result;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("connect to port ", port, ": ", strerror(errno)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, request.data(), request.size()) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("short write");
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody" -> "200\nbody"
  const size_t space = response.find(' ');
  const size_t body = response.find("\r\n\r\n");
  if (space == std::string::npos || body == std::string::npos) {
    return absl::DataLossError("malformed HTTP response");
  }
  return absl::StrCat(response.substr(space + 1, 3), "\n",
                      response.substr(body + 4));
}

}  // namespace moeserve::testing
