#include "engine/offload/expert_residency.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
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
      activations_(num_layers_ * num_experts_, 0) {
  hidden_size_ = weights->config().hidden_size;
  ffn_ = weights->config().expert_intermediate_size;
}

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
  device_backend_ = device;
  registry_ = registry;
  engine_name_ = engine_name;
  return absl::OkStatus();
}

ExpertResidency::~ExpertResidency() {
  link_.reset();  // Runs every queued completion while the rest is alive.
}

kernels::Device ExpertResidency::device() const { return memory_->device(); }

absl::Status ExpertResidency::EnableHybrid(HybridOptions options) {
  if (host_backend_ != nullptr || cpu_moe_layers_ != 0) {
    return absl::FailedPreconditionError("hybrid execution is already set");
  }
  if (options.cpu_moe_layers < 0 || options.cpu_moe_layers > num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu_moe_layers must be in [0, ", num_layers_,
        "] (the model's MoE layers), got ", options.cpu_moe_layers));
  }
  if (options.host != nullptr) {
    if (options.host->device() != kernels::Device::kCpu) {
      return absl::InvalidArgumentError(
          absl::StrCat("the host expert backend must be a CPU one, not ",
                       options.host->name()));
    }
    if (device_backend_ == nullptr) {
      return absl::InvalidArgumentError(
          "host expert compute needs a fast tier in a backend's memory; on "
          "the CPU backend the fast tier's own CPU computes in place");
    }
    MOESERVE_ASSIGN_OR_RETURN(
        host_, HostExperts::Create(options.host.get(), device_backend_));
    host_backend_ = std::move(options.host);
  } else if (options.cpu_moe_layers > 0 && device_backend_ != nullptr &&
             memory_->device() != kernels::Device::kCpu) {
    return absl::InvalidArgumentError(
        "cpu_moe_layers on a device fast tier needs host expert compute");
  }
  cpu_moe_layers_ = options.cpu_moe_layers;
  if (host_ != nullptr) return CalibrateHost();
  return absl::OkStatus();
}

absl::StatusOr<ExpertResidency::ScratchBlob> ExpertResidency::NewScratchBlob()
    const {
  const size_t bytes = (slot_bytes_ + 63) / 64 * 64;
  ScratchBlob blob(static_cast<std::byte*>(std::aligned_alloc(64, bytes)),
                   &std::free);
  if (blob == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", bytes, " bytes to compute an expert in place"));
  }
  return blob;
}

absl::Status ExpertResidency::CalibrateHost() {
  ScratchBlob read(nullptr, &std::free);
  if (slow_->HostArena().empty()) {
    MOESERVE_ASSIGN_OR_RETURN(read, NewScratchBlob());
  }
  // The host blob of expert `e` of layer 0 (the disk tier: read first; the
  // read is not timed, it is counted apart as real I/O).
  auto blob_of = [&](int e) -> absl::StatusOr<const std::byte*> {
    const ExpertId id{0, e % num_experts_};
    if (read == nullptr) return slow_->HostBlob(id);
    MOESERVE_RETURN_IF_ERROR(slow_->Read(id, read.get()));
    return read.get();
  };
  // An in-place expert is one that has not been used lately: its weights
  // come from memory, not from the caches. So each timing is of another
  // expert, once (the median of five), after one untimed run that touches
  // the host pool's own buffers.
  auto median_of = [&](int rows, int first) -> absl::StatusOr<double> {
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      MOESERVE_ASSIGN_OR_RETURN(const std::byte* blob, blob_of(first + i));
      MOESERVE_ASSIGN_OR_RETURN(
          const double s, host_->TimeExpert(blob, rows, hidden_size_, ffn_,
                                            int4_layout_, fp8_layout_, 1));
      t.push_back(s);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  {
    MOESERVE_ASSIGN_OR_RETURN(const std::byte* blob, blob_of(0));
    MOESERVE_RETURN_IF_ERROR(host_
                                 ->TimeExpert(blob, 8, hidden_size_, ffn_,
                                              int4_layout_, fp8_layout_, 1)
                                 .status());
  }
  MOESERVE_ASSIGN_OR_RETURN(const double one, median_of(1, 1));
  MOESERVE_ASSIGN_OR_RETURN(const double eight, median_of(8, 6));
  MutexLock lock(&inplace_mu_);
  costs_.host_seconds_first_row = one;
  costs_.host_seconds_per_row = std::max(0.0, (eight - one) / 7);
  spdlog::info(
      "host expert compute ({}): {:.1f} us for one expert at 1 row, {:.2f} "
      "us per further row (median of 5 experts each)",
      host_backend_->name(), one * 1e6, costs_.host_seconds_per_row * 1e6);
  return absl::OkStatus();
}

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
    for (int e : experts) routed_[e] = HostLayer(layer) ? 2 : 1;
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
  // Computed in place when the forward pass was told so (ComputesOnHost),
  // else unless a load has made it ready meanwhile.
  if (InPlaceNow(id)) {
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
    held_since_ = Clock::now();
  }
  return memory_->data(*slot);
}

