// EngineMetrics: the serving metrics of one engine instance, with vLLM's
// meanings and DESIGN.md's names, all labelled `policy` = the engine's name:
// running/waiting gauges, KV-cache usage, TTFT / inter-token / end-to-end /
// queue-time histograms, prompt and generation token counters, finished
// requests by reason, preemptions, and speculative decoding (vLLM's
// spec_decode names and meanings: drafts, draft tokens, accepted tokens,
// accepted tokens per draft position; plus draft and verify seconds).
//
// Owns pointers into the registry (which must outlive it) and the callbacks
// of its gauges, which it removes on destruction. Thread-safe; the hot path
// only touches atomics.
#ifndef MOESERVE_ENGINE_ENGINE_METRICS_H_
#define MOESERVE_ENGINE_ENGINE_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/generation.h"
#include "metrics/registry.h"

namespace moeserve::engine {

// What the gauges read at scrape time.
struct EngineLoad {
  int running = 0;
  int waiting = 0;
  double kv_cache_usage = 0;  // 0..1
};

class EngineMetrics {
 public:
  // `load` runs at scrape time; it must be thread-safe and not call into the
  // registry.
  static absl::StatusOr<std::unique_ptr<EngineMetrics>> Create(
      metrics::Registry* registry, const std::string& engine_name,
      std::function<EngineLoad()> load);
  ~EngineMetrics();

  void ObserveQueueTime(double seconds) { queue_time_->Observe(seconds); }
  void ObserveTimeToFirstToken(double seconds) { ttft_->Observe(seconds); }
  void ObserveInterTokenLatency(double seconds) { itl_->Observe(seconds); }
  void ObserveRequestLatency(double seconds) { e2e_->Observe(seconds); }
  void AddPromptTokens(double n) { prompt_tokens_->Inc(n); }
  void AddGenerationTokens(double n) { generation_tokens_->Inc(n); }
  void CountPreemption() { preemptions_->Inc(); }
  void CountFinished(FinishReason reason);
  // One verification of `num_draft_tokens` drafts of which the first
  // `num_accepted` passed. Step thread only (per-position children are
  // created on first use).
  void CountVerification(int num_draft_tokens, int num_accepted);
  void AddDraftSeconds(double s) { draft_seconds_->Inc(s); }
  void AddVerifySeconds(double s) { verify_seconds_->Inc(s); }

 private:
  EngineMetrics() = default;

  std::string engine_name_;
  metrics::CallbackGaugeFamily* running_ = nullptr;
  metrics::CallbackGaugeFamily* waiting_ = nullptr;
  metrics::CallbackGaugeFamily* kv_usage_ = nullptr;
  metrics::Histogram* queue_time_ = nullptr;
  metrics::Histogram* ttft_ = nullptr;
  metrics::Histogram* itl_ = nullptr;
  metrics::Histogram* e2e_ = nullptr;
  metrics::Counter* prompt_tokens_ = nullptr;
  metrics::Counter* generation_tokens_ = nullptr;
  metrics::Counter* preemptions_ = nullptr;
  // Indexed by FinishReason.
  std::vector<metrics::Counter*> finished_;
  metrics::Counter* num_drafts_ = nullptr;
  metrics::Counter* num_draft_tokens_ = nullptr;
  metrics::Counter* num_accepted_tokens_ = nullptr;
  metrics::Counter* draft_seconds_ = nullptr;
  metrics::Counter* verify_seconds_ = nullptr;
  metrics::CounterFamily* accepted_per_pos_family_ = nullptr;
  std::vector<metrics::Counter*> accepted_per_pos_;  // by position
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_ENGINE_METRICS_H_
