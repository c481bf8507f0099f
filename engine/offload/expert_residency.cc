#include "engine/offload/expert_residency.h"

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace moeserve::engine {

using base::MutexLock;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// An EMA that starts at its first sample.
void Ema(double* average, double sample) {
  *average = *average == 0 ? sample : 0.9 * *average + 0.1 * sample;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertResidency>> ExpertResidency::Create(
    const ModelWeights* weights, SlowTier* slow, uint64_t capacity_bytes,
    const LinkOptions& link, OffloadPolicy* policy, metrics::Registry* registry,
    std::string engine_name, kernels::Backend* device) {
  if (weights == nullptr || slow == nullptr || policy == nullptr) {
    return absl::InvalidArgumentError(
        "expert residency needs weights, a slow tier and a policy");
  }
  const int64_t total =
      int64_t{weights->num_layers()} * int64_t{weights->num_experts()};
  if (total == 0) return absl::InvalidArgumentError("model has no experts");
  const uint64_t blob = weights->expert({0, 0}).bytes;
  if (!(link.inplace_compute_ratio >= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("inplace_compute_ratio must be >= 1, got ",
                     link.inplace_compute_ratio));
  }
  if (capacity_bytes < blob) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert cache capacity of ", capacity_bytes,
        " bytes holds no expert (one expert blob is ", blob, " bytes)"));
  }
  const int slots =
      static_cast<int>(std::min<uint64_t>(capacity_bytes / blob, total));
  std::unique_ptr<ExpertResidency> r(
      new ExpertResidency(weights, slow, slots, policy));
  if (absl::Status s = r->Init(link, registry, engine_name, device); !s.ok()) {
    return s;
  }
  policy->Attach(r.get());
  return r;
}

absl::StatusOr<std::unique_ptr<ExpertResidency>> ExpertResidency::Create(
    const ModelWeights* weights, std::unique_ptr<SlowTier> slow,
    uint64_t capacity_bytes, const LinkOptions& link,
    std::unique_ptr<OffloadPolicy> policy, metrics::Registry* registry,
    std::string engine_name, kernels::Backend* device) {
  absl::StatusOr<std::unique_ptr<ExpertResidency>> r =
      Create(weights, slow.get(), capacity_bytes, link, policy.get(), registry,
             std::move(engine_name), device);
  if (!r.ok()) return r.status();
  (*r)->owned_slow_ = std::move(slow);
  (*r)->owned_policy_ = std::move(policy);
  return r;
}

ExpertResidency::ExpertResidency(const ModelWeights* weights, SlowTier* slow,
                                 int slots, OffloadPolicy* policy)
    : slow_(slow),
      policy_(policy),
      int4_layout_(weights->int4_layout()),
      fp8_layout_(weights->fp8_layout()),
      num_layers_(weights->num_layers()),
      num_experts_(weights->num_experts()),
      top_k_(static_cast<int>(weights->config().num_experts_per_tok)),
      slot_bytes_(weights->expert({0, 0}).bytes),
      accounting_(slots, slot_bytes_),
      pool_(num_layers_, num_experts_, slots, policy, this,
            {&accounting_, &hooks_}),
      loads_(slots),
      routed_(num_experts_, 0),
      activations_(num_layers_ * num_experts_, 0) {}

absl::Status ExpertResidency::Init(const LinkOptions& link,
                                   metrics::Registry* registry,
                                   const std::string& engine_name,
                                   kernels::Backend* device) {
  absl::StatusOr<std::unique_ptr<SlotMemory>> memory =
      SlotMemory::Create(pool_.num_slots(), slot_bytes_, device);
  if (!memory.ok()) return memory.status();
  memory_ = *std::move(memory);
  absl::StatusOr<std::unique_ptr<LinkTransport>> transport =
      memory_->NewTransport(slow_, link.num_workers);
  if (!transport.ok()) return transport.status();
  if (absl::Status s = accounting_.Init(registry, engine_name, link); !s.ok()) {
    return s;
  }
  link_ = std::make_unique<Link>(*std::move(transport), slot_bytes_, link,
                                 accounting_.link_counters());
  inplace_compute_ratio_ = link.inplace_compute_ratio;
  registry_ = registry;
  engine_name_ = engine_name;
  return absl::OkStatus();
}

