#include "server/inference_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/grpc_status.h"

namespace moeserve::server {
namespace {

absl::Time DeadlineOf(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

// Streams into a gRPC ServerWriter.
class StreamSink final : public GenerateSink {
 public:
  StreamSink(grpc::ServerContext* context,
             grpc::ServerWriter<v1::GenerateResponse>* writer)
      : context_(context), writer_(writer) {}
  bool Send(const v1::GenerateResponse& response) override {
    return !context_->IsCancelled() && writer_->Write(response);
  }
  bool IsCancelled() const override { return context_->IsCancelled(); }

 private:
  grpc::ServerContext* const context_;
  grpc::ServerWriter<v1::GenerateResponse>* const writer_;
};

// Gathers the stream into one unary response.
class CollectingSink final : public GenerateSink {
 public:
  CollectingSink(grpc::ServerContext* context,
                 v1::GenerateUnaryResponse* response)
      : context_(context), out_(response) {}
  bool Send(const v1::GenerateResponse& r) override {
    out_->set_request_id(r.request_id());
    out_->mutable_token_ids()->Add(r.token_ids().begin(), r.token_ids().end());
    out_->mutable_text()->append(r.text());
    for (const auto& lp : r.logprobs()) *out_->add_logprobs() = lp;
    if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      out_->set_finish_reason(r.finish_reason());
      *out_->mutable_usage() = r.usage();
      out_->set_seed(r.seed());
      out_->set_policy(r.policy());
      out_->set_error_message(r.error_message());
    }
    return !context_->IsCancelled();
  }
  bool IsCancelled() const override { return context_->IsCancelled(); }

 private:
  grpc::ServerContext* const context_;
  v1::GenerateUnaryResponse* const out_;
};

}  // namespace

InferenceService::InferenceService(ModelHost* host, RequestLimits limits,
                                   ServerMetrics* metrics)
    : host_(host), limits_(limits), metrics_(metrics) {}

grpc::Status InferenceService::Finish(const std::string& method,
                                      const absl::Status& status) {
  grpc::Status result = ToGrpcStatus(status);
  metrics_->CountRpc(method, result);
  return result;
}

absl::Status InferenceService::CheckAccepting() const {
  if (draining_.load()) {
    return absl::UnavailableError("server is shutting down (draining)");
  }
  return host_->CheckReady();
}

absl::Status InferenceService::Admit(const v1::GenerateRequest& request) const {
  if (auto st = ValidateGenerateRequest(request, limits_); !st.ok()) return st;
  if (!request.policy().empty()) {
    const std::vector<std::string> names = host_->EngineNames();
    if (std::find(names.begin(), names.end(), request.policy()) ==
        names.end()) {
      return absl::NotFoundError(
          absl::StrCat("policy: no engine named '", request.policy(),
                       "'; this server runs: ", absl::StrJoin(names, ", ")));
    }
  }
  return CheckAccepting();
}

absl::Status InferenceService::RunGenerate(grpc::ServerContext* context,
                                           const v1::GenerateRequest& request,
                                           GenerateSink* sink) {
  if (auto st = Admit(request); !st.ok()) return st;
  return host_->Generate(request, DeadlineOf(*context), sink);
}

grpc::Status InferenceService::Generate(
    grpc::ServerContext* context, const v1::GenerateRequest* request,
    grpc::ServerWriter<v1::GenerateResponse>* writer) {
  StreamSink sink(context, writer);
  return Finish("Generate", RunGenerate(context, *request, &sink));
}

grpc::Status InferenceService::GenerateUnary(
    grpc::ServerContext* context, const v1::GenerateRequest* request,
    v1::GenerateUnaryResponse* response) {
  CollectingSink sink(context, response);
  return Finish("GenerateUnary", RunGenerate(context, *request, &sink));
}

grpc::Status InferenceService::Abort(grpc::ServerContext* /*context*/,
                                     const v1::AbortRequest* request,
                                     v1::AbortResponse* response) {
  if (request->request_id().empty()) {
    return Finish("Abort",
                  absl::InvalidArgumentError("request_id: must not be empty"));
  }
  response->set_found(host_->Abort(request->request_id()));
  return Finish("Abort", absl::OkStatus());
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* /*context*/,
                                        const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  if (auto st = ValidateTokenizeRequest(*request, limits_); !st.ok()) {
    return Finish("Tokenize", st);
  }
  if (auto st = CheckAccepting(); !st.ok()) return Finish("Tokenize", st);
  absl::StatusOr<v1::TokenizeResponse> result = host_->Tokenize(*request);
  if (!result.ok()) return Finish("Tokenize", result.status());
  *response = *std::move(result);
  return Finish("Tokenize", absl::OkStatus());
}

grpc::Status InferenceService::ListModels(
    grpc::ServerContext* /*context*/, const v1::ListModelsRequest* /*request*/,
    v1::ListModelsResponse* response) {
  *response = host_->ListModels();
  return Finish("ListModels", absl::OkStatus());
}

}  // namespace moeserve::server
