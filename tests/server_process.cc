#include "tests/server_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
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
