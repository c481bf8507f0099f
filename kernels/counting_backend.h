// CountingBackend: a Backend that forwards every call to another backend
// and counts what a step costs the host: kernel launches, host syncs,
// copies each way and allocations (issue 30 item 1, "count before
// changing"). It wraps any backend (CPU, CUDA, a null device), so the same
// counts can be read on a machine without a GPU; a caller diffs two
// snapshots around a decode step and divides by the layers it ran.
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

  // The counts from `earlier` to this snapshot.
  BackendCounts Minus(const BackendCounts& earlier) const;
};

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend* inner) : inner_(inner) {}

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

 private:
  struct Counters {
    std::atomic<int64_t> launches{0}, syncs{0}, copies_to_device{0},
        copies_to_host{0}, copies_on_device{0}, bytes_to_device{0},
        bytes_to_host{0}, allocations{0}, allocated_bytes{0},
        streams_and_events{0};
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
  Stream& Launch(Stream& s) {
    counters_->launches.fetch_add(1, std::memory_order_relaxed);
    return Inner(s);
  }

  Backend* const inner_;
  // Shared with the streams and events, which count their syncs.
  const std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_COUNTING_BACKEND_H_
