// moeserve_client: the command-line client of moeserve's gRPC API.
//
//   moeserve_client --prompt="The LORD" --max_new_tokens=64   # stream text
//   moeserve_client --prompt=... --json        # one JSON object per message
//   moeserve_client --tokenize --prompt="Hello"           # text -> ids
//   moeserve_client --tokenize --prompt_token_ids=1,2,3   # ids -> text
//   moeserve_client --list_models                          # models, engines
//
// Text mode prints the streamed text on stdout and a summary line (finish
// reason, usage, seed, policy) on stderr. --json prints one JSON object per
// line on stdout (the proto3 JSON mapping of each GenerateResponse with
// field names as in moeserve.proto and every field present; uint64 as
// strings), and an RPC error as {"error": {"code": ..., "message": ...}}.
// Exit status: 0 on success, 1 on an RPC error, 2 on bad flags.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/flag_help.h"
#include "base/grpc_code_name.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "nlohmann/json.hpp"
#include "proto/moeserve.grpc.pb.h"
#include "tools/client/client_channel.h"

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
ABSL_FLAG(bool, ignore_eos, false,
          "Never end at EOS (it is masked; ends at max_new_tokens).");
ABSL_FLAG(uint32_t, logprobs, 0,
          "Return this many top alternatives per token (shown with --json).");
ABSL_FLAG(uint32_t, time_limit_ms, 0, "Server-side time budget (0 = none).");
ABSL_FLAG(std::string, policy, "", "Engine instance to use (A/B).");
ABSL_FLAG(std::string, request_id, "", "Request id (for Abort).");
ABSL_FLAG(int, deadline_ms, 120000, "gRPC deadline of each call.");
ABSL_FLAG(bool, json, false,
          "Print one JSON object per streamed message (or per answer).");
ABSL_FLAG(bool, unary, false, "Use GenerateUnary (one answer) instead.");
ABSL_FLAG(bool, tokenize, false,
          "Tokenize --prompt (or decode --prompt_token_ids) instead of "
          "generating.");
ABSL_FLAG(bool, add_bos, false, "With --tokenize: prepend BOS.");
ABSL_FLAG(bool, skip_special_tokens, false,
          "With --tokenize: leave special tokens (<s>, </s>, <|im_end|>) out "
          "of the decoded text; by default they are kept, as Hugging Face's "
          "decode keeps them.");
ABSL_FLAG(bool, list_models, false,
          "Print the served model and engines (JSON) instead of generating.");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle: connect with TLS and verify the server with it.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate for mutual TLS (with --tls_key_file).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM key of --tls_cert_file.");
ABSL_FLAG(std::string, auth_token_file, "",
          "Token file (the server's format): its first token is sent as a "
          "bearer token.");

namespace {

using moeserve::client::ClientChannel;
namespace v1 = moeserve::v1;

const moeserve::base::ProgramHelp& Help() {
  static const auto* help = new moeserve::base::ProgramHelp{
      .program = "moeserve_client",
      .summary =
          "calls a moeserve server: streams a completion as text or "
          "JSON, tokenizes, lists models.\n  moeserve_client "
          "--prompt=\"Once upon a time\" --max_new_tokens=32 [--json]",
      .groups = {{"Connection",
                  {"target", "deadline_ms", "tls_ca_file", "tls_cert_file",
                   "tls_key_file", "auth_token_file"}},
                 {"Mode and output",
                  {"json", "unary", "tokenize", "add_bos",
                   "skip_special_tokens", "list_models"}},
                 {"Request",
                  {"prompt", "prompt_token_ids", "max_new_tokens", "stop",
                   "ignore_eos", "logprobs", "time_limit_ms", "policy",
                   "request_id"}},
                 {"Sampling", {"temperature", "top_p", "top_k", "seed"}}},
      .version_details = [] {
        return std::vector<std::string>{"backends: none (a gRPC client)"};
      }};
  return *help;
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  std::string out;
  // Serialising a well-formed message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::vector<uint32_t> TokenIdsFromFlag() {
  std::vector<uint32_t> ids;
  const std::string text = absl::GetFlag(FLAGS_prompt_token_ids);
  for (absl::string_view id : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    uint32_t value = 0;
    if (!absl::SimpleAtoi(id, &value)) {
      std::cerr << "--prompt_token_ids: '" << id << "' is not a token id\n";
      std::exit(2);
    }
    ids.push_back(value);
  }
  return ids;
}

v1::GenerateRequest RequestFromFlags() {
  v1::GenerateRequest request;
  request.set_prompt(absl::GetFlag(FLAGS_prompt));
  for (uint32_t id : TokenIdsFromFlag()) request.add_prompt_token_ids(id);
  v1::SamplingParams* s = request.mutable_sampling();
  s->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  s->set_temperature(absl::GetFlag(FLAGS_temperature));
  s->set_top_p(absl::GetFlag(FLAGS_top_p));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  if (absl::GetFlag(FLAGS_seed) >= 0) s->set_seed(absl::GetFlag(FLAGS_seed));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) s->add_stop(stop);
  s->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  request.set_logprobs(absl::GetFlag(FLAGS_logprobs));
  request.set_time_limit_ms(absl::GetFlag(FLAGS_time_limit_ms));
  request.set_policy(absl::GetFlag(FLAGS_policy));
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  return request;
}

