#include "tools/soak/tally.h"

#include "absl/strings/str_cat.h"
#include "base/grpc_code_name.h"

namespace moeserve::soak {

const char* ActionName(Action action) {
  switch (action) {
    case Action::kStream:
      return "stream";
    case Action::kCancel:
      return "cancel";
    case Action::kDeadline:
      return "deadline";
    case Action::kTimeLimit:
      return "time_limit";
    case Action::kUnary:
      return "unary";
    case Action::kAbort:
      return "abort";
    case Action::kTokenize:
      return "tokenize";
    case Action::kInvalid:
      return "invalid";
    case Action::kDisconnect:
      return "disconnect";
    case Action::kCount:
      break;
  }
  return "?";
}

void Tally::Record(Action action, const grpc::Status& status, bool expected,
                   int64_t tokens) {
  const int code = static_cast<int>(status.error_code());
  base::MutexLock lock(&mu_);
  ++calls_;
  tokens_ += tokens;
  if (code >= 0 && code < kCodes) ++counts_[static_cast<int>(action)][code];
  if (expected || status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    return;
  }
  ++unexpected_;
  if (samples_.size() < kMaxSamples) {
    samples_.push_back(absl::StrCat(ActionName(action), ": ",
                                    GrpcCodeName(status.error_code()), ": ",
                                    status.error_message()));
  }
}

int64_t Tally::calls() const {
  base::MutexLock lock(&mu_);
  return calls_;
}

int64_t Tally::unexpected() const {
  base::MutexLock lock(&mu_);
  return unexpected_;
}

int64_t Tally::tokens() const {
  base::MutexLock lock(&mu_);
  return tokens_;
}

nlohmann::json Tally::ToJson() const {
  base::MutexLock lock(&mu_);
  nlohmann::json by_action = nlohmann::json::object();
  for (int a = 0; a < kActions; ++a) {
    nlohmann::json codes = nlohmann::json::object();
    for (int c = 0; c < kCodes; ++c) {
      if (counts_[a][c] != 0) {
        codes[GrpcCodeName(static_cast<grpc::StatusCode>(c))] = counts_[a][c];
      }
    }
    by_action[ActionName(static_cast<Action>(a))] = std::move(codes);
  }
  return {{"calls", calls_},
          {"unexpected", unexpected_},
          {"tokens", tokens_},
          {"by_action", std::move(by_action)},
          {"unexpected_samples", samples_}};
}

}  // namespace moeserve::soak
