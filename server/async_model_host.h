// AsyncModelHost: loads the model in the background while the gRPC server is
// already up, so health answers NOT_SERVING and Generate answers UNAVAILABLE
// ("model is loading") until the model is loaded and warmed up, and carry the
// reason when loading failed. Once loaded, every call goes to the loaded
// host.
//
// Owns the loading thread and the loaded host. Thread-safe.
//
// A load cannot be interrupted (a file read may block for good), so the
// destructor joins the loader only when it has finished: a process shutting
// down mid-load calls StopWaiting() and exits without destroying this
// (server/main.cc).
#ifndef MOESERVE_SERVER_ASYNC_MODEL_HOST_H_
#define MOESERVE_SERVER_ASYNC_MODEL_HOST_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "server/model_host.h"

namespace moeserve::server {

class AsyncModelHost final : public ModelHost {
 public:
  using Loader = std::function<absl::StatusOr<std::unique_ptr<ModelHost>>()>;

  // `engine_names`: the configured engines (so an unknown policy is
  // NOT_FOUND even before the model is there). Starts `load` at once.
  AsyncModelHost(std::vector<std::string> engine_names, Loader load);
  ~AsyncModelHost() override;

  // Blocks until loading has finished, or StopWaiting() was called
  // (CANCELLED); returns the load's outcome.
  absl::Status WaitUntilLoaded() ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every WaitUntilLoaded, now and later, with CANCELLED if the load
  // has not finished.
  void StopWaiting() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether loading has finished (either way).
  bool LoadFinished() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status CheckReady() const override;
  std::vector<std::string> EngineNames() const override {
    return engine_names_;
  }
  v1::ListModelsResponse ListModels() const override;
  absl::StatusOr<v1::TokenizeResponse> Tokenize(
      const v1::TokenizeRequest& request) override;
  absl::StatusOr<std::unique_ptr<GenerateCall>> StartGenerate(
      const v1::GenerateRequest& request, absl::Time deadline,
      std::string_view caller) override;
  bool Abort(std::string_view caller, std::string_view request_id) override;

 private:
  // The loaded host, or null with the reason why there is none.
  ModelHost* Loaded(absl::Status* why) const ABSL_LOCKS_EXCLUDED(mu_);

  const std::vector<std::string> engine_names_;
  // base::Mutex: gRPC threads read what the loader thread wrote, and TSan
  // sees std::mutex, not Debian's uninstrumented absl::Mutex.
  mutable base::Mutex mu_;
  base::CondVar loaded_;  // signalled once done_ is set
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_waiting_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status load_status_ ABSL_GUARDED_BY(mu_);
  // Set once (never reset before destruction), so a raw pointer read under
  // mu_ stays valid afterwards.
  std::unique_ptr<ModelHost> host_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace moeserve::server

#endif  // MOESERVE_SERVER_ASYNC_MODEL_HOST_H_
