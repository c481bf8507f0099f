#include "engine/engine_metrics.h"

#include <iterator>
#include <string>
#include <utility>

namespace moeserve::engine {
namespace {

// Label values of moeserve_request_success_total{finished_reason}, indexed
// by FinishReason (kNone never finishes a request).
constexpr const char* kReasonNames[] = {"none",   "eos_token", "stop_sequence",
                                        "length", "cancelled", "time_limit",
                                        "error",  "deadline"};

// Inter-token gaps are milliseconds, not seconds.
std::vector<double> InterTokenBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,  0.5,    1.0,   2.5,  5.0};
}

template <typename T>
absl::Status Assign(absl::StatusOr<T> value, T* out) {
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

absl::StatusOr<metrics::Histogram*> Histogram(metrics::Registry* registry,
                                              const char* name,
                                              const char* help,
                                              std::vector<double> bounds,
                                              const std::string& engine_name) {
  absl::StatusOr<metrics::HistogramFamily*> family =
      registry->AddHistogram(name, help, {"policy"}, std::move(bounds));
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({engine_name});
}

absl::StatusOr<metrics::Counter*> Counter(metrics::Registry* registry,
                                          const char* name, const char* help,
                                          const std::string& engine_name) {
  absl::StatusOr<metrics::CounterFamily*> family =
      registry->AddCounter(name, help, {"policy"});
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({engine_name});
}

absl::StatusOr<metrics::CallbackGaugeFamily*> Gauge(
    metrics::Registry* registry, const char* name, const char* help,
    const std::string& engine_name, std::function<double()> fn) {
  absl::StatusOr<metrics::CallbackGaugeFamily*> family =
      registry->AddCallbackGauge(name, help, {"policy"});
  if (!family.ok()) return family.status();
  if (absl::Status st = (*family)->SetCallback({engine_name}, std::move(fn));
      !st.ok()) {
    return st;
  }
  return *family;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineMetrics>> EngineMetrics::Create(
    metrics::Registry* registry, const std::string& engine_name,
    std::function<EngineLoad()> load) {
  auto m = std::unique_ptr<EngineMetrics>(new EngineMetrics());
  m->engine_name_ = engine_name;
  absl::Status st =
      Assign(Gauge(registry, "moeserve_num_requests_running",
                   "Requests in the running batch.", engine_name,
                   [load] { return static_cast<double>(load().running); }),
             &m->running_);
  if (st.ok()) {
    st = Assign(Gauge(registry, "moeserve_num_requests_waiting",
                      "Requests waiting to be admitted.", engine_name,
                      [load] { return static_cast<double>(load().waiting); }),
                &m->waiting_);
  }
  if (st.ok()) {
    st = Assign(Gauge(registry, "moeserve_kv_cache_usage_ratio",
                      "Share of KV-cache blocks in use (0-1).", engine_name,
                      [load] { return load().kv_cache_usage; }),
                &m->kv_usage_);
  }
  const std::vector<double> latency = metrics::DefaultLatencyBuckets();
  if (st.ok()) {
    st = Assign(Histogram(registry, "moeserve_request_queue_time_seconds",
                          "Time from arrival to first admission.", latency,
                          engine_name),
                &m->queue_time_);
  }
  if (st.ok()) {
    st = Assign(Histogram(registry, "moeserve_time_to_first_token_seconds",
                          "Time from arrival to the first generated token.",
                          latency, engine_name),
                &m->ttft_);
  }
  if (st.ok()) {
    st = Assign(
        Histogram(registry, "moeserve_inter_token_latency_seconds",
                  "Time between consecutive generated tokens of a request.",
                  InterTokenBuckets(), engine_name),
        &m->itl_);
  }
  if (st.ok()) {
    st = Assign(
        Histogram(registry, "moeserve_e2e_request_latency_seconds",
                  "Time from arrival to the last token.", latency, engine_name),
        &m->e2e_);
  }
  if (st.ok()) {
    st = Assign(Counter(registry, "moeserve_prompt_tokens_total",
                        "Prompt tokens processed.", engine_name),
                &m->prompt_tokens_);
  }
  if (st.ok()) {
    st = Assign(Counter(registry, "moeserve_generation_tokens_total",
                        "Tokens generated.", engine_name),
                &m->generation_tokens_);
  }
  if (st.ok()) {
    st = Assign(Counter(registry, "moeserve_num_preemptions_total",
                        "Sequences preempted (KV blocks reclaimed; "
                        "recomputed later).",
                        engine_name),
                &m->preemptions_);
  }
  struct {
    const char* name;
    const char* help;
    metrics::Counter** out;
  } spec_counters[] = {
      {"moeserve_spec_decode_num_drafts_total",
       "Speculative verifications (one per sequence with drafts per step).",
       &m->num_drafts_},
      {"moeserve_spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
       &m->num_draft_tokens_},
      {"moeserve_spec_decode_num_accepted_tokens_total",
       "Draft tokens accepted by verification.", &m->num_accepted_tokens_},
      {"moeserve_spec_decode_draft_seconds_total", "Wall time spent drafting.",
       &m->draft_seconds_},
      {"moeserve_spec_decode_verify_seconds_total",
       "Wall time of target passes that verified drafts.", &m->verify_seconds_},
  };
  for (const auto& c : spec_counters) {
    if (st.ok())
      st = Assign(Counter(registry, c.name, c.help, engine_name), c.out);
  }
  if (!st.ok()) return st;
  absl::StatusOr<metrics::CounterFamily*> per_pos = registry->AddCounter(
      "moeserve_spec_decode_num_accepted_tokens_per_pos_total",
      "Accepted draft tokens by position in the draft (0 = first).",
      {"policy", "position"});
  if (!per_pos.ok()) return per_pos.status();
  m->accepted_per_pos_family_ = *per_pos;
  absl::StatusOr<metrics::CounterFamily*> finished = registry->AddCounter(
      "moeserve_request_success_total", "Finished requests by reason.",
      {"policy", "finished_reason"});
  if (!finished.ok()) return finished.status();
  m->finished_.push_back(nullptr);  // kNone finishes nothing
  for (size_t i = 1; i < std::size(kReasonNames); ++i) {
    absl::StatusOr<metrics::Counter*> c =
        (*finished)->WithLabels({engine_name, kReasonNames[i]});
    if (!c.ok()) return c.status();
    m->finished_.push_back(*c);
  }
  return m;
}

EngineMetrics::~EngineMetrics() {
  for (metrics::CallbackGaugeFamily* g : {running_, waiting_, kv_usage_}) {
    if (g != nullptr) g->RemoveCallback({engine_name_});
  }
}

void EngineMetrics::CountVerification(int num_draft_tokens, int num_accepted) {
  num_drafts_->Inc();
  num_draft_tokens_->Inc(num_draft_tokens);
  num_accepted_tokens_->Inc(num_accepted);
  // Every drafted position gets a child (0 when rejected), so acceptance
  // per position is computable in PromQL from the first verification on.
  while (static_cast<int>(accepted_per_pos_.size()) < num_draft_tokens) {
    absl::StatusOr<metrics::Counter*> c = accepted_per_pos_family_->WithLabels(
        {engine_name_, std::to_string(accepted_per_pos_.size())});
    if (!c.ok()) return;
    accepted_per_pos_.push_back(*c);
  }
  for (int i = 0; i < num_accepted; ++i) accepted_per_pos_[i]->Inc();
}

void EngineMetrics::CountFinished(FinishReason reason) {
  const size_t i = static_cast<size_t>(reason);
  if (i > 0 && i < finished_.size()) finished_[i]->Inc();
}

}  // namespace moeserve::engine
