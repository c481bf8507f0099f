#include "server/no_model_host.h"

#include "absl/strings/str_cat.h"

namespace moeserve::server {

absl::Status NoModelHost::CheckReady() const {
  return absl::UnavailableError(absl::StrCat("no model is loaded: ", reason_));
}

absl::StatusOr<v1::TokenizeResponse> NoModelHost::Tokenize(
    const v1::TokenizeRequest& /*request*/) {
  return CheckReady();
}

absl::Status NoModelHost::Generate(const v1::GenerateRequest& /*request*/,
                                   absl::Time /*deadline*/,
                                   GenerateSink* /*sink*/) {
  return CheckReady();
}

}  // namespace moeserve::server