ExpertResidency::~ExpertResidency() {
  link_.reset();  // Runs every queued completion while the rest is alive.
}

kernels::Device ExpertResidency::device() const { return memory_->device(); }

absl::Status ExpertResidency::AttachCompute(kernels::Backend* backend,
                                            kernels::Stream* stream) {
  absl::Status s = memory_->AttachCompute(backend, stream);
  if (s.ok()) {
    compute_stream_.store(stream, std::memory_order_release);
    compute_attached_.store(true, std::memory_order_release);
  }
  return s;
}

void ExpertResidency::AttachRouterProbe(RouterProbe* probe) {
  probe_.store(probe, std::memory_order_release);
}

void ExpertResidency::StartLoad(int slot, ExpertId id) {
  const SlotPool::LoadStart start{slot, id, SlotPool::LoadKind::kDemand, 0, 0};
  StartLoads({&start, 1});
}

void ExpertResidency::StartLoads(std::span<const SlotPool::LoadStart> loads) {
  MutexLock lock(&load_mu_);
  std::vector<Link::Request> requests;
  std::vector<const SlotPool::LoadStart*> submitted;
  requests.reserve(loads.size());
  submitted.reserve(loads.size());
  for (const SlotPool::LoadStart& l : loads) {
    SlotLoad& state = loads_[l.slot];
    if (l.seq != 0 && state.cancel_seq == l.seq) continue;  // CancelLoad.
    const bool demand = l.kind == SlotPool::LoadKind::kDemand ||
                        (l.seq != 0 && state.promote_seq == l.seq);
    const int slot = l.slot;
    requests.push_back(
        {.id = l.id,
         .dst = memory_->data(slot),
         .done =
             [this, slot](absl::Status status) {
               // CANCELLED comes only from CancelLoad, which ends the load
               // in the pool itself (and holds the pool's lock here).
               if (absl::IsCancelled(status)) return;
               pool_.Complete(slot, std::move(status));
             },
         .after = memory_->fence(slot),
         .lane = demand ? LinkLane::kDemand : LinkLane::kPrefetch,
         .priority = l.priority});
    submitted.push_back(&l);
  }
  const std::vector<TransferId> ids = link_->SubmitBatch(std::move(requests));
  for (size_t i = 0; i < ids.size(); ++i) {
    SlotLoad& state = loads_[submitted[i]->slot];
    state.seq = submitted[i]->seq;
    state.transfer = ids[i];
  }
}

void ExpertResidency::PromoteLoad(int slot, uint64_t seq) {
  MutexLock lock(&load_mu_);
  SlotLoad& state = loads_[slot];
  if (state.seq == seq) {
    link_->Promote(state.transfer);
  } else {
    state.promote_seq = seq;  // StartLoads has not submitted it yet.
  }
}

bool ExpertResidency::CancelLoad(int slot, uint64_t seq) {
  MutexLock lock(&load_mu_);
  SlotLoad& state = loads_[slot];
  if (state.seq == seq) return link_->Cancel(state.transfer);
  state.cancel_seq = seq;  // StartLoads has not submitted it yet: skip it.
  return true;
}

void ExpertResidency::Released(int slot) { memory_->MarkReleased(slot); }

// ---------------------------------------------------------------- steps

void ExpertResidency::OnLookahead(const ExpertLookahead& lookahead) {
  hooks_.Deliver(policy_);
  policy_->OnLookahead(lookahead);
}

int ExpertResidency::ChooseDraftLength(const DraftLengthQuery& query) {
  hooks_.Deliver(policy_);
  return policy_->ChooseDraftLength(query);
}

