#include "kernels/cpu/host_memory.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace moeserve::kernels::cpu {
namespace {

class HostBuffer final : public Buffer {
 public:
  HostBuffer(void* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  ~HostBuffer() override { std::free(data_); }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* const data_;
  const int64_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> AllocateAligned(int64_t bytes,
                                                        int64_t alignment) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocation of ", bytes, " bytes"));
  }
  // aligned_alloc wants a size that is a multiple of the alignment.
  const int64_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host allocation of ", bytes, " bytes failed"));
  }
  return std::unique_ptr<Buffer>(new HostBuffer(p, bytes));
}

absl::StatusOr<double> TimeEvent::SecondsSince(const Event& start) const {
  const auto* s = dynamic_cast<const TimeEvent*>(&start);
  if (s == nullptr) {
    return absl::InvalidArgumentError("event of another backend");
  }
  return std::chrono::duration<double>(at_ - s->at_).count();
}

}  // namespace moeserve::kernels::cpu
