#include "kernels/counting_backend.h"

#include <utility>

#include "base/mutex.h"

namespace moeserve::kernels {

using base::MutexLock;

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// The body a RunGraph on this thread is running: its backend and the ops it
// has enqueued so far.
struct BodySink {
  const void* backend = nullptr;
  int64_t ops = 0;
};
thread_local BodySink* t_sink = nullptr;

}  // namespace

class CountingBackend::CountingStream final : public Stream {
 public:
  CountingStream(std::unique_ptr<Stream> inner,
                 std::shared_ptr<Counters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}
  Device device() const override { return inner_->device(); }
  absl::Status Synchronize() override {
    counters_->syncs.fetch_add(1, kRelaxed);
    return inner_->Synchronize();
  }
  Stream& inner() { return *inner_; }

 private:
  const std::unique_ptr<Stream> inner_;
  const std::shared_ptr<Counters> counters_;
};

class CountingBackend::CountingEvent final : public Event {
 public:
  CountingEvent(std::unique_ptr<Event> inner,
                std::shared_ptr<Counters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}
  absl::Status Synchronize() override {
    counters_->syncs.fetch_add(1, kRelaxed);
    return inner_->Synchronize();
  }
  absl::StatusOr<double> SecondsSince(const Event& start) const override {
    return inner_->SecondsSince(
        *static_cast<const CountingEvent&>(start).inner_);
  }
  Event& inner() { return *inner_; }

 private:
  const std::unique_ptr<Event> inner_;
  const std::shared_ptr<Counters> counters_;
};

BackendCounts BackendCounts::Minus(const BackendCounts& e) const {
  return {launches - e.launches,
          syncs - e.syncs,
          copies_to_device - e.copies_to_device,
          copies_to_host - e.copies_to_host,
          copies_on_device - e.copies_on_device,
          bytes_to_device - e.bytes_to_device,
          bytes_to_host - e.bytes_to_host,
          allocations - e.allocations,
          allocated_bytes - e.allocated_bytes,
          streams_and_events - e.streams_and_events,
          graph_launches - e.graph_launches,
          graph_captures - e.graph_captures,
          captured_ops - e.captured_ops};
}

BackendCounts CountingBackend::counts() const {
  const Counters& c = *counters_;
  return {
      c.launches.load(kRelaxed),         c.syncs.load(kRelaxed),
      c.copies_to_device.load(kRelaxed), c.copies_to_host.load(kRelaxed),
      c.copies_on_device.load(kRelaxed), c.bytes_to_device.load(kRelaxed),
      c.bytes_to_host.load(kRelaxed),    c.allocations.load(kRelaxed),
      c.allocated_bytes.load(kRelaxed),  c.streams_and_events.load(kRelaxed),
      c.graph_launches.load(kRelaxed),   c.graph_captures.load(kRelaxed),
      c.captured_ops.load(kRelaxed)};
}

Stream& CountingBackend::Launch(Stream& s) {
  if (t_sink != nullptr && t_sink->backend == this) {
    ++t_sink->ops;
  } else {
    counters_->launches.fetch_add(1, kRelaxed);
  }
  return Inner(s);
}

bool CountingBackend::SetGraphs(bool on) {
  const bool inner_on = inner_->SetGraphs(on);
  simulating_.store(options_.simulate_graphs && on && !inner_on);
  return inner_on || simulating_.load();
}

bool CountingBackend::graphs_enabled() const {
  return simulating_.load() || inner_->graphs_enabled();
}

absl::StatusOr<GraphRun> CountingBackend::RunGraph(
    Stream& s, const GraphKey& key, absl::FunctionRef<absl::Status()> body) {
  BodySink sink{this, 0};
  BodySink* const outer = t_sink;
  t_sink = &sink;
  absl::StatusOr<GraphRun> run;
  if (simulating_.load() && !inner_->graphs_enabled()) {
    // The inner backend runs the body eagerly; counted as a recording the
    // first time, as a replay after.
    absl::Status st = body();
    if (st.ok()) {
      MutexLock lock(&mu_);
      run = recorded_.insert(key).second ? GraphRun::kCaptured
                                         : GraphRun::kReplayed;
    } else {
      run = st;
    }
  } else {
    run = inner_->RunGraph(Inner(s), key, body);
  }
  t_sink = outer;
  Counters& c = *counters_;
  if (!run.ok() || *run == GraphRun::kEager) {
    // What ran was ordinary launches.
    c.launches.fetch_add(sink.ops, kRelaxed);
    return run;
  }
  if (*run == GraphRun::kCaptured) {
    c.graph_captures.fetch_add(1, kRelaxed);
    c.captured_ops.fetch_add(sink.ops, kRelaxed);
  }
  c.graph_launches.fetch_add(1, kRelaxed);
  c.launches.fetch_add(1, kRelaxed);
  return run;
}

