// Link: moves experts from the slow tier into fast-tier memory
// asynchronously (DESIGN.md "Core abstractions", CPU flavour).
//
// Worker thread(s) (default one, like one PCIe copy queue) take transfers
// (ExpertId, dst, completion) from two lanes, move the bytes with a
// LinkTransport (link_transport.h: SlowTier::Read into host memory, or a
// copy into device memory on the worker's own stream), account the transfer
// and then call its completion with the status.
//
// Lanes: every queued demand transfer starts before any queued prefetch.
// Demand transfers start in the order they were queued (or promoted);
// prefetches by priority, higher first, FIFO within equal priority. A
// transfer that has started always runs to its end (no preemption). Queued
// transfers can be:
//   - cancelled (Cancel): it leaves the queue, moves no bytes, adds no busy
//     time, counts in cancelled_transfers() (not in transfers() or
//     failed_transfers()), and its completion runs with CANCELLED on the
//     calling thread before Cancel returns. A completion sees CANCELLED only
//     from Cancel (a transport's CANCELLED is reported as INTERNAL).
//   - promoted (Promote): a queued prefetch moves to the back of the demand
//     lane (a demand acquire waits on it).
// SubmitBatch queues several transfers under one lock acquisition and one
// wake-up (a layer's misses go as one submission).
//
// Accounting: a successful transfer adds `bytes_per_transfer` (the padded
// blob size, ExpertBlob::bytes) to bytes(), one to transfers() and its busy
// time to busy_seconds(); a failed one adds nothing to these and counts in
// failed_transfers(); a cancelled one adds nothing to these and counts in
// cancelled_transfers(). So bytes() == transfers() x bytes_per_transfer.
// Accounting happens before the completion runs, so a caller woken by the
// completion already sees it. Busy time: the transport's (wall time on the
// host, CUDA event time for device copies) without emulation.
//
// Emulation (LinkOptions::gbps > 0): one emulated wire shared by every
// worker. A transfer that starts at `now` holds the wire from
// begin = max(now, wire_free) to end = begin + latency_us + bytes /
// (gbps * 1e9) s, and wire_free becomes end; the worker does the real copy,
// then sleeps until end (or, if the real copy overran, wire_free moves to
// when it finished). So several workers serialise on the wire and cannot
// invent bandwidth: n transfers take at least n x bytes / rate. Busy time
// is the time the transfer held the wire (end - begin, or the overrun), so
// busy_seconds() never exceeds the wall time. A CPU run thereby shows the
// transfer/compute ratio of a GPU behind PCIe; on a device transport it
// slows a real PCIe copy down to the emulated rate.
//
// Ownership: owns its transport and threads; borrows the optional metric
// counters (must outlive the Link). The destructor finishes every
// queued transfer (completions run; demand lane first) and joins the
// workers.
// Thread safety: every method may be called from any thread; completions run
// on a worker thread (Cancel's on the caller's) with no Link lock held, so a
// caller may hold its own locks around Submit, Cancel and Promote as long as
// the completions do not take them for CANCELLED. base::Mutex (std::mutex
// underneath, not absl::Mutex: Debian's Abseil is not TSan-instrumented), so
// clang checks the annotations.
#ifndef MOESERVE_ENGINE_OFFLOAD_LINK_H_
#define MOESERVE_ENGINE_OFFLOAD_LINK_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
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
  // Not a property of the wire, emulated beside it: how much slower the
  // slow tier's processor computes an expert than the fast tier's
  // (ResidencyControl::ComputeInPlace). On a host fast tier both are this
  // CPU: a layer's in-place experts are charged ratio x their measured
  // compute time, overlapped with the rest of the layer (the residency
  // sleeps at the layer's end until the later side is done;
  // expert_residency.h). Default 8: a
  // memory-bound expert at decode on a desktop CPU (~100 GB/s DRAM) against
  // an edge GPU (~0.5-1 TB/s), MoE-SpAc's setting. 1: no charge (in place
  // is as fast as the fast tier). Must be >= 1.
  double inplace_compute_ratio = 8;

  bool emulated() const { return gbps > 0; }
};

