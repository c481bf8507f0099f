#include "policies/internal/fake_residency_control.h"

#include <algorithm>

namespace moeserve::policies::testing {

using engine::ExpertId;
using engine::SlotPool;

FakeResidencyControl::FakeResidencyControl(int layers, int experts, int k,
                                           int slots)
    : layers_(layers),
      experts_(experts),
      k_(k),
      slots_(slots),
      accounting_(slots, /*slot_bytes=*/1),
      activations_(layers * experts, 0) {}

FakeResidencyControl::~FakeResidencyControl() = default;

void FakeResidencyControl::set_policy(engine::OffloadPolicy* policy) {
  policy_ = policy;
  SlotPool::Loader* loader = this;
  SlotPool::Observer* recorder = this;
  pool_ = std::make_unique<SlotPool>(
      layers_, experts_, slots_, policy, loader,
      std::vector<SlotPool::Observer*>{&accounting_, &hooks_, recorder});
  policy->Attach(this);
}

void FakeResidencyControl::StartLoad(int slot, ExpertId) {
  pool_->Complete(slot, absl::OkStatus());
}

void FakeResidencyControl::OnEvicted(ExpertId id, bool, bool) {
  if (!in_evict_) victims.push_back(ToPair(id));
}

// ---------------------------------------------------------------- engine

void FakeResidencyControl::BeginStep(int64_t step) {
  step_ = step;
  std::fill(activations_.begin(), activations_.end(), 0);
  Deliver();
  policy_->OnStepBegin({.step = step});
}

void FakeResidencyControl::RunLayer(int layer, const std::vector<int>& experts,
                                    const float* hidden, int64_t n,
                                    std::vector<int> counts) {
  if (counts.empty()) counts.assign(experts.size(), 1);
  pool_->Protect(layer, experts);
  for (size_t i = 0; i < experts.size() && i < counts.size(); ++i) {
    if (counts[i] > 0)
      activations_[layer * experts_ + experts[i]] +=
          static_cast<uint32_t>(counts[i]);
  }
  Deliver();
  route_layer_ = layer;
  route_experts_ = experts;
  policy_->OnRoute(layer, experts, counts, hidden, n);
  route_layer_ = -1;
  route_experts_.clear();
  for (int e : experts) {
    if (inplace_.contains(e)) continue;
    pool_->LoadNoWait({layer, e}, SlotPool::LoadKind::kDemand);
  }
  for (int e : experts) {
    policy_->OnAccess({layer, e});
    if (inplace_.contains(e) && !pool_->IsResident({layer, e})) {
      accounting_.OnInPlace(0);  // served from the slow tier
      Deliver();
      continue;
    }
    const bool acquired = pool_->Acquire({layer, e}).ok();
    Deliver();
    if (acquired) pool_->Release({layer, e});
  }
  inplace_.clear();
  pool_->Unprotect();
  Deliver();
  policy_->OnLayerDone(layer);
}

void FakeResidencyControl::EndStep() {
  Deliver();
  policy_->OnStepEnd({.step = step_,
                      .num_layers = layers_,
                      .num_experts = experts_,
                      .activations = activations_});
}

void FakeResidencyControl::Lookahead(const engine::ExpertLookahead& lookahead) {
  Deliver();
  policy_->OnLookahead(lookahead);
}

// ---------------------------------------------------------------- control

bool FakeResidencyControl::IsResident(ExpertId id) const {
  return pool_->IsResident(id);
}

bool FakeResidencyControl::Prefetch(ExpertId id) { return Prefetch(id, 0); }

bool FakeResidencyControl::Prefetch(ExpertId id, int priority) {
  prefetches.push_back(ToPair(id));
  prefetch_priorities.push_back({ToPair(id), priority});
  return pool_->LoadNoWait(id, SlotPool::LoadKind::kPrefetch, priority);
}

int FakeResidencyControl::PrefetchBatch(std::span<const ExpertId> ids,
                                        int priority) {
  std::vector<Id> batch;
  for (const ExpertId& id : ids) {
    batch.push_back(ToPair(id));
    prefetches.push_back(ToPair(id));
    prefetch_priorities.push_back({ToPair(id), priority});
  }
  prefetch_batches.push_back({std::move(batch), priority});
  return pool_->LoadManyNoWait(ids, SlotPool::LoadKind::kPrefetch, priority);
}

bool FakeResidencyControl::Pin(ExpertId id) {
  pin_calls.push_back(ToPair(id));
  return pool_->Pin(id);
}

void FakeResidencyControl::Unpin(ExpertId id) {
  unpins.push_back(ToPair(id));
  pool_->Unpin(id);
}

void FakeResidencyControl::Evict(ExpertId id) {
  evict_calls.push_back(ToPair(id));
  in_evict_ = true;
  pool_->Evict(id);
  in_evict_ = false;
}

bool FakeResidencyControl::ComputeInPlace(ExpertId id) {
  inplace_calls.push_back(ToPair(id));
  if (!inplace_supported_ || id.layer != route_layer_ ||
      std::find(route_experts_.begin(), route_experts_.end(), id.expert) ==
          route_experts_.end() ||
      pool_->IsResident(id)) {
    return false;
  }
  inplace_.insert(id.expert);
  return true;
}

void FakeResidencyControl::SetPolicyGauge(std::string_view name,
                                          std::string_view, double value) {
  gauges[std::string(name)] = value;
}

std::vector<int> FakeResidencyControl::PredictExperts(int layer,
                                                      const float* hidden,
                                                      int64_t n, int k) {
  predict_calls.push_back({layer, hidden, n, k});
  auto it = predictions_.find(layer);
  return it == predictions_.end() ? std::vector<int>{} : it->second;
}

// ---------------------------------------------------------------- views

std::set<Id> FakeResidencyControl::resident() const {
  std::set<Id> out;
  for (const SlotPool::SlotView& s : pool_->slots()) {
    if (s.state != SlotPool::State::kEmpty) out.insert(ToPair(s.id));
  }
  return out;
}

std::set<Id> FakeResidencyControl::pinned() const {
  std::set<Id> out;
  for (const SlotPool::SlotView& s : pool_->slots()) {
    if (s.state != SlotPool::State::kEmpty && s.pins > 0) {
      out.insert(ToPair(s.id));
    }
  }
  return out;
}

engine::ResidencyStats FakeResidencyControl::stats() const {
  engine::ResidencyStats st;
  accounting_.FillCounters(&st);
  const SlotPool::Counts c = pool_->counts();
  st.prefetched_unused_resident = c.prefetched_unused;
  st.slots = slots_;
  st.slots_empty = c.empty;
  st.slots_loading = c.loading;
  st.slots_ready = c.ready;
  st.slots_in_use = c.in_use;
  return st;
}

}  // namespace moeserve::policies::testing
