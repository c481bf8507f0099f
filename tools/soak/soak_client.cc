#include "tools/soak/soak_client.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace moeserve::soak {
namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

// Every call gets a deadline, so a stuck server shows as DEADLINE_EXCEEDED
// (unexpected for most actions) instead of a hung soak.
constexpr milliseconds kCallBound{30'000};

constexpr const char* kPrompts[] = {
    "The quick brown fox",
    "Once upon a time, in a land far away,",
    "def fibonacci(n):",
    "Mixture-of-experts models route each token to",
    "Tokyo 東京 is the capital of Japan; 🙂",
    "  leading spaces and\ttabs\n\nand blank lines",
    "1234567890 + 987654321 =",
};

bool Is(const grpc::Status& status, grpc::StatusCode code) {
  return status.error_code() == code;
}

}  // namespace

SoakClient::SoakClient(std::shared_ptr<grpc::Channel> channel,
                       SoakClientOptions options, uint64_t seed,
                       int client_index, Tally* tally)
    : channel_(std::move(channel)),
      stub_(v1::Inference::NewStub(channel_)),
      options_(std::move(options)),
      client_index_(client_index),
      tally_(tally),
      rng_(seed) {}

void SoakClient::Run(const std::atomic<bool>& stop) {
  std::discrete_distribution<int> pick(options_.mix.begin(),
                                       options_.mix.end());
  // Every action with a non-zero weight once first, so that even a short
  // soak covers each kind of call; then the weighted random mix.
  for (int a = 0; a < static_cast<int>(Action::kCount); ++a) {
    if (stop.load(std::memory_order_relaxed)) return;
    if (options_.mix[a] > 0) RunOnce(static_cast<Action>(a));
  }
  while (!stop.load(std::memory_order_relaxed)) {
    RunOnce(static_cast<Action>(pick(rng_)));
  }
}

void SoakClient::RunOnce(Action action) {
  switch (action) {
    case Action::kStream:
    case Action::kCancel:
    case Action::kDeadline:
    case Action::kTimeLimit:
    case Action::kInvalid:
      StreamCall(action);
      return;
    case Action::kUnary:
      UnaryCall();
      return;
    case Action::kAbort:
      AbortCall();
      return;
    case Action::kTokenize:
      TokenizeCall();
      return;
    case Action::kDisconnect:
      DisconnectCall();
      return;
    case Action::kCount:
      return;
  }
}

void SoakClient::AddAuth(grpc::ClientContext* context) const {
  if (!options_.bearer_token.empty()) {
    context->AddMetadata("authorization",
                         absl::StrCat("Bearer ", options_.bearer_token));
  }
}

v1::GenerateRequest SoakClient::RandomRequest() {
  std::uniform_int_distribution<int> prompt(0, std::size(kPrompts) - 1);
  std::uniform_int_distribution<uint32_t> length(1, options_.max_new_tokens);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  v1::GenerateRequest request;
  request.set_prompt(kPrompts[prompt(rng_)]);
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_max_new_tokens(length(rng_));
  if (unit(rng_) < 0.5f) {  // half greedy, half sampled with mixed knobs
    sampling->set_temperature(0.2f + 1.3f * unit(rng_));
    if (unit(rng_) < 0.5f) sampling->set_top_p(0.5f + 0.5f * unit(rng_));
    if (unit(rng_) < 0.3f)
      sampling->set_top_k(1 + static_cast<int>(rng_() % 50));
    if (unit(rng_) < 0.3f) sampling->set_min_p(0.05f * unit(rng_));
    if (unit(rng_) < 0.5f) sampling->set_seed(rng_());
  }
  if (unit(rng_) < 0.2f) sampling->set_repetition_penalty(1.0f + unit(rng_));
  if (unit(rng_) < 0.2f) sampling->set_presence_penalty(unit(rng_));
  if (unit(rng_) < 0.1f) sampling->add_stop("\n");
  if (unit(rng_) < 0.2f) sampling->set_ignore_eos(true);
  if (unit(rng_) < 0.2f) request.set_logprobs(1 + rng_() % 5);
  return request;
}

