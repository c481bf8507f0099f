#include "tools/loadgen/level_runner.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/grpc_code_name.h"
#include "base/mutex.h"
#include "grpcpp/client_context.h"

namespace moeserve::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

// Collects the samples of one level from its worker threads.
class SampleSink {
 public:
  void Add(RequestSample sample) ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    samples_.push_back(std::move(sample));
  }
  // The samples added so far; the sink is left empty.
  std::vector<RequestSample> Take() ABSL_LOCKS_EXCLUDED(mu_) {
    base::MutexLock lock(&mu_);
    return std::exchange(samples_, {});
  }

 private:
  base::Mutex mu_;
  std::vector<RequestSample> samples_ ABSL_GUARDED_BY(mu_);
};

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

moeserve::v1::GenerateRequest GreedyRequest(const LevelOptions& options) {
  moeserve::v1::GenerateRequest request;
  request.set_policy(options.policy);
  auto* sampling = request.mutable_sampling();
  sampling->set_max_new_tokens(options.max_new_tokens);
  sampling->set_temperature(0);  // greedy: identical work every run
  sampling->set_seed(0);
  sampling->set_ignore_eos(options.ignore_eos);
  return request;
}

}  // namespace

moeserve::v1::GenerateRequest MakeRequest(const std::string& prompt,
                                          const LevelOptions& options) {
  moeserve::v1::GenerateRequest request = GreedyRequest(options);
  request.set_prompt(prompt);
  return request;
}

moeserve::v1::GenerateRequest MakeTokenRequest(
    const std::vector<uint32_t>& prompt_token_ids,
    const LevelOptions& options) {
  moeserve::v1::GenerateRequest request = GreedyRequest(options);
  request.mutable_prompt_token_ids()->Add(prompt_token_ids.begin(),
                                          prompt_token_ids.end());
  return request;
}

RequestSample RunOneRequest(moeserve::v1::Inference::Stub& stub,
                            const moeserve::v1::GenerateRequest& request,
                            double deadline_s) {
  RequestSample sample;
  grpc::ClientContext context;
  context.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
  const Clock::time_point start = Clock::now();
  Clock::time_point first;
  Clock::time_point last;
  auto reader = stub.Generate(&context, request);
  moeserve::v1::GenerateResponse response;
  bool finished_with_error = false;
  while (reader->Read(&response)) {
    if (response.token_ids_size() > 0) {
      const Clock::time_point now = Clock::now();
      if (sample.tokens == 0) first = now;
      last = now;
      sample.tokens += response.token_ids_size();
    }
    if (response.finish_reason() == moeserve::v1::ERROR) {
      finished_with_error = true;
    }
  }
  const grpc::Status status = reader->Finish();
  sample.status_code = GrpcCodeName(status.error_code());
  if (status.ok() && finished_with_error) sample.status_code = "FINISH_ERROR";
  sample.ok = status.ok() && !finished_with_error && sample.tokens > 0;
  if (status.ok() && !finished_with_error && sample.tokens == 0) {
    sample.status_code = "NO_TOKENS";
  }
  if (sample.tokens > 0) sample.ttft_s = Seconds(first - start);
  if (sample.tokens > 1) {
    sample.tpot_s = Seconds(last - first) / (sample.tokens - 1);
  }
  return sample;
}

absl::StatusOr<LevelSummary> RunLevel(
    moeserve::v1::Inference::Stub& stub,
    const std::vector<moeserve::v1::GenerateRequest>& requests,
    const LevelOptions& options) {
  if (options.concurrency <= 0 || options.requests <= 0 || requests.empty()) {
    return absl::InvalidArgumentError(
        "RunLevel: concurrency, requests and prompts must be positive");
  }
  std::atomic<int> next{0};
  std::atomic<bool> time_capped{false};
  SampleSink sink;
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop_issuing =
      start + std::chrono::microseconds(
                  static_cast<int64_t>(options.max_seconds * 1e6));
  auto worker = [&] {
    while (true) {
      if (Clock::now() >= stop_issuing) {
        time_capped = true;
        return;
      }
      const int i = next.fetch_add(1);
      if (i >= options.requests) return;
      RequestSample sample = RunOneRequest(stub, requests[i % requests.size()],
                                           options.request_deadline_s);
      sink.Add(std::move(sample));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < options.concurrency; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  const double wall_s = Seconds(Clock::now() - start);
  return Summarize(options.concurrency, options.requests,
                   time_capped.load() && next.load() < options.requests, wall_s,
                   sink.Take());
}

}  // namespace moeserve::loadgen
