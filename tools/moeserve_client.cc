// moeserve_client: calls Generate and prints the streamed text as it arrives.
//
//   moeserve_client --target=127.0.0.1:50051 --prompt="The LORD" \
//       --max_new_tokens=64 --temperature=0.8 --seed=7
//
// The final line on stderr reports finish reason, usage, seed and policy.
// Exit status: 0 on success, 1 on an RPC error (printed with its code).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/moeserve.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address.");
ABSL_FLAG(std::string, prompt, "", "Prompt text.");
ABSL_FLAG(std::string, prompt_token_ids, "",
          "Comma-separated prompt token ids (instead of --prompt).");
ABSL_FLAG(uint32_t, max_new_tokens, 64, "Tokens to generate at most.");
ABSL_FLAG(float, temperature, 0, "0 = greedy.");
ABSL_FLAG(float, top_p, 1, "Nucleus sampling mass in (0, 1].");
ABSL_FLAG(int, top_k, 0, "Top-k sampling (0 = off).");
ABSL_FLAG(int64_t, seed, -1, "Sampling seed (-1 = server's choice).");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop strings.");
ABSL_FLAG(std::string, policy, "", "Engine instance to use (A/B).");
ABSL_FLAG(std::string, request_id, "", "Request id (for Abort).");
ABSL_FLAG(int, deadline_ms, 120000, "gRPC deadline.");

namespace {

using moeserve::v1::FinishReason_Name;

moeserve::v1::GenerateRequest RequestFromFlags() {
  moeserve::v1::GenerateRequest request;
  request.set_prompt(absl::GetFlag(FLAGS_prompt));
  const std::string ids = absl::GetFlag(FLAGS_prompt_token_ids);
  for (absl::string_view id : absl::StrSplit(ids, ',', absl::SkipEmpty())) {
    uint32_t value = 0;
    if (!absl::SimpleAtoi(id, &value)) {
      std::cerr << "--prompt_token_ids: '" << id << "' is not a token id\n";
      std::exit(2);
    }
    request.add_prompt_token_ids(value);
  }
  auto* s = request.mutable_sampling();
  s->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  s->set_temperature(absl::GetFlag(FLAGS_temperature));
  s->set_top_p(absl::GetFlag(FLAGS_top_p));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (absl::GetFlag(FLAGS_seed) >= 0) s->set_seed(absl::GetFlag(FLAGS_seed));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) s->add_stop(stop);
  request.set_policy(absl::GetFlag(FLAGS_policy));
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Streams a completion from moeserve: moeserve_client --prompt=TEXT");
  absl::ParseCommandLine(argc, argv);
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_target),
                                     grpc::InsecureChannelCredentials());
  auto stub = moeserve::v1::Inference::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::GetFlag(FLAGS_deadline_ms)));
  auto reader = stub->Generate(&context, RequestFromFlags());
  moeserve::v1::GenerateResponse response;
  moeserve::v1::GenerateResponse last;
  while (reader->Read(&response)) {
    std::cout << response.text() << std::flush;
    last = response;
  }
  grpc::Status status = reader->Finish();
  std::cout << "\n";
  if (!status.ok()) {
    std::cerr << "error " << status.error_code() << ": "
              << status.error_message() << "\n";
    return 1;
  }
  std::cerr << "[finish=" << FinishReason_Name(last.finish_reason())
            << " prompt_tokens=" << last.usage().prompt_tokens()
            << " completion_tokens=" << last.usage().completion_tokens()
            << " seed=" << last.seed() << " policy=" << last.policy() << "]\n";
  return 0;
}