void CountingBackend::DropGraphs(const void* owner) {
  {
    MutexLock lock(&mu_);
    for (auto it = recorded_.begin(); it != recorded_.end();) {
      auto at = it++;
      if (at->owner == owner) recorded_.erase(at);
    }
  }
  inner_->DropGraphs(owner);
}

Stream& CountingBackend::Inner(Stream& s) {
  return static_cast<CountingStream&>(s).inner();
}

Event& CountingBackend::Inner(Event& e) {
  return static_cast<CountingEvent&>(e).inner();
}

absl::StatusOr<std::unique_ptr<Stream>> CountingBackend::Wrap(
    absl::StatusOr<std::unique_ptr<Stream>> inner) {
  if (!inner.ok()) return inner.status();
  counters_->streams_and_events.fetch_add(1, kRelaxed);
  return std::unique_ptr<Stream>(
      std::make_unique<CountingStream>(*std::move(inner), counters_));
}

absl::StatusOr<std::unique_ptr<Stream>> CountingBackend::CreateStream() {
  return Wrap(inner_->CreateStream());
}

absl::StatusOr<std::unique_ptr<Stream>> CountingBackend::CreateCopyStream() {
  return Wrap(inner_->CreateCopyStream());
}

absl::StatusOr<std::unique_ptr<Buffer>> CountingBackend::Allocate(
    int64_t bytes) {
  CountAllocation(bytes);
  return inner_->Allocate(bytes);
}

absl::StatusOr<std::unique_ptr<Buffer>> CountingBackend::AllocateHost(
    int64_t bytes) {
  CountAllocation(bytes);
  return inner_->AllocateHost(bytes);
}

void CountingBackend::CountAllocation(int64_t bytes) {
  counters_->allocations.fetch_add(1, kRelaxed);
  counters_->allocated_bytes.fetch_add(bytes, kRelaxed);
}

absl::Status CountingBackend::CopyToDevice(Stream& s, void* dst,
                                           const void* src, int64_t bytes) {
  counters_->copies_to_device.fetch_add(1, kRelaxed);
  counters_->bytes_to_device.fetch_add(bytes, kRelaxed);
  return inner_->CopyToDevice(Inner(s), dst, src, bytes);
}

absl::Status CountingBackend::CopyToHost(Stream& s, void* dst, const void* src,
                                         int64_t bytes) {
  counters_->copies_to_host.fetch_add(1, kRelaxed);
  counters_->bytes_to_host.fetch_add(bytes, kRelaxed);
  return inner_->CopyToHost(Inner(s), dst, src, bytes);
}

absl::Status CountingBackend::CopyOnDevice(Stream& s, void* dst,
                                           const void* src, int64_t bytes) {
  counters_->copies_on_device.fetch_add(1, kRelaxed);
  return inner_->CopyOnDevice(Inner(s), dst, src, bytes);
}

absl::Status CountingBackend::Zero(Stream& s, void* dst, int64_t bytes) {
  return inner_->Zero(Launch(s), dst, bytes);
}

absl::StatusOr<std::unique_ptr<Event>> CountingBackend::CreateEvent() {
  absl::StatusOr<std::unique_ptr<Event>> e = inner_->CreateEvent();
  if (!e.ok()) return e.status();
  counters_->streams_and_events.fetch_add(1, kRelaxed);
  return std::unique_ptr<Event>(
      std::make_unique<CountingEvent>(*std::move(e), counters_));
}

absl::Status CountingBackend::RecordEvent(Stream& s, Event& e) {
  return inner_->RecordEvent(Inner(s), Inner(e));
}

absl::Status CountingBackend::WaitEvent(Stream& s, Event& e) {
  return inner_->WaitEvent(Inner(s), Inner(e));
}

absl::Status CountingBackend::Embedding(Stream& s, const Tensor& ids,
                                        const Tensor& table,
                                        const Tensor& out) {
  return inner_->Embedding(Launch(s), ids, table, out);
}

absl::Status CountingBackend::RmsNorm(Stream& s, const Tensor& x,
                                      const Tensor& w, float eps,
                                      const Tensor& out) {
  return inner_->RmsNorm(Launch(s), x, w, eps, out);
}