// Which queue a transfer waits in (see the header comment).
enum class LinkLane { kDemand = 0, kPrefetch = 1 };

// Names one submitted transfer (for Cancel / Promote); never 0.
using TransferId = uint64_t;

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

  // One transfer for SubmitBatch (the arguments of Submit).
  struct Request {
    ExpertId id;
    std::byte* dst = nullptr;
    Done done;
    kernels::Event* after = nullptr;
    LinkLane lane = LinkLane::kDemand;
    int priority = 0;  // Prefetch lane only: higher starts first.
  };

  // Queues a transfer of `id` into `dst` (bytes_per_transfer bytes, 64-byte
  // aligned, untouched by others until `done` runs) in `lane` (`priority`
  // orders the prefetch lane; ignored for demand). `after` (may be null):
  // device work the copy must wait for (the slot's last readers). `done`
  // runs exactly once, on a worker thread (or in Cancel). Returns the
  // transfer's id.
  TransferId Submit(ExpertId id, std::byte* dst, Done done,
                    kernels::Event* after = nullptr,
                    LinkLane lane = LinkLane::kDemand, int priority = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Queues every request under one lock acquisition and one wake-up; the
  // ids in request order.
  std::vector<TransferId> SubmitBatch(std::vector<Request> requests)
      ABSL_LOCKS_EXCLUDED(mu_);

  // If transfer `id` is still queued (not started): removes it, counts it
  // in cancelled_transfers(), runs its completion with CANCELLED on this
  // thread and returns true. False when it started, ended or is unknown.
  bool Cancel(TransferId id) ABSL_LOCKS_EXCLUDED(mu_);
  // If transfer `id` is queued in the prefetch lane: moves it to the back of
  // the demand lane and returns true. False otherwise (already demand,
  // started, ended, unknown).
  bool Promote(TransferId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Transfers queued and not yet started (both lanes).
  int queued_transfers() const ABSL_LOCKS_EXCLUDED(mu_);

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
  uint64_t cancelled_transfers() const {
    return cancelled_.load(std::memory_order_acquire);
  }
  double busy_seconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Transfer {
    ExpertId id;
    std::byte* dst = nullptr;
    Done done;
    kernels::Event* after = nullptr;
    LinkLane lane = LinkLane::kDemand;
    int priority = 0;
    uint64_t seq = 0;  // Order within its lane.
    // Emulation: when this transfer holds the wire (set when it starts).
    Clock::time_point wire_begin, wire_end;
  };
  // Lane keys: demand (seq, id); prefetch (-priority, seq, id).
  using DemandKey = std::pair<uint64_t, TransferId>;
  using PrefetchKey = std::tuple<int, uint64_t, TransferId>;

  TransferId Enqueue(Request r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueInLane(TransferId id, Transfer& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the next transfer to start (demand lane first); false when both
  // lanes are empty.
  bool PopNext(Transfer* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLoop(int worker) ABSL_LOCKS_EXCLUDED(mu_);
  void Run(int worker, Transfer& t) ABSL_LOCKS_EXCLUDED(mu_);
  void Account(double seconds);

  const std::unique_ptr<LinkTransport> transport_;
  const size_t bytes_per_transfer_;
  const LinkOptions options_;
  const LinkCounters counters_;

  mutable base::Mutex mu_;
  base::CondVar queued_;  // A transfer was queued, or stop_ was set.
  std::unordered_map<TransferId, Transfer> pending_ ABSL_GUARDED_BY(mu_);
  std::set<DemandKey> demand_ ABSL_GUARDED_BY(mu_);
  std::set<PrefetchKey> prefetch_ ABSL_GUARDED_BY(mu_);
  TransferId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point wire_free_ ABSL_GUARDED_BY(mu_);  // Emulation only.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> transfers_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> cancelled_{0};
  std::atomic<uint64_t> busy_ns_{0};

  std::vector<std::thread> workers_;  // Last: started after the rest exists.
};

}  // namespace moeserve::engine

#endif  // MOESERVE_ENGINE_OFFLOAD_LINK_H_
