// One soak client: a thread that makes each kind of call once, then until
// told to stop picks a kind of call at random (weighted by
// SoakClientOptions::mix) and makes it against the server, with
// randomised sampling parameters, and records how each call ended:
//
//   stream      Generate read to the end                  -> OK
//   cancel      Generate, client cancels after 1-3 msgs   -> CANCELLED or OK
//   deadline    Generate, 30-300 ms gRPC deadline         -> DEADLINE_EXCEEDED
//   or OK time_limit  Generate, 20-200 ms time_limit_ms         -> OK
//   (TIME_LIMIT or done) unary       GenerateUnary -> OK abort       Generate
//   with a client request_id, Abort(id) after the
//               first message                             -> OK, CANCELLED or
//               ABORTED
//   tokenize    Tokenize encode then decode               -> OK
//   invalid     Generate with sampling.top_p = 1.5        -> INVALID_ARGUMENT
//   disconnect  a new connection opens a stream and is torn down without
//               reading or cancelling                     -> (not judged)
//
// RESOURCE_EXHAUSTED (queue full) is acceptable for every call (shedding);
// anything else outside the expected set is counted as unexpected.
#ifndef MOESERVE_TOOLS_SOAK_SOAK_CLIENT_H_
#define MOESERVE_TOOLS_SOAK_SOAK_CLIENT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "grpcpp/channel.h"
#include "proto/moeserve.grpc.pb.h"
#include "tools/soak/tally.h"

namespace moeserve::soak {

struct SoakClientOptions {
  std::string target;            // for the disconnect action's new channels
  std::string bearer_token;      // sent as "authorization: Bearer ..." if set
  uint32_t max_new_tokens = 48;  // upper bound of the random lengths
  // Relative weights of the actions, indexed by Action.
  std::array<int, static_cast<int>(Action::kCount)> mix = {40, 10, 8, 6, 8,
                                                           8,  10, 5, 5};
};

class SoakClient {
 public:
  SoakClient(std::shared_ptr<grpc::Channel> channel, SoakClientOptions options,
             uint64_t seed, int client_index, Tally* tally);

  // Makes calls until `stop` is true; each call is bounded (deadlines), so
  // this returns within a few seconds of `stop`.
  void Run(const std::atomic<bool>& stop);

  // One call of `action`; public for the tool's own test.
  void RunOnce(Action action);

 private:
  v1::GenerateRequest RandomRequest();
  void AddAuth(grpc::ClientContext* context) const;
  void StreamCall(Action action);
  void AbortCall();
  void UnaryCall();
  void TokenizeCall();
  void DisconnectCall();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  const SoakClientOptions options_;
  const int client_index_;
  Tally* const tally_;
  std::mt19937_64 rng_;
  uint64_t next_id_ = 0;
};

}  // namespace moeserve::soak

#endif  // MOESERVE_TOOLS_SOAK_SOAK_CLIENT_H_
