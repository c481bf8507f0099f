#include "engine/offload/expert_residency.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace moeserve::engine {

using base::MutexLock;

absl::StatusOr<std::unique_ptr<ExpertResidency>> ExpertResidency::Create(
    const ModelWeights* weights, SlowTier* slow, uint64_t capacity_bytes,
    const LinkOptions& link, OffloadPolicy* policy, PredictFn predict,
    metrics::Registry* registry, std::string engine_name,
    kernels::Backend* device) {
  if (weights == nullptr || slow == nullptr || policy == nullptr) {
    return absl::InvalidArgumentError(
        "expert residency needs weights, a slow tier and a policy");
  }
  const int64_t total =
      int64_t{weights->num_layers()} * int64_t{weights->num_experts()};
  if (total == 0) return absl::InvalidArgumentError("model has no experts");
  const uint64_t blob = weights->expert({0, 0}).bytes;
  if (capacity_bytes < blob) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert cache capacity of ", capacity_bytes,
        " bytes holds no expert (one expert blob is ", blob, " bytes)"));
  }
  const int slots =
      static_cast<int>(std::min<uint64_t>(capacity_bytes / blob, total));
  std::unique_ptr<ExpertResidency> r(
      new ExpertResidency(weights, slow, slots, policy, std::move(predict)));
  if (absl::Status s = r->Init(link, registry, engine_name, device); !s.ok()) {
    return s;
  }
  policy->Attach(r.get());
  return r;
}

ExpertResidency::ExpertResidency(const ModelWeights* weights, SlowTier* slow,
                                 int slots, OffloadPolicy* policy,
                                 PredictFn predict)
    : slow_(slow),
      policy_(policy),
      predict_(std::move(predict)),
      num_layers_(weights->num_layers()),
      num_experts_(weights->num_experts()),
      top_k_(static_cast<int>(weights->config().num_experts_per_tok)),
      slot_bytes_(weights->expert({0, 0}).bytes),
      accounting_(slots, slot_bytes_),
      pool_(num_layers_, num_experts_, slots, policy, this,
            {&accounting_, &hooks_}),
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
  return absl::OkStatus();
}

ExpertResidency::~ExpertResidency() {
  link_.reset();  // Runs every queued completion while the rest is alive.
}

kernels::Device ExpertResidency::device() const { return memory_->device(); }

absl::Status ExpertResidency::AttachCompute(kernels::Backend* backend,
                                            kernels::Stream* stream) {
  return memory_->AttachCompute(backend, stream);
}

void ExpertResidency::StartLoad(int slot, ExpertId id) {
  link_->Submit(
      id, memory_->data(slot),
      [this, slot](absl::Status status) {
        pool_.Complete(slot, std::move(status));
      },
      memory_->fence(slot));
}

void ExpertResidency::Released(int slot) { memory_->MarkReleased(slot); }

// ---------------------------------------------------------------- steps

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
  hooks_.Deliver(policy_);
  policy_->OnRoute(layer, experts, token_counts, hidden, n);
  for (int e : experts) {
    pool_.LoadNoWait({layer, e}, SlotPool::LoadKind::kDemand);
  }
}

void ExpertResidency::EndLayer(int layer) {
  pool_.Unprotect();
  hooks_.Deliver(policy_);
  policy_->OnLayerDone(layer);
}

// ---------------------------------------------------------------- experts

absl::StatusOr<const std::byte*> ExpertResidency::Acquire(ExpertId id) {
  policy_->OnAccess(id);
  absl::StatusOr<int> slot = pool_.Acquire(id);
  hooks_.Deliver(policy_);
  if (!slot.ok()) return slot.status();
  return memory_->data(*slot);
}

void ExpertResidency::Release(ExpertId id) { pool_.Release(id); }

// ---------------------------------------------------------------- control

bool ExpertResidency::IsResident(ExpertId id) const {
  return pool_.IsResident(id);
}

bool ExpertResidency::Prefetch(ExpertId id) {
  return pool_.LoadNoWait(id, SlotPool::LoadKind::kPrefetch);
}

bool ExpertResidency::Pin(ExpertId id) { return pool_.Pin(id); }

void ExpertResidency::Unpin(ExpertId id) { pool_.Unpin(id); }

void ExpertResidency::Evict(ExpertId id) { pool_.Evict(id); }

std::vector<int> ExpertResidency::PredictExperts(int layer, const float* hidden,
                                                 int64_t n, int k) {
  if (!predict_) return {};
  return predict_(layer, hidden, n, k);
}

// ---------------------------------------------------------------- stats

void ExpertResidency::WaitIdle() { pool_.WaitIdle(); }

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
