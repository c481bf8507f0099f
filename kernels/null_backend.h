// NullBackend: a device that does no arithmetic (issue 30 item 1, the
// host-overhead benchmark's device). Every op runs the same argument checks
// as the real backends (op_checks.h: device, dtype and shape, so a bad call
// is still InvalidArgument) and returns without computing, so what a decode
// step costs on it is the host's own work: the engine's bookkeeping, the
// offload policy, the launches and syncs themselves. Wrap it in a
// CountingBackend to count them (tools/bench/host_overhead.h).
//
// What it does write, so that the engine runs as it would on a real device:
//  * Memory is real host memory: Allocate and AllocateHost map zeroed
//    anonymous pages (4096-byte aligned, committed only when touched), so
//    scratch that no op writes reads as zeros (logits: greedy token 0).
//  * Copies of at most NullBackendOptions::copy_limit_bytes are memcpy: the
//    host reads routing back and uploads ids, positions and block tables
//    through them. Larger copies (expert blobs over the link, weight
//    uploads, full logits) are checked and skipped, as a DMA engine would
//    take them off the host; their destination keeps its old bytes.
//  * RouterTopK writes valid, distinct expert ids: a cheap hash of a
//    per-backend call counter and the row, so offload policies see a
//    changing, uniform mix of hits and misses; weights are 1/k each.
//    RestartRouting() starts the sequence again.
//  * Argmax writes token 0 for every row (a valid id of any vocabulary).
// Zero, KvWrite, Embedding and the rest write nothing.
//
// Unlike the CPU backend it does not range-check index values (ids, slots,
// block tables): like the CUDA backend's, they live in "device" memory,
// and no op here reads memory through them.
//
// device() is Device::kCpu: the engine and the offload stack treat it as
// they treat the CPU backend (weights stay in host memory, no upload). To
// take the device path of the fast tier (slots from Allocate, copies on
// copy streams, release events) set EngineSpec::fast_tier_in_backend_memory.
//
// Thread safety: a NullBackend may be shared by threads (the RouterTopK
// counter is atomic); a Stream or Event is used by one thread at a time.
#ifndef MOESERVE_KERNELS_NULL_BACKEND_H_
#define MOESERVE_KERNELS_NULL_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace moeserve::kernels {

struct NullBackendOptions {
  // Copies up to this many bytes are performed; larger ones are skipped.
  // Default: 64 KiB (routing, step metadata and small logits fit).
  int64_t copy_limit_bytes = int64_t{64} << 10;
};

class NullBackend final : public Backend {
 public:
  explicit NullBackend(const NullBackendOptions& options = {})
      : options_(options) {}

  // RouterTopK's next call routes as the first one did: a run of the same
  // requests started after this routes exactly as the previous one.
  void RestartRouting() { router_calls_.store(0, std::memory_order_relaxed); }

  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "null"; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;

  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(int64_t bytes) override;
  absl::StatusOr<std::unique_ptr<Buffer>> AllocateHost(int64_t bytes) override;
  absl::Status RegisterHost(void*, int64_t) override {
    return absl::OkStatus();
  }
  void UnregisterHost(void*) override {}
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
  // One check and no per-group launch (the base class's default would call
  // GatherRows and ExpertFfn once per group).
  absl::Status ExpertFfnGrouped(Stream& s, const GroupedExperts& call,
                                const Tensor& workspace,
                                const Tensor& out) override;
  absl::Status CombineExpertRows(Stream& s, const Tensor& x,
                                 const Tensor& weights, const Tensor& pairs,
                                 const Tensor& y) override;
  absl::Status Softmax(Stream& s, const Tensor& x, const Tensor& out) override;
  absl::Status Argmax(Stream& s, const Tensor& x, const Tensor& out) override;

 private:
  // OK iff `s` was created by this backend.
  absl::Status CheckStream(const Stream& s) const;
  // The checks every copy makes, then a memcpy when within the limit.
  absl::Status Copy(Stream& s, void* dst, const void* src, int64_t bytes);

  const NullBackendOptions options_;
  std::atomic<uint64_t> router_calls_{0};
};

}  // namespace moeserve::kernels

#endif  // MOESERVE_KERNELS_NULL_BACKEND_H_
