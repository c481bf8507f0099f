#include "kernels/null_backend.h"

#include <sys/mman.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels {
namespace {

class NullStream final : public Stream {
 public:
  explicit NullStream(const NullBackend* owner) : owner_(owner) {}
  Device device() const override { return Device::kCpu; }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  const NullBackend* owner() const { return owner_; }

 private:
  const NullBackend* const owner_;
};

// Zeroed anonymous pages, unmapped on destruction.
class MappedBuffer final : public Buffer {
 public:
  MappedBuffer(void* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  ~MappedBuffer() override { munmap(data_, bytes_); }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* const data_;
  const int64_t bytes_;
};

// Nothing runs asynchronously: an event is a timestamp, complete when
// recorded.
class NullEvent final : public Event {
 public:
  void Record() { at_ = std::chrono::steady_clock::now(); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::StatusOr<double> SecondsSince(const Event& start) const override {
    const auto* s = dynamic_cast<const NullEvent*>(&start);
    if (s == nullptr) {
      return absl::InvalidArgumentError("event of another backend");
    }
    return std::chrono::duration<double>(at_ - s->at_).count();
  }

 private:
  std::chrono::steady_clock::time_point at_{};
};

absl::StatusOr<std::unique_ptr<Buffer>> MapZeroed(int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocation of ", bytes, " bytes"));
  }
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("null backend: mapping ", bytes,
                     " bytes failed: ", std::strerror(errno)));
  }
  return std::unique_ptr<Buffer>(new MappedBuffer(p, bytes));
}

// SplitMix64's finaliser: a cheap, well-mixed hash.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Stream>> NullBackend::CreateStream() {
  return std::make_unique<NullStream>(this);
}

absl::Status NullBackend::CheckStream(const Stream& s) const {
  const auto* null = dynamic_cast<const NullStream*>(&s);
  if (null == nullptr || null->owner() != this) {
    return absl::InvalidArgumentError("stream does not belong to this backend");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Buffer>> NullBackend::Allocate(int64_t bytes) {
  return MapZeroed(bytes);
}

absl::StatusOr<std::unique_ptr<Buffer>> NullBackend::AllocateHost(
    int64_t bytes) {
  return MapZeroed(bytes);
}

absl::Status NullBackend::Copy(Stream& s, void* dst, const void* src,
                               int64_t bytes) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  if (bytes < 0) return absl::InvalidArgumentError("copy of negative size");
  if (bytes > 0 && bytes <= options_.copy_limit_bytes) {
    std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  return absl::OkStatus();
}

absl::Status NullBackend::CopyToDevice(Stream& s, void* dst, const void* src,
                                       int64_t bytes) {
  return Copy(s, dst, src, bytes);
}

absl::Status NullBackend::CopyToHost(Stream& s, void* dst, const void* src,
                                     int64_t bytes) {
  return Copy(s, dst, src, bytes);
}

absl::Status NullBackend::CopyOnDevice(Stream& s, void* dst, const void* src,
                                       int64_t bytes) {
  return Copy(s, dst, src, bytes);
}

absl::Status NullBackend::Zero(Stream& s, void* /*dst*/, int64_t bytes) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  if (bytes < 0) return absl::InvalidArgumentError("zero of negative size");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Event>> NullBackend::CreateEvent() {
  return std::make_unique<NullEvent>();
}

absl::Status NullBackend::RecordEvent(Stream& s, Event& e) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  auto* event = dynamic_cast<NullEvent*>(&e);
  if (event == nullptr) {
    return absl::InvalidArgumentError("event does not belong to this backend");
  }
  event->Record();
  return absl::OkStatus();
}

absl::Status NullBackend::WaitEvent(Stream& s, Event& e) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  if (dynamic_cast<NullEvent*>(&e) == nullptr) {
    return absl::InvalidArgumentError("event does not belong to this backend");
  }
  return absl::OkStatus();
}

absl::Status NullBackend::Embedding(Stream& s, const Tensor& ids,
                                    const Tensor& table, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckEmbedding(Device::kCpu, ids, table, out);
}

absl::Status NullBackend::RmsNorm(Stream& s, const Tensor& x, const Tensor& w,
                                  float eps, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckRmsNorm(Device::kCpu, x, w, eps, out);
}

absl::Status NullBackend::MatMul(Stream& s, const Tensor& x, const Tensor& w,
                                 const Tensor& bias, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckMatMul(Device::kCpu, x, w, bias, out);
}

absl::Status NullBackend::RopeRotateHalf(Stream& s, const Tensor& x,
                                         const Tensor& positions, float theta) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckRope(Device::kCpu, x, positions, theta);
}

