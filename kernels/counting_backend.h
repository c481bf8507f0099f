// CountingBackend: a Backend that forwards every call to another backend
// and counts what a step costs the host: kernel launches, host syncs,
// copies each way and allocations (issue 30 item 1, "count before
// changing"). It wraps any backend (CPU, CUDA, a null device), so the same
// counts can be read on a machine without a GPU; a caller diffs two
// snapshots around a decode step and divides by the layers it ran.
//
// Graph regions (Backend::RunGraph) count what really runs: a launched
// graph (recorded or replayed) is one launch, whatever it holds; the ops a
// body enqueues while being recorded do not run then and are counted in
// captured_ops, not launches; a body run eagerly (graphs off) counts its
// ops as launches as usual. So the counts around a CUDA backend with
// --cuda_graphs show the launches a step really makes.
//
// With CountingBackendOptions::simulate_graphs, on a backend without graphs
// (CPU, null) and after SetGraphs(true), it counts as a recording backend
// would: a key's first call is a recording (the body's ops go to
// captured_ops, one launch), later calls a replay (one launch). The body is
// still run eagerly every time on the inner backend, so results are the
// inner backend's own; only the counts change. That shows without a GPU
// what MoeModel's graph mode leaves per decode step (launches, and that
// nothing recorded syncs, copies or allocates).
//
// Streams and events it creates wrap the inner backend's; pass only those
// to it. Borrows the inner backend (must outlive this one and everything it
// created). Thread-safe as the inner backend is; the counters are atomics.
#ifndef MOESERVE_KERNELS_COUNTING_BACKEND_H_
#define MOESERVE_KERNELS_COUNTING_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "base/mutex.h"
#include "kernels/backend.h"

namespace moeserve::kernels {

// What a CountingBackend has seen since it was created.
struct BackendCounts {
  int64_t launches = 0;  // compute ops (Embedding ... Argmax, Zero)
  int64_t syncs = 0;     // Stream::Synchronize, Event::Synchronize
  int64_t copies_to_device = 0;
  int64_t copies_to_host = 0;
  int64_t copies_on_device = 0;
  int64_t bytes_to_device = 0;
  int64_t bytes_to_host = 0;
  int64_t allocations = 0;  // Allocate, AllocateHost
  int64_t allocated_bytes = 0;
  int64_t streams_and_events = 0;  // CreateStream/CopyStream/Event
  // Graph regions: launches of recorded graphs (also counted in launches),
  // recordings made, and the ops those recordings hold (not in launches).
  int64_t graph_launches = 0;
  int64_t graph_captures = 0;
  int64_t captured_ops = 0;