void SoakClient::StreamCall(Action action) {
  v1::GenerateRequest request = RandomRequest();
  grpc::ClientContext context;
  AddAuth(&context);
  std::uniform_int_distribution<int> ms(30, 300);
  context.set_deadline(system_clock::now() + (action == Action::kDeadline
                                                  ? milliseconds(ms(rng_))
                                                  : kCallBound));
  if (action == Action::kTimeLimit) {
    request.set_time_limit_ms(20 + rng_() % 180);
    request.mutable_sampling()->set_max_new_tokens(options_.max_new_tokens);
  }
  if (action == Action::kInvalid) request.mutable_sampling()->set_top_p(1.5f);
  const int cancel_after = 1 + static_cast<int>(rng_() % 3);

  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  v1::GenerateResponse response;
  int64_t tokens = 0;
  int messages = 0;
  while (reader->Read(&response)) {
    tokens += response.token_ids_size();
    if (action == Action::kCancel && ++messages == cancel_after) {
      context.TryCancel();
    }
  }
  const grpc::Status status = reader->Finish();
  bool expected = false;
  switch (action) {
    case Action::kStream:
    case Action::kTimeLimit:
      expected = status.ok();
      break;
    case Action::kCancel:
      expected = status.ok() || Is(status, grpc::StatusCode::CANCELLED);
      break;
    case Action::kDeadline:
      expected = status.ok() || Is(status, grpc::StatusCode::DEADLINE_EXCEEDED);
      break;
    case Action::kInvalid:
      expected = Is(status, grpc::StatusCode::INVALID_ARGUMENT);
      break;
    default:
      break;
  }
  tally_->Record(action, status, expected, tokens);
}

void SoakClient::AbortCall() {
  v1::GenerateRequest request = RandomRequest();
  request.mutable_sampling()->set_max_new_tokens(options_.max_new_tokens);
  request.set_request_id(
      absl::StrCat("soak-", client_index_, "-", next_id_++, "-", rng_()));
  grpc::ClientContext context;
  AddAuth(&context);
  context.set_deadline(system_clock::now() + kCallBound);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  v1::GenerateResponse response;
  int64_t tokens = 0;
  bool aborted = false;
  while (reader->Read(&response)) {
    tokens += response.token_ids_size();
    if (!aborted) {
      aborted = true;
      grpc::ClientContext abort_context;
      AddAuth(&abort_context);
      abort_context.set_deadline(system_clock::now() + kCallBound);
      v1::AbortRequest abort;
      abort.set_request_id(request.request_id());
      v1::AbortResponse abort_response;
      const grpc::Status abort_status =
          stub_->Abort(&abort_context, abort, &abort_response);
      if (!abort_status.ok()) {
        tally_->Record(Action::kAbort, abort_status, false, 0);
      }
    }
  }
  const grpc::Status status = reader->Finish();
  tally_->Record(Action::kAbort, status,
                 status.ok() || Is(status, grpc::StatusCode::CANCELLED) ||
                     Is(status, grpc::StatusCode::ABORTED),
                 tokens);
}

void SoakClient::UnaryCall() {
  v1::GenerateRequest request = RandomRequest();
  grpc::ClientContext context;
  AddAuth(&context);
  context.set_deadline(system_clock::now() + kCallBound);
  v1::GenerateUnaryResponse response;
  const grpc::Status status =
      stub_->GenerateUnary(&context, request, &response);
  tally_->Record(Action::kUnary, status, status.ok(),
                 response.token_ids_size());
}

void SoakClient::TokenizeCall() {
  std::uniform_int_distribution<int> prompt(0, std::size(kPrompts) - 1);
  v1::TokenizeRequest encode;
  encode.set_text(kPrompts[prompt(rng_)]);
  encode.set_add_bos(rng_() % 2 == 0);
  v1::TokenizeResponse encoded;
  grpc::ClientContext context;
  AddAuth(&context);
  context.set_deadline(system_clock::now() + kCallBound);
  grpc::Status status = stub_->Tokenize(&context, encode, &encoded);
  if (status.ok() && encoded.token_ids_size() > 0) {
    v1::TokenizeRequest decode;
    *decode.mutable_token_ids() = encoded.token_ids();
    v1::TokenizeResponse decoded;
    grpc::ClientContext decode_context;
    AddAuth(&decode_context);
    decode_context.set_deadline(system_clock::now() + kCallBound);
    status = stub_->Tokenize(&decode_context, decode, &decoded);
  }
  tally_->Record(Action::kTokenize, status, status.ok(), 0);
}

void SoakClient::DisconnectCall() {
  // A channel of its own (a new connection: a unique channel argument keeps
  // gRPC from sharing the subchannel), dropped with the stream open.
  grpc::ChannelArguments arguments;
  arguments.SetInt("moeserve.soak.disconnect", static_cast<int>(next_id_++));
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options_.target, grpc::InsecureChannelCredentials(), arguments);
  std::unique_ptr<v1::Inference::Stub> stub = v1::Inference::NewStub(channel);
  v1::GenerateRequest request = RandomRequest();
  auto context = std::make_unique<grpc::ClientContext>();
  AddAuth(context.get());
  context->set_deadline(system_clock::now() + kCallBound);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(context.get(), request);
  v1::GenerateResponse response;
  reader->Read(&response);  // the request is in the server
  // Tearing down a reader before Finish is not allowed by the sync API;
  // cancelling and finishing is what a dying client's connection looks like
  // to the server (RST_STREAM), and dropping the channel closes the socket.
  context->TryCancel();
  const grpc::Status status = reader->Finish();
  reader.reset();
  stub.reset();
  channel.reset();
  tally_->Record(Action::kDisconnect, status, true, 0);
}

}  // namespace moeserve::soak