absl::Status CountingBackend::MatMul(Stream& s, const Tensor& x,
                                     const Tensor& w, const Tensor& bias,
                                     const Tensor& out) {
  return inner_->MatMul(Launch(s), x, w, bias, out);
}

absl::Status CountingBackend::RopeRotateHalf(Stream& s, const Tensor& x,
                                             const Tensor& positions,
                                             float theta) {
  return inner_->RopeRotateHalf(Launch(s), x, positions, theta);
}

absl::Status CountingBackend::KvWrite(Stream& s, const Tensor& k,
                                      const Tensor& v,
                                      const Tensor& slot_mapping,
                                      const PagedKvCache& cache) {
  return inner_->KvWrite(Launch(s), k, v, slot_mapping, cache);
}

absl::Status CountingBackend::Attention(Stream& s, const Tensor& q,
                                        const PagedKvCache& cache,
                                        const AttentionBatch& batch,
                                        const Tensor& out) {
  return inner_->Attention(Launch(s), q, cache, batch, out);
}

absl::Status CountingBackend::RouterTopK(Stream& s, const Tensor& logits, int k,
                                         bool normalize, const Tensor& weights,
                                         const Tensor& ids) {
  return inner_->RouterTopK(Launch(s), logits, k, normalize, weights, ids);
}

absl::Status CountingBackend::SiluMul(Stream& s, const Tensor& gate,
                                      const Tensor& up, const Tensor& out) {
  return inner_->SiluMul(Launch(s), gate, up, out);
}

absl::Status CountingBackend::Add(Stream& s, const Tensor& a, const Tensor& b,
                                  const Tensor& out) {
  return inner_->Add(Launch(s), a, b, out);
}

absl::Status CountingBackend::GatherRows(Stream& s, const Tensor& x,
                                         const Tensor& rows,
                                         const Tensor& out) {
  return inner_->GatherRows(Launch(s), x, rows, out);
}

absl::Status CountingBackend::ScaleAddRows(Stream& s, const Tensor& x,
                                           const Tensor& rows,
                                           const Tensor& weights,
                                           const Tensor& y) {
  return inner_->ScaleAddRows(Launch(s), x, rows, weights, y);
}

absl::Status CountingBackend::SigmoidGatedAdd(Stream& s, const Tensor& x,
                                              const Tensor& gate,
                                              const Tensor& y) {
  return inner_->SigmoidGatedAdd(Launch(s), x, gate, y);
}

absl::Status CountingBackend::ExpertFfn(Stream& s, const Tensor& x,
                                        const Tensor& blob, int64_t ffn,
                                        const Tensor& workspace,
                                        const Tensor& out) {
  return inner_->ExpertFfn(Launch(s), x, blob, ffn, workspace, out);
}

absl::Status CountingBackend::ExpertFfnInt4(Stream& s, const Tensor& x,
                                            const Tensor& blob,
                                            const Int4ExpertLayout& layout,
                                            const Tensor& workspace,
                                            const Tensor& out) {
  return inner_->ExpertFfnInt4(Launch(s), x, blob, layout, workspace, out);
}

absl::Status CountingBackend::ExpertFfnFp8(Stream& s, const Tensor& x,
                                           const Tensor& blob,
                                           const Fp8ExpertLayout& layout,
                                           const Tensor& workspace,
                                           const Tensor& out) {
  return inner_->ExpertFfnFp8(Launch(s), x, blob, layout, workspace, out);
}

absl::Status CountingBackend::ExpertFfnGrouped(Stream& s,
                                               const GroupedExperts& call,
                                               const Tensor& workspace,
                                               const Tensor& out) {
  return inner_->ExpertFfnGrouped(Launch(s), call, workspace, out);
}

absl::Status CountingBackend::CombineExpertRows(Stream& s, const Tensor& x,
                                                const Tensor& weights,
                                                const Tensor& pairs,
                                                const Tensor& y) {
  return inner_->CombineExpertRows(Launch(s), x, weights, pairs, y);
}

absl::Status CountingBackend::Softmax(Stream& s, const Tensor& x,
                                      const Tensor& out) {
  return inner_->Softmax(Launch(s), x, out);
}

absl::Status CountingBackend::Argmax(Stream& s, const Tensor& x,
                                     const Tensor& out) {
  return inner_->Argmax(Launch(s), x, out);
}

}  // namespace moeserve::kernels