uint8_t* ExpertResidency::RunningLayerState(ExpertId id) const {
  if (id.layer != layer_ || id.expert < 0 || id.expert >= num_experts_) {
    return nullptr;
  }
  return &routed_[id.expert];
}

bool ExpertResidency::InPlaceNow(ExpertId id) const {
  const bool ready = pool_.IsReady(id);
  MutexLock lock(&inplace_mu_);
  const uint8_t* r = RunningLayerState(id);
  return r != nullptr && (*r == 3 || (*r == 2 && !ready));
}

bool ExpertResidency::ComputesOnHost(ExpertId id) const {
  if (host_ == nullptr) return false;
  const bool ready = pool_.IsReady(id);
  MutexLock lock(&inplace_mu_);
  uint8_t* r = RunningLayerState(id);
  if (r == nullptr) return false;
  // The answer is final for this layer: the forward pass reads the blob
  // Acquire gives on the side it was told (a load finishing in between
  // must not move it to the device).
  if (*r == 2) *r = ready ? 1 : 3;
  return *r == 3;
}

absl::StatusOr<const std::byte*> ExpertResidency::AcquireInPlace(ExpertId id) {
  const Clock::time_point start = Clock::now();
  const std::byte* blob = nullptr;
  int scratch = -1;
  std::byte* dst = nullptr;
  if (!slow_->HostArena().empty()) {
    blob = slow_->HostBlob(id);
  } else {
    // A pread into a scratch blob of its own: on the hybrid path several
    // in-place experts are held at once.
    {
      MutexLock lock(&inplace_mu_);
      for (size_t i = 0; i < scratch_used_.size(); ++i) {
        if (!scratch_used_[i]) {
          scratch = static_cast<int>(i);
          break;
        }
      }
      if (scratch < 0) {
        MOESERVE_ASSIGN_OR_RETURN(ScratchBlob blob, NewScratchBlob());
        scratch_.push_back(std::move(blob));
        scratch_used_.push_back(false);
        scratch = static_cast<int>(scratch_.size()) - 1;
      }
      scratch_used_[scratch] = true;
      // The blob itself never moves (the vector holds pointers to it).
      dst = scratch_[scratch].get();
    }
    if (absl::Status s = slow_->Read(id, dst); !s.ok()) {
      MutexLock lock(&inplace_mu_);
      scratch_used_[scratch] = false;
      return s;
    }
    blob = dst;
  }
  MutexLock lock(&inplace_mu_);
  InPlaceHold hold;
  hold.id = id;
  hold.since = Clock::now();
  // The read (disk tier) is real I/O: counted, but not multiplied by the
  // compute ratio.
  hold.read_seconds = std::chrono::duration<double>(hold.since - start).count();
  hold.scratch = scratch;
  inplace_held_.push_back(hold);
  return blob;
}