double ExpertResidency::link_seconds_per_transfer() const {
  const uint64_t transfers = link_->transfers();
  return transfers == 0 ? 0.0 : link_->busy_seconds() / transfers;
}

void ExpertResidency::BeginStep(const StepInfo& info) {
  {
    MutexLock lock(&step_mu_);
    step_ = info.step;
    std::fill(activations_.begin(), activations_.end(), 0);
  }
  hooks_.Deliver(policy_);
  policy_->OnStepBegin(info);
}

void ExpertResidency::EndStep() {
  std::vector<uint32_t> activations;
  StepStats stats;
  {
    MutexLock lock(&step_mu_);
    activations = activations_;
    stats.step = step_;
  }
  stats.num_layers = num_layers_;
  stats.num_experts = num_experts_;
  stats.activations = activations;
  hooks_.Deliver(policy_);
  policy_->OnStepEnd(stats);
}

void ExpertResidency::BeginLayer(int layer, std::span<const int> experts,
                                 std::span<const int> token_counts,
                                 const float* hidden, int64_t n) {
  pool_.Protect(layer, experts);
  {
    MutexLock lock(&step_mu_);
    for (size_t i = 0; i < experts.size() && i < token_counts.size(); ++i) {
      if (token_counts[i] > 0) {
        activations_[layer * num_experts_ + experts[i]] +=
            static_cast<uint32_t>(token_counts[i]);
      }
    }
  }
  {
    MutexLock lock(&inplace_mu_);
    routing_layer_ = layer;
    std::fill(routed_.begin(), routed_.end(), 0);
    for (int e : experts) routed_[e] = 1;
  }
  hooks_.Deliver(policy_);
  policy_->OnRoute(layer, experts, token_counts, hidden, n);
  std::vector<ExpertId> ids;
  ids.reserve(experts.size());
  {
    MutexLock lock(&inplace_mu_);
    routing_layer_ = -1;
    layer_ = layer;
    layer_started_ = Clock::now();
    layer_inplace_compute_ = 0;
    layer_inplace_read_ = 0;
    for (int e : experts) {
      if (routed_[e] != 2) ids.push_back({layer, e});
    }
  }
  pool_.LoadManyNoWait(ids, SlotPool::LoadKind::kDemand);  // One submission.
}

void ExpertResidency::EndLayer(int layer) {
  double wait = 0;
  {
    MutexLock lock(&inplace_mu_);
    layer_ = -1;
    if (layer_inplace_compute_ > 0 || layer_inplace_read_ > 0) {
      // The slow tier's processor ran this layer's in-place experts
      // concurrently with the fast side (everything else the layer did):
      // the layer ends when the later of the two does.
      const double elapsed = SecondsSince(layer_started_);
      const double slow_side =
          inplace_compute_ratio_ * layer_inplace_compute_ + layer_inplace_read_;
      const double fast_side =
          elapsed - layer_inplace_compute_ - layer_inplace_read_;
      wait = std::max(slow_side, fast_side) - elapsed;
    }
  }
  if (wait > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    accounting_.OnInPlaceWait(wait);
  }
  pool_.Unprotect();
  hooks_.Deliver(policy_);
  policy_->OnLayerDone(layer);
}

// ---------------------------------------------------------------- experts

absl::StatusOr<const std::byte*> ExpertResidency::Acquire(ExpertId id) {
  policy_->OnAccess(id);
  bool inplace = false;
  {
    MutexLock lock(&inplace_mu_);
    inplace = id.layer == layer_ && id.expert >= 0 &&
              id.expert < num_experts_ && routed_[id.expert] == 2;
  }
  // Computed in place unless a load has made it ready meanwhile.
  if (inplace && !pool_.IsReady(id)) {
    absl::StatusOr<const std::byte*> blob = AcquireInPlace(id);
    hooks_.Deliver(policy_);
    return blob;
  }
  absl::StatusOr<int> slot = pool_.Acquire(id);
  hooks_.Deliver(policy_);
  if (!slot.ok()) return slot.status();
  {
    MutexLock lock(&inplace_mu_);
    held_ = id;
    held_inplace_ = false;
    held_since_ = Clock::now();
  }
  return memory_->data(*slot);
}