absl::Status NullBackend::KvWrite(Stream& s, const Tensor& k, const Tensor& v,
                                  const Tensor& slot_mapping,
                                  const PagedKvCache& cache) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckKvWrite(Device::kCpu, k, v, slot_mapping, cache);
}

absl::Status NullBackend::Attention(Stream& s, const Tensor& q,
                                    const PagedKvCache& cache,
                                    const AttentionBatch& batch,
                                    const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckAttention(Device::kCpu, q, cache, batch, out);
}

absl::Status NullBackend::RouterTopK(Stream& s, const Tensor& logits, int k,
                                     bool /*normalize*/, const Tensor& weights,
                                     const Tensor& ids) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(
      CheckRouterTopK(Device::kCpu, logits, k, weights, ids));
  const int64_t n = logits.dim(0), num_experts = logits.dim(1);
  const uint64_t call = router_calls_.fetch_add(1, std::memory_order_relaxed);
  int32_t* id = ids.data<int32_t>();
  float* weight = weights.data<float>();
  for (int64_t row = 0; row < n; ++row, id += k, weight += k) {
    uint64_t h = Mix((call << 24) ^ static_cast<uint64_t>(row));
    for (int j = 0; j < k; ++j, h = Mix(h)) {
      // Distinct ids: step past the ones this row already has (k <= E).
      auto e = static_cast<int32_t>(h % static_cast<uint64_t>(num_experts));
      for (int i = 0; i < j; ++i) {
        if (id[i] == e) {
          e = static_cast<int32_t>((e + 1) % num_experts);
          i = -1;
        }
      }
      id[j] = e;
      weight[j] = 1.0f / static_cast<float>(k);
    }
  }
  return absl::OkStatus();
}

absl::Status NullBackend::SiluMul(Stream& s, const Tensor& gate,
                                  const Tensor& up, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckSameShapeF32(Device::kCpu, gate, up, out);
}

absl::Status NullBackend::Add(Stream& s, const Tensor& a, const Tensor& b,
                              const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckSameShapeF32(Device::kCpu, a, b, out);
}

absl::Status NullBackend::GatherRows(Stream& s, const Tensor& x,
                                     const Tensor& rows, const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckGatherRows(Device::kCpu, x, rows, out);
}

absl::Status NullBackend::ScaleAddRows(Stream& s, const Tensor& x,
                                       const Tensor& rows,
                                       const Tensor& weights, const Tensor& y) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckScaleAddRows(Device::kCpu, x, rows, weights, y);
}

absl::Status NullBackend::SigmoidGatedAdd(Stream& s, const Tensor& x,
                                          const Tensor& gate, const Tensor& y) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckSigmoidGatedAdd(Device::kCpu, x, gate, y);
}

absl::Status NullBackend::ExpertFfn(Stream& s, const Tensor& x,
                                    const Tensor& blob, int64_t ffn,
                                    const Tensor& workspace,
                                    const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckExpertFfn(Device::kCpu, x, blob, ffn, workspace, out);
}

absl::Status NullBackend::ExpertFfnInt4(Stream& s, const Tensor& x,
                                        const Tensor& blob,
                                        const Int4ExpertLayout& layout,
                                        const Tensor& workspace,
                                        const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckExpertFfnInt4(Device::kCpu, x, blob, layout, workspace, out);
}

absl::Status NullBackend::ExpertFfnFp8(Stream& s, const Tensor& x,
                                       const Tensor& blob,
                                       const Fp8ExpertLayout& layout,
                                       const Tensor& workspace,
                                       const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckExpertFfnFp8(Device::kCpu, x, blob, layout, workspace, out);
}

absl::Status NullBackend::ExpertFfnGrouped(Stream& s,
                                           const GroupedExperts& call,
                                           const Tensor& workspace,
                                           const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckExpertFfnGrouped(Device::kCpu, call, workspace, out);
}

absl::Status NullBackend::CombineExpertRows(Stream& s, const Tensor& x,
                                            const Tensor& weights,
                                            const Tensor& pairs,
                                            const Tensor& y) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckCombineExpertRows(Device::kCpu, x, weights, pairs, y);
}

absl::Status NullBackend::Softmax(Stream& s, const Tensor& x,
                                  const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  return CheckSoftmax(Device::kCpu, x, out);
}

absl::Status NullBackend::Argmax(Stream& s, const Tensor& x,
                                 const Tensor& out) {
  MOESERVE_RETURN_IF_ERROR(CheckStream(s));
  MOESERVE_RETURN_IF_ERROR(CheckArgmax(Device::kCpu, x, out));
  if (out.nbytes() > 0) std::memset(out.raw(), 0, out.nbytes());  // token 0
  return absl::OkStatus();
}

}  // namespace moeserve::kernels
