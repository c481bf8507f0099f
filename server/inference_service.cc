#include "server/inference_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/mutex.h"
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

// The GenerateCall a reactor owns, shared with the threads gRPC runs its
// reactions on and the engine thread that runs the listener. Reactions
// reach the call only through here, under mu_, so every access is ordered
// by a lock TSan and clang can see. Lock order: the stream's listener lock
// (held while the listener runs), then mu_, then the stream's own lock.
class ReactorCall {
 public:
  // Owns `call` and registers `on_ready` on it; `on_ready` may run at once.
  void Start(std::unique_ptr<GenerateCall> call, std::function<void()> on_ready)
      ABSL_LOCKS_EXCLUDED(mu) {
    GenerateCall* raw = call.get();
    {
      base::MutexLock lock(&mu);
      call_ = std::move(call);
    }
    raw->SetListener(std::move(on_ready));  // the pointer stays valid: only
                                            // the reactor's destructor frees it
  }

  // OnCancel: the engine drops the request at its next step (finish reason
  // CANCELLED, or DEADLINE past the deadline) and its last message follows.
  void CancelLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    client_gone_ = true;
    if (call_ != nullptr) call_->Cancel();
  }

  // OnDone: after this the listener never runs again.
  void Detach() ABSL_LOCKS_EXCLUDED(mu) {
    GenerateCall* raw;
    {
      base::MutexLock lock(&mu);
      raw = call_.get();
    }
    if (raw != nullptr) raw->SetListener(nullptr);  // not under mu: lock order
  }

  bool NextLocked(v1::GenerateResponse* response, absl::Status* final_status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return call_->Next(response, final_status);
  }
  bool client_gone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return client_gone_;
  }

  base::Mutex mu;

 private:
  std::unique_ptr<GenerateCall> call_ ABSL_GUARDED_BY(mu);
  bool client_gone_ ABSL_GUARDED_BY(mu) = false;
};

// Streams one generation: each message is written when the engine pushes it
// (one write in flight at a time, as gRPC requires); Finish after the last.
// Deletes itself in OnDone, after detaching from the stream's listener.
class GenerateStreamReactor final
    : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateStreamReactor(InferenceService* service,
                        grpc::CallbackServerContext* context,
                        const v1::GenerateRequest& request)
      : service_(service) {
    absl::StatusOr<std::unique_ptr<GenerateCall>> call =
        service_->StartCall(*context, request);
    if (!call.ok()) {
      Finish(service_->Finish("Generate", call.status()));
      return;
    }
    call_.Start(*std::move(call), [this] { OnReady(); });
  }

  void OnWriteDone(bool ok) override {
    base::MutexLock lock(&call_.mu);
    writing_ = false;
    if (!ok) call_.CancelLocked();  // the client is gone
    WriteNextLocked();
  }

  void OnCancel() override {
    base::MutexLock lock(&call_.mu);
    call_.CancelLocked();
  }

  void OnDone() override {
    call_.Detach();
    {
      // Every reaction's critical section happens before the delete (TSan
      // cannot see gRPC's own ordering: Debian's gRPC is uninstrumented).
      base::MutexLock lock(&call_.mu);
    }
    delete this;
  }

 private:
  void OnReady() {
    base::MutexLock lock(&call_.mu);
    WriteNextLocked();
  }

  // Writes the next ready message, or ends the RPC after the last one.
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(call_.mu) {
    if (writing_ || finished_) return;
    if (last_written_) {
      FinishLocked(call_.client_gone()
                       ? absl::CancelledError("client went away")
                       : absl::OkStatus());
      return;
    }
    absl::Status final_status;
    while (call_.NextLocked(&response_, &final_status)) {
      const bool last =
          response_.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
      if (last && !final_status.ok()) {  // past the deadline: nobody reads
        FinishLocked(final_status);
        return;
      }
      if (call_.client_gone()) {  // drain what the engine still sends
        if (!last) continue;
        FinishLocked(absl::CancelledError("client went away"));
        return;
      }
      last_written_ = last;
      writing_ = true;
      StartWrite(&response_);
      return;
    }
  }

  void FinishLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(call_.mu) {
    finished_ = true;
    Finish(service_->Finish("Generate", status));
  }

  InferenceService* const service_;
  ReactorCall call_;
  v1::GenerateResponse response_ ABSL_GUARDED_BY(call_.mu);
  bool writing_ ABSL_GUARDED_BY(call_.mu) = false;
  bool last_written_ ABSL_GUARDED_BY(call_.mu) = false;
  bool finished_ ABSL_GUARDED_BY(call_.mu) = false;
};

// Gathers one generation into a unary response; Finish on the last message.
class GenerateUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  GenerateUnaryReactor(InferenceService* service,
                       grpc::CallbackServerContext* context,
                       const v1::GenerateRequest& request,
                       v1::GenerateUnaryResponse* response)
      : service_(service), out_(response) {
    absl::StatusOr<std::unique_ptr<GenerateCall>> call =
        service_->StartCall(*context, request);
    if (!call.ok()) {
      Finish(service_->Finish("GenerateUnary", call.status()));
      return;
    }
    call_.Start(*std::move(call), [this] { OnReady(); });
  }

  void OnCancel() override {
    base::MutexLock lock(&call_.mu);
    call_.CancelLocked();
  }

  void OnDone() override {
    call_.Detach();
    {
      // Every reaction's critical section happens before the delete (TSan
      // cannot see gRPC's own ordering: Debian's gRPC is uninstrumented).
      base::MutexLock lock(&call_.mu);
    }
    delete this;
  }

 private:
  void OnReady() {
    base::MutexLock lock(&call_.mu);
    if (finished_) return;
    v1::GenerateResponse r;
    absl::Status final_status;
    while (call_.NextLocked(&r, &final_status)) {
      Append(r);
      if (r.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) continue;
      finished_ = true;
      if (final_status.ok() && call_.client_gone()) {
        final_status = absl::CancelledError("client went away");
      }
      Finish(service_->Finish("GenerateUnary", final_status));
      return;
    }
  }

  void Append(const v1::GenerateResponse& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(call_.mu) {
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
  }

  InferenceService* const service_;
  v1::GenerateUnaryResponse* const out_;
  ReactorCall call_;
  bool finished_ ABSL_GUARDED_BY(call_.mu) = false;
};

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

absl::StatusOr<std::unique_ptr<GenerateCall>> InferenceService::StartCall(
    const grpc::CallbackServerContext& context,
    const v1::GenerateRequest& request) {
  if (auto st = Admit(request); !st.ok()) return st;
  return host_->StartGenerate(request, DeadlineOf(context));
}

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateStreamReactor(this, context, *request);
}

grpc::ServerUnaryReactor* InferenceService::GenerateUnary(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request,
    v1::GenerateUnaryResponse* response) {
  return new GenerateUnaryReactor(this, context, *request, response);
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