absl::StatusOr<const std::byte*> ExpertResidency::AcquireInPlace(ExpertId id) {
  const Clock::time_point start = Clock::now();
  const std::byte* blob = nullptr;
  if (!slow_->HostArena().empty()) {
    blob = slow_->HostBlob(id);
  } else {
    if (inplace_scratch_ == nullptr) {
      const size_t bytes = (slot_bytes_ + 63) / 64 * 64;
      inplace_scratch_.reset(
          static_cast<std::byte*>(std::aligned_alloc(64, bytes)));
      if (inplace_scratch_ == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "cannot allocate ", bytes, " bytes to compute an expert in place"));
      }
    }
    if (absl::Status s = slow_->Read(id, inplace_scratch_.get()); !s.ok()) {
      return s;
    }
    blob = inplace_scratch_.get();
  }
  MutexLock lock(&inplace_mu_);
  held_ = id;
  held_inplace_ = true;
  held_since_ = Clock::now();
  // The read (disk tier) is real I/O: counted, but not multiplied by the
  // compute ratio.
  held_read_seconds_ =
      std::chrono::duration<double>(held_since_ - start).count();
  return blob;
}

void ExpertResidency::Release(ExpertId id) {
  bool inplace = false;
  double compute_seconds = 0;
  double read_seconds = 0;
  {
    MutexLock lock(&inplace_mu_);
    if (held_ == id) {
      inplace = held_inplace_;
      compute_seconds = SecondsSince(held_since_);
      read_seconds = held_read_seconds_;
      held_ = {-1, -1};
      if (!inplace) Ema(&costs_.fast_compute_seconds, compute_seconds);
    }
  }
  if (!inplace) {
    pool_.Release(id);
    return;
  }
  // The emulated slower processor (LinkOptions::inplace_compute_ratio);
  // charged at EndLayer, overlapped with the fast side.
  const double emulated =
      inplace_compute_ratio_ * compute_seconds + read_seconds;
  accounting_.OnInPlace(emulated);
  MutexLock lock(&inplace_mu_);
  layer_inplace_compute_ += compute_seconds;
  layer_inplace_read_ += read_seconds;
  Ema(&costs_.inplace_compute_seconds, emulated);
}

// ---------------------------------------------------------------- draft

absl::Status ExpertResidency::DraftView::AttachCompute(
    kernels::Backend* backend, kernels::Stream* stream) {
  if (r_->compute_attached_.load(std::memory_order_acquire)) {
    if (r_->compute_stream_.load(std::memory_order_acquire) != stream) {
      return absl::FailedPreconditionError(
          "the draft view of the expert tier must compute on the target's "
          "stream");
    }
    return absl::OkStatus();
  }
  return r_->AttachCompute(backend, stream);
}

absl::StatusOr<const std::byte*> ExpertResidency::DraftView::Acquire(
    ExpertId id) {
  absl::StatusOr<int> slot = r_->pool_.AcquireResident(id);
  if (!slot.ok()) return slot.status();
  return r_->memory_->data(*slot);
}

void ExpertResidency::DraftView::Release(ExpertId id) { r_->pool_.Release(id); }

// ---------------------------------------------------------------- control

bool ExpertResidency::IsResident(ExpertId id) const {
  return pool_.IsResident(id);
}

bool ExpertResidency::IsReady(ExpertId id) const { return pool_.IsReady(id); }

bool ExpertResidency::Prefetch(ExpertId id) { return Prefetch(id, 0); }

bool ExpertResidency::Prefetch(ExpertId id, int priority) {
  return pool_.LoadNoWait(id, SlotPool::LoadKind::kPrefetch, priority);
}

int ExpertResidency::PrefetchBatch(std::span<const ExpertId> ids,
                                   int priority) {
  return pool_.LoadManyNoWait(ids, SlotPool::LoadKind::kPrefetch, priority);
}