  // The counts from `earlier` to this snapshot.
  BackendCounts Minus(const BackendCounts& earlier) const;
};

struct CountingBackendOptions {
  // Count graph regions as a recording backend would on an inner backend
  // without graphs (see above), once SetGraphs(true) is called.
  bool simulate_graphs = false;
};

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend* inner,
                           const CountingBackendOptions& options = {})
      : inner_(inner), options_(options) {}

  BackendCounts counts() const;

  Device device() const override { return inner_->device(); }
  std::string name() const override { return inner_->name(); }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateCopyStream() override;
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(int64_t bytes) override;
  absl::Status RegisterHost(void* p, int64_t bytes) override {
    return inner_->RegisterHost(p, bytes);
  }
  void UnregisterHost(void* p) override { inner_->UnregisterHost(p); }
  absl::Status CopyToDevice(Stream& s, void* dst, const void* src,
                            int64_t bytes) override;
  absl::Status CopyToHost(Stream& s, void* dst, const void* src,
                          int64_t bytes) override;
  absl::Status CopyOnDevice(Stream& s, void* dst, const void* src,
                            int64_t bytes) override;
  absl::Status Zero(Stream& s, void* dst, int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  absl::Status RecordEvent(Stream& s, Event& e) override;
  absl::Status WaitEvent(Stream& s, Event& e) override;

  absl::Status Embedding(Stream& s, const Tensor& ids, const Tensor& table,
                         const Tensor& out) override;
  absl::Status RmsNorm(Stream& s, const Tensor& x, const Tensor& w, float eps,
                       const Tensor& out) override;
  absl::Status MatMul(Stream& s, const Tensor& x, const Tensor& w,
                      const Tensor& bias, const Tensor& out) override;
  absl::Status RopeRotateHalf(Stream& s, const Tensor& x,
                              const Tensor& positions, float theta) override;
  absl::Status KvWrite(Stream& s, const Tensor& k, const Tensor& v,
                       const Tensor& slot_mapping,
                       const PagedKvCache& cache) override;
  absl::Status Attention(Stream& s, const Tensor& q, const PagedKvCache& cache,
                         const AttentionBatch& batch,
                         const Tensor& out) override;
  absl::Status RouterTopK(Stream& s, const Tensor& logits, int k,
                          bool normalize, const Tensor& weights,
                          const Tensor& ids) override;
  absl::Status SiluMul(Stream& s, const Tensor& gate, const Tensor& up,
                       const Tensor& out) override;
  absl::Status Add(Stream& s, const Tensor& a, const Tensor& b,
                   const Tensor& out) override;
  absl::Status GatherRows(Stream& s, const Tensor& x, const Tensor& rows,
                          const Tensor& out) override;
  absl::Status ScaleAddRows(Stream& s, const Tensor& x, const Tensor& rows,
                            const Tensor& weights, const Tensor& y) override;
  absl::Status SigmoidGatedAdd(Stream& s, const Tensor& x, const Tensor& gate,
                               const Tensor& y) override;
  absl::Status ExpertFfn(Stream& s, const Tensor& x, const Tensor& blob,
                         int64_t ffn, const Tensor& workspace,
                         const Tensor& out) override;
  absl::Status ExpertFfnInt4(Stream& s, const Tensor& x, const Tensor& blob,
                             const Int4ExpertLayout& layout,
                             const Tensor& workspace,
                             const Tensor& out) override;
  absl::Status ExpertFfnFp8(Stream& s, const Tensor& x, const Tensor& blob,
                            const Fp8ExpertLayout& layout,
                            const Tensor& workspace,
                            const Tensor& out) override;
  absl::Status ExpertFfnGrouped(Stream& s, const GroupedExperts& call,
                                const Tensor& workspace,
                                const Tensor& out) override;
  absl::Status CombineExpertRows(Stream& s, const Tensor& x,
                                 const Tensor& weights, const Tensor& pairs,
                                 const Tensor& y) override;
  absl::Status Softmax(Stream& s, const Tensor& x, const Tensor& out) override;
  absl::Status Argmax(Stream& s, const Tensor& x, const Tensor& out) override;

  bool SetGraphs(bool on) override;
  bool graphs_enabled() const override;
  absl::StatusOr<GraphRun> RunGraph(
      Stream& s, const GraphKey& key,
      absl::FunctionRef<absl::Status()> body) override;
  void DropGraphs(const void* owner) override;

 private:
  struct Counters {
    std::atomic<int64_t> launches{0}, syncs{0}, copies_to_device{0},
        copies_to_host{0}, copies_on_device{0}, bytes_to_device{0},
        bytes_to_host{0}, allocations{0}, allocated_bytes{0},
        streams_and_events{0}, graph_launches{0}, graph_captures{0},
        captured_ops{0};
  };
  class CountingStream;
  class CountingEvent;

  // The inner backend's stream / event behind one of ours.
  static Stream& Inner(Stream& s);
  static Event& Inner(Event& e);
  // One of ours around a stream the inner backend created.
  absl::StatusOr<std::unique_ptr<Stream>> Wrap(
      absl::StatusOr<std::unique_ptr<Stream>> inner);
  void CountAllocation(int64_t bytes);
  // Counts one op: into the body being run by RunGraph on this thread, if
  // any, else as a launch.
  Stream& Launch(Stream& s);

  Backend* const inner_;
  const CountingBackendOptions options_;
  std::atomic<bool> simulating_{false};  // simulate_graphs and SetGraphs(true)
  base::Mutex mu_;
  // Simulated graphs: the keys recorded so far.
  absl::flat_hash_set<GraphKey> recorded_ ABSL_GUARDED_BY(mu_);
  // Shared with the streams and events, which count their syncs.
  const std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_COUNTING_BACKEND_H_
