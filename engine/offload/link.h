// Link: moves experts from the slow tier into fast-tier memory
// asynchronously (DESIGN.md "Core abstractions", CPU flavour).
//
// Worker thread(s) (default one, like one PCIe copy queue) take transfers
// (ExpertId, dst, completion) from a FIFO, move the bytes with a
// LinkTransport (link_transport.h: SlowTier::Read into host memory, or a
// copy into device memory on the worker's own stream), account the transfer
// and then call its completion with the status.
//
// Accounting: a successful transfer adds `bytes_per_transfer` (the padded
// blob size, ExpertBlob::bytes) to bytes() and the transport's busy time
// (wall time on the host, CUDA event time for device copies) to
// busy_seconds(); a failed one adds nothing to either and counts in
// failed_transfers(). Accounting happens before the completion runs, so a
// caller woken by the completion already sees it.
//
// Emulation (LinkOptions::gbps > 0): after the real copy the worker sleeps
// until start + latency_us + bytes / (gbps * 1e9) s, so a CPU run shows the
// transfer/compute ratio of a GPU behind PCIe. The sleep counts as busy.
// On a device transport it slows a real PCIe copy down to the emulated rate.
//
// Ownership: owns its transport and threads; borrows the optional metric
// counters (must outlive the Link). The destructor finishes every
// queued transfer (completions run) and joins the workers.
// Thread safety: every method may be called from any thread; completions run
// on a worker thread with no Link lock held. base::Mutex (std::mutex
// underneath, not absl::Mutex: Debian's Abseil is not TSan-instrumented), so
// clang checks the annotations.
#ifndef MOESERVE_ENGINE_OFFLOAD_LINK_H_
#define MOESERVE_ENGINE_OFFLOAD_LINK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "engine/model_weights.h"
#include "engine/offload/link_transport.h"
#include "engine/offload/slow_tier.h"
#include "kernels/backend.h"
#include "metrics/metric.h"

namespace moeserve::engine {

struct LinkOptions {
  // Emulated bandwidth in GB/s (1e9 bytes/s). Default: 0 = emulation off.
  double gbps = 0;
  // Emulated per-transfer latency in microseconds (only when gbps > 0).
  // Default: 0.
  double latency_us = 0;
  // Worker threads (parallel copy queues). Default: 1; values < 1 mean 1.
  int num_workers = 1;

  bool emulated() const { return gbps > 0; }
};

// Optional metric children the link increments (either may be null).
struct LinkCounters {
  metrics::Counter* bytes = nullptr;         // moeserve_link_bytes_total
  metrics::Counter* busy_seconds = nullptr;  // moeserve_link_busy_seconds_total
};

class Link {
 public:
  using Done = std::function<void(absl::Status)>;

  // Host fast tier: SlowTier::Read into the destination (`slow` must
  // outlive the Link).
  Link(SlowTier* slow, size_t bytes_per_transfer, const LinkOptions& options,
       LinkCounters counters = {});
  // Any transport; it must serve options.num_workers workers (at least 1).
  Link(std::unique_ptr<LinkTransport> transport, size_t bytes_per_transfer,
       const LinkOptions& options, LinkCounters counters = {});
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // Queues a transfer of `id` into `dst` (bytes_per_transfer bytes, 64-byte
  // aligned, untouched by others until `done` runs). `after` (may be null):
  // device work the copy must wait for (the slot's last readers). `done`
  // runs exactly once, on a worker thread.
  void Submit(ExpertId id, std::byte* dst, Done done,
              kernels::Event* after = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  const LinkOptions& options() const { return options_; }
  bool emulation_on() const { return options_.emulated(); }
  size_t bytes_per_transfer() const { return bytes_per_transfer_; }

  uint64_t bytes() const { return bytes_.load(std::memory_order_acquire); }
  uint64_t transfers() const {
    return transfers_.load(std::memory_order_acquire);
  }
  uint64_t failed_transfers() const {
    return failed_.load(std::memory_order_acquire);
  }
  double busy_seconds() const;

 private:
  struct Transfer {
    ExpertId id;
    std::byte* dst;
    Done done;
    kernels::Event* after = nullptr;
  };

  void WorkerLoop(int worker) ABSL_LOCKS_EXCLUDED(mu_);
  void Run(int worker, Transfer& t) ABSL_LOCKS_EXCLUDED(mu_);
  void Account(double seconds);

  const std::unique_ptr<LinkTransport> transport_;
  const size_t bytes_per_transfer_;
  const LinkOptions options_;
  const LinkCounters counters_;

  base::Mutex mu_;
  base::CondVar queued_;  // A transfer was queued, or stop_ was set.
  std::deque<Transfer> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> transfers_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> busy_ns_{0};

  std::vector<std::thread> workers_;  // Last: started after the rest exists.
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_LINK_H_