void ExpertResidency::RecordHostCompute(ExpertId id, int64_t rows,
                                        double seconds) {
  MutexLock lock(&inplace_mu_);
  for (InPlaceHold& h : inplace_held_) {
    if (h.id == id) h.host_seconds = seconds;
  }
  if (rows == 1) Ema(&costs_.host_seconds_first_row, seconds);
}

void ExpertResidency::Release(ExpertId id) {
  std::optional<InPlaceHold> hold;
  double compute_seconds = 0;
  {
    MutexLock lock(&inplace_mu_);
    for (size_t i = 0; i < inplace_held_.size(); ++i) {
      if (inplace_held_[i].id == id) {
        hold = inplace_held_[i];
        inplace_held_.erase(inplace_held_.begin() + i);
        if (hold->scratch >= 0) scratch_used_[hold->scratch] = false;
        break;
      }
    }
    if (!hold && held_ == id) {
      compute_seconds = SecondsSince(held_since_);
      held_ = {-1, -1};
      Ema(&costs_.fast_compute_seconds, compute_seconds);
    }
  }
  if (!hold) {
    pool_.Release(id);
    return;
  }
  if (host_ != nullptr) {
    // The hybrid path: the host really computed it (HostExperts timed it),
    // concurrently with the device; nothing is emulated.
    const double seconds = hold->host_seconds + hold->read_seconds;
    accounting_.OnInPlace(seconds);
    MutexLock lock(&inplace_mu_);
    Ema(&costs_.inplace_compute_seconds, seconds);
    return;
  }
  // The emulated slower processor (LinkOptions::inplace_compute_ratio);
  // charged at EndLayer, overlapped with the fast side.
  compute_seconds = SecondsSince(hold->since);
  const double emulated =
      inplace_compute_ratio_ * compute_seconds + hold->read_seconds;
  accounting_.OnInPlace(emulated);
  MutexLock lock(&inplace_mu_);
  layer_inplace_compute_ += compute_seconds;
  layer_inplace_read_ += hold->read_seconds;
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
  if (HostLayer(id.layer)) return false;  // stays in the slow tier
  return pool_.LoadNoWait(id, SlotPool::LoadKind::kPrefetch, priority);
}

int ExpertResidency::PrefetchBatch(std::span<const ExpertId> ids,
                                   int priority) {
  if (cpu_moe_layers_ > 0) {
    std::vector<ExpertId> moving;
    moving.reserve(ids.size());
    for (const ExpertId& id : ids) {
      if (!HostLayer(id.layer)) moving.push_back(id);
    }
    return pool_.LoadManyNoWait(moving, SlotPool::LoadKind::kPrefetch,
                                priority);
  }
  return pool_.LoadManyNoWait(ids, SlotPool::LoadKind::kPrefetch, priority);
}

bool ExpertResidency::CancelPrefetch(ExpertId id) {
  return pool_.CancelPrefetch(id);
}

bool ExpertResidency::Pin(ExpertId id) {
  if (HostLayer(id.layer)) return false;  // stays in the slow tier
  return pool_.Pin(id);
}

void ExpertResidency::Unpin(ExpertId id) { pool_.Unpin(id); }

void ExpertResidency::Evict(ExpertId id) { pool_.Evict(id); }

std::vector<int> ExpertResidency::PredictExperts(int layer, const float* hidden,
                                                 int64_t n, int k) {
  RouterProbe* probe = probe_.load(std::memory_order_acquire);
  if (probe == nullptr) return {};
  return probe->PredictExperts(layer, hidden, n, k);
}

bool ExpertResidency::ComputeInPlace(ExpertId id) {
  // A device's compute stream cannot read the slow tier's host memory: only
  // with host compute attached (the hybrid path) or on the CPU.
  if (memory_->device() != kernels::Device::kCpu && host_ == nullptr) {
    return false;
  }
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
                   "inplace_compute_ratio; 1 = no charge, as on the hybrid "
                   "path, where the host really computes them).",
                   host_ != nullptr ? 1.0 : inplace_compute_ratio_);
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
