#include "server/inference_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/caller_identity.h"
#include "server/generate_pump.h"
#include "server/grpc_message.h"
#include "server/grpc_status.h"

namespace moeserve::server {
namespace {

absl::Time DeadlineOf(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

}  // namespace

// A Generate call on gRPC's callback API: the pump does the work; this
// adapts gRPC's reactions to it. Deletes itself in OnDone.
class GenerateStreamReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
      public StreamTransport {
 public:
  GenerateStreamReactor(InferenceService* service,
                        grpc::CallbackServerContext* context,
                        const grpc::ByteBuffer& request)
      : service_(service), pump_(this) {
    pump_.Start(service_->StartCall(*context, request));
  }

  // StreamTransport (called by the pump with its lock held; one write in
  // flight at a time, so one buffer serves them all).
  void StartWrite(const v1::GenerateResponse* response) override {
    write_buffer_ = SerializeResponse(*response);
    grpc::ServerWriteReactor<grpc::ByteBuffer>::StartWrite(&write_buffer_);
  }
  void Finish(const absl::Status& status) override {
    grpc::ServerWriteReactor<grpc::ByteBuffer>::Finish(
        service_->Finish("Generate", status));
  }

  // gRPC reactions.
  void OnWriteDone(bool ok) override { pump_.OnWriteDone(ok); }
  void OnCancel() override { pump_.OnCancel(); }
  void OnDone() override {
    pump_.Detach();
    InferenceService* service = service_;
    delete this;
    service->CloseCall();  // last: a drain may end with it
  }

 private:
  InferenceService* const service_;
  grpc::ByteBuffer write_buffer_;
  GenerateStreamPump pump_;
};

// A GenerateUnary call on gRPC's callback API, as above.
class GenerateUnaryReactor final : public grpc::ServerUnaryReactor,
                                   public UnaryTransport {
 public:
  GenerateUnaryReactor(InferenceService* service,
                       grpc::CallbackServerContext* context,
                       const grpc::ByteBuffer& request,
                       grpc::ByteBuffer* response)
      : service_(service), raw_response_(response), pump_(this, &response_) {
    pump_.Start(service_->StartCall(*context, request));
  }

  void Finish(const absl::Status& status) override {
    if (status.ok()) *raw_response_ = SerializeResponse(response_);
    grpc::ServerUnaryReactor::Finish(service_->Finish("GenerateUnary", status));
  }
  void OnCancel() override { pump_.OnCancel(); }
  void OnDone() override {
    pump_.Detach();
    InferenceService* service = service_;
    delete this;
    service->CloseCall();
  }

 private:
  InferenceService* const service_;
  grpc::ByteBuffer* const raw_response_;  // gRPC's, sent on Finish
  v1::GenerateUnaryResponse response_;    // what the pump fills
  GenerateUnaryPump pump_;
};

InferenceService::InferenceService(ModelHost* host, RequestLimits limits,
                                   ServerMetrics* metrics, int max_open_calls)
    : host_(host),
      limits_(limits),
      metrics_(metrics),
      max_open_calls_(std::max(1, max_open_calls)) {}

bool InferenceService::WaitForOpenCalls(absl::Time deadline) {
  base::MutexLock lock(&calls_mu_);
  const absl::Duration left = std::clamp(
      deadline - absl::Now(), absl::ZeroDuration(), absl::Hours(24 * 365));
  return no_calls_.WaitFor(&calls_mu_, absl::ToChronoNanoseconds(left),
                           [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_mu_) {
                             return open_calls_ == 0;
                           });
}

int InferenceService::open_calls() const {
  base::MutexLock lock(&calls_mu_);
  return open_calls_;
}

void InferenceService::CloseCall() {
  base::MutexLock lock(&calls_mu_);
  if (--open_calls_ == 0) no_calls_.SignalAll();
}

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

absl::StatusOr<std::unique_ptr<GenerateCall>> InferenceService::StartCall(
    const grpc::CallbackServerContext& context, const grpc::ByteBuffer& raw) {
  {
    // Every reactor counts, refused or not, until its OnDone.
    base::MutexLock lock(&calls_mu_);
    if (open_calls_++ >= max_open_calls_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many open Generate calls (--max_open_streams=", max_open_calls_,
          "); retry later"));
    }
  }
  v1::GenerateRequest request;
  if (auto st = ParseRequest(raw, &request); !st.ok()) return st;
  if (auto st = Admit(request); !st.ok()) return st;
  return host_->StartGenerate(request, DeadlineOf(context), CallerOf(context));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new GenerateStreamReactor(this, context, *request);
}

grpc::ServerUnaryReactor* InferenceService::GenerateUnary(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return new GenerateUnaryReactor(this, context, *request, response);
}

namespace {

// A unary call answered inline, on the thread gRPC gave the handler.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::Abort(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Answer(context, DoAbort(*context, *request, response));
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Answer(context, DoTokenize(*request, response));
}

grpc::ServerUnaryReactor* InferenceService::ListModels(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return Answer(context, DoListModels(*request, response));
}

grpc::Status InferenceService::DoListModels(const grpc::ByteBuffer& raw,
                                            grpc::ByteBuffer* response) {
  v1::ListModelsRequest request;
  if (auto st = ParseRequest(raw, &request); !st.ok()) {
    return Finish("ListModels", st);
  }
  *response = SerializeResponse(host_->ListModels());
  return Finish("ListModels", absl::OkStatus());
}

grpc::Status InferenceService::DoAbort(
    const grpc::CallbackServerContext& context, const grpc::ByteBuffer& raw,
    grpc::ByteBuffer* response) {
  v1::AbortRequest request;
  if (auto st = ParseRequest(raw, &request); !st.ok()) {
    return Finish("Abort", st);
  }
  if (request.request_id().empty()) {
    return Finish("Abort",
                  absl::InvalidArgumentError("request_id: must not be empty"));
  }
  // Only the caller's own requests: another client's id is "not found".
  v1::AbortResponse result;
  result.set_found(host_->Abort(CallerOf(context), request.request_id()));
  *response = SerializeResponse(result);
  return Finish("Abort", absl::OkStatus());
}

grpc::Status InferenceService::DoTokenize(const grpc::ByteBuffer& raw,
                                          grpc::ByteBuffer* response) {
  v1::TokenizeRequest request;
  if (auto st = ParseRequest(raw, &request); !st.ok()) {
    return Finish("Tokenize", st);
  }
  if (auto st = ValidateTokenizeRequest(request, limits_); !st.ok()) {
    return Finish("Tokenize", st);
  }
  if (auto st = CheckAccepting(); !st.ok()) return Finish("Tokenize", st);
  absl::StatusOr<v1::TokenizeResponse> result = host_->Tokenize(request);
  if (!result.ok()) return Finish("Tokenize", result.status());
  *response = SerializeResponse(*result);
  return Finish("Tokenize", absl::OkStatus());
}

}  // namespace moeserve::server