bool ExpertResidency::CancelPrefetch(ExpertId id) {
  return pool_.CancelPrefetch(id);
}

bool ExpertResidency::Pin(ExpertId id) { return pool_.Pin(id); }

void ExpertResidency::Unpin(ExpertId id) { pool_.Unpin(id); }

void ExpertResidency::Evict(ExpertId id) { pool_.Evict(id); }

std::vector<int> ExpertResidency::PredictExperts(int layer, const float* hidden,
                                                 int64_t n, int k) {
  RouterProbe* probe = probe_.load(std::memory_order_acquire);
  if (probe == nullptr) return {};
  return probe->PredictExperts(layer, hidden, n, k);
}

bool ExpertResidency::ComputeInPlace(ExpertId id) {
  // A device's compute stream cannot read the slow tier's host memory.
  if (memory_->device() != kernels::Device::kCpu) return false;
  if (id.expert < 0 || id.expert >= num_experts_ || pool_.IsResident(id)) {
    return false;
  }
  bool first = false;
  {
    MutexLock lock(&inplace_mu_);
    if (routing_layer_ != id.layer || routed_[id.expert] == 0) return false;
    routed_[id.expert] = 2;
    first = !inplace_used_;
    inplace_used_ = true;
  }
  if (first) {
    SetPolicyGauge("moeserve_inplace_compute_ratio",
                   "Emulated slow-tier/fast-tier compute time ratio charged "
                   "to experts computed in place (LinkOptions::"
                   "inplace_compute_ratio; 1 = no charge).",
                   inplace_compute_ratio_);
  }
  return true;
}

ExpertCosts ExpertResidency::expert_costs() const {
  ExpertCosts costs;
  {
    MutexLock lock(&inplace_mu_);
    costs = costs_;
  }
  costs.link_seconds = link_seconds_per_transfer();
  return costs;
}

void ExpertResidency::SetPolicyGauge(std::string_view name,
                                     std::string_view help, double value) {
  if (registry_ == nullptr) return;
  MutexLock lock(&gauges_mu_);
  auto it = policy_gauges_.find(name);
  if (it == policy_gauges_.end()) {
    metrics::Gauge* gauge = nullptr;
    absl::StatusOr<metrics::GaugeFamily*> family = registry_->AddGauge(
        absl::string_view(name.data(), name.size()),
        absl::string_view(help.data(), help.size()), {"policy"});
    absl::StatusOr<metrics::Gauge*> child =
        family.ok() ? (*family)->WithLabels({engine_name_})
                    : absl::StatusOr<metrics::Gauge*>(family.status());
    if (child.ok()) {
      gauge = *child;
    } else {
      SPDLOG_WARN("engine '{}': policy gauge {} not exported: {}", engine_name_,
                  name, child.status().ToString());
    }
    it = policy_gauges_.emplace(std::string(name), gauge).first;
  }
  if (it->second != nullptr) it->second->Set(value);
}

// ---------------------------------------------------------------- stats

void ExpertResidency::WaitIdle() const { pool_.WaitIdle(); }

ResidencyStats ExpertResidency::stats() const {
  ResidencyStats st;
  accounting_.FillCounters(&st);
  st.link_bytes = link_->bytes();
  st.link_transfers = link_->transfers();
  st.failed_transfers = link_->failed_transfers();
  st.link_busy_seconds = link_->busy_seconds();
  const SlotPool::Counts c = pool_.counts();
  st.prefetched_unused_resident = c.prefetched_unused;
  st.slots_in_use = c.in_use;
  st.slots = pool_.num_slots();
  st.slot_bytes = slot_bytes_;
  st.capacity_bytes = pool_.num_slots() * slot_bytes_;
  st.slots_empty = c.empty;
  st.slots_loading = c.loading;
  st.slots_ready = c.ready;
  return st;
}

}  // namespace moeserve::engine