// Prints a failed call (JSON or text) and returns the exit status.
int ReportError(const grpc::Status& status) {
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json error;
    error["error"]["code"] = moeserve::GrpcCodeName(status.error_code());
    error["error"]["message"] = status.error_message();
    std::cout << error.dump() << "\n";
  } else {
    std::cerr << "error " << status.error_code() << ": "
              << status.error_message() << "\n";
  }
  return 1;
}

void Prepare(const ClientChannel& channel, grpc::ClientContext* context) {
  channel.Prepare(context);
  context->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::GetFlag(FLAGS_deadline_ms)));
}

int ListModels(const ClientChannel& channel, v1::Inference::Stub* stub) {
  grpc::ClientContext context;
  Prepare(channel, &context);
  v1::ListModelsResponse response;
  const grpc::Status status =
      stub->ListModels(&context, v1::ListModelsRequest(), &response);
  if (!status.ok()) return ReportError(status);
  std::cout << ToJson(response) << "\n";
  return 0;
}

int Tokenize(const ClientChannel& channel, v1::Inference::Stub* stub) {
  v1::TokenizeRequest request;
  request.set_text(absl::GetFlag(FLAGS_prompt));
  for (uint32_t id : TokenIdsFromFlag()) request.add_token_ids(id);
  request.set_add_bos(absl::GetFlag(FLAGS_add_bos));
  request.set_skip_special_tokens(absl::GetFlag(FLAGS_skip_special_tokens));
  grpc::ClientContext context;
  Prepare(channel, &context);
  v1::TokenizeResponse response;
  const grpc::Status status = stub->Tokenize(&context, request, &response);
  if (!status.ok()) return ReportError(status);
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ToJson(response) << "\n";
  } else if (!request.text().empty()) {
    for (int i = 0; i < response.token_ids_size(); ++i) {
      std::cout << (i ? "," : "") << response.token_ids(i);
    }
    std::cout << "\n";
  } else {
    std::cout << response.text() << "\n";
  }
  return 0;
}

int GenerateUnary(const ClientChannel& channel, v1::Inference::Stub* stub) {
  grpc::ClientContext context;
  Prepare(channel, &context);
  v1::GenerateUnaryResponse response;
  const grpc::Status status =
      stub->GenerateUnary(&context, RequestFromFlags(), &response);
  if (!status.ok()) return ReportError(status);
  if (absl::GetFlag(FLAGS_json)) {
    std::cout << ToJson(response) << "\n";
    return 0;
  }
  std::cout << response.text() << "\n";
  std::cerr << "[finish=" << v1::FinishReason_Name(response.finish_reason())
            << " prompt_tokens=" << response.usage().prompt_tokens()
            << " completion_tokens=" << response.usage().completion_tokens()
            << " seed=" << response.seed() << " policy=" << response.policy()
            << "]\n";
  return 0;
}

int Generate(const ClientChannel& channel, v1::Inference::Stub* stub) {
  const bool json = absl::GetFlag(FLAGS_json);
  grpc::ClientContext context;
  Prepare(channel, &context);
  auto reader = stub->Generate(&context, RequestFromFlags());
  v1::GenerateResponse response;
  v1::GenerateResponse last;
  while (reader->Read(&response)) {
    if (json) {
      std::cout << ToJson(response) << "\n" << std::flush;
    } else {
      std::cout << response.text() << std::flush;
    }
    last = response;
  }
  const grpc::Status status = reader->Finish();
  if (!json) std::cout << "\n";
  if (!status.ok()) return ReportError(status);
  if (!json) {
    std::cerr << "[finish=" << v1::FinishReason_Name(last.finish_reason())
              << " prompt_tokens=" << last.usage().prompt_tokens()
              << " completion_tokens=" << last.usage().completion_tokens()
              << " seed=" << last.seed() << " policy=" << last.policy()
              << "]\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> exit_code =
          moeserve::base::HandleHelpAndVersion(argc, argv, Help())) {
    return *exit_code;
  }
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<ClientChannel> channel = ClientChannel::Create(
      {.target = absl::GetFlag(FLAGS_target),
       .tls_ca_file = absl::GetFlag(FLAGS_tls_ca_file),
       .tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file),
       .tls_key_file = absl::GetFlag(FLAGS_tls_key_file),
       .auth_token_file = absl::GetFlag(FLAGS_auth_token_file)});
  if (!channel.ok()) {
    std::cerr << channel.status().message() << "\n";
    return 2;
  }
  auto stub = v1::Inference::NewStub(channel->channel());
  if (absl::GetFlag(FLAGS_list_models)) return ListModels(*channel, stub.get());
  if (absl::GetFlag(FLAGS_tokenize)) return Tokenize(*channel, stub.get());
  if (absl::GetFlag(FLAGS_unary)) return GenerateUnary(*channel, stub.get());
  return Generate(*channel, stub.get());
}
