#include "engine/offload/expert_residency.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "engine/offload/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "metrics/registry.h"

namespace moeserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LoadFixture;
using testing::LruTestPolicy;

class ResidencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = LoadFixture(true);
    ASSERT_NE(weights_, nullptr);
    auto host = NewHostSlowTier(weights_.get());
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
    blob_ = weights_->expert({0, 0}).bytes;
  }

  std::unique_ptr<ExpertResidency> Make(OffloadPolicy* policy, int slots,
                                        metrics::Registry* registry = nullptr,
                                        LinkOptions link = {}) {
    auto r = ExpertResidency::Create(weights_.get(), host_.get(), slots * blob_,
                                     link, policy, registry, "test");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  bool Same(const std::byte* p, ExpertId id) const {
    return std::memcmp(p, weights_->expert(id).data, blob_) == 0;
  }

  // One MoE layer as moe_model.cc runs it: BeginLayer, then Acquire /
  // check bytes / Release per expert, then EndLayer.
  void RunLayer(ExpertResidency* r, int layer, std::vector<int> experts,
                std::vector<int> counts = {}) {
    if (counts.empty()) counts.assign(experts.size(), 1);
    r->BeginLayer(layer, experts, counts, nullptr, 0);
    for (int e : experts) {
      absl::StatusOr<const std::byte*> p = r->Acquire({layer, e});
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_TRUE(Same(*p, {layer, e})) << layer << "," << e;
      r->Release({layer, e});
    }
    r->EndLayer(layer);
  }

  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<SlowTier> host_;
  size_t blob_ = 0;
};

TEST_F(ResidencyTest, RefusesCapacityBelowOneExpert) {
  LruTestPolicy policy;
  for (uint64_t cap : {uint64_t{0}, uint64_t{blob_ - 1}}) {
    auto r = ExpertResidency::Create(weights_.get(), host_.get(), cap, {},
                                     &policy, nullptr, "test");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("holds no expert"), std::string::npos);
  }
}

// Trace (2 layers x 8 experts, top-2), 3 slots, LRU on OnAccess ticks:
//  step 0 L0 {0,1}: 2 demand loads (slots 0,1)                 misses 2
//         L1 {2,3}: (1,2) -> free slot 2; (1,3) evicts (0,0)   misses 4
//  step 1 L0 {0,1}: (0,0) evicts (1,2) [(0,1) protected];
//                   (0,1) resident -> hit                       misses 5 hits 1
//         L1 {2,4}: (1,2) evicts (1,3); (1,4) evicts (0,0)     misses 7
TEST_F(ResidencyTest, AccountingOnScriptedTraceLru) {
  LruTestPolicy policy;
  metrics::Registry registry;
  auto r = Make(&policy, 3, &registry);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(policy.control_, r.get());
  r->BeginStep({.step = 0});
  RunLayer(r.get(), 0, {0, 1}, {3, 1});
  RunLayer(r.get(), 1, {2, 3}, {2, 2});
  r->EndStep();
  const std::vector<uint32_t> activations = policy.last_activations();
  ASSERT_EQ(activations.size(), 16u);
  EXPECT_EQ(activations[0], 3u);
  EXPECT_EQ(activations[1], 1u);
  EXPECT_EQ(activations[8 + 2], 2u);
  EXPECT_EQ(activations[8 + 4], 0u);
  r->BeginStep({.step = 1});
  RunLayer(r.get(), 0, {0, 1});
  RunLayer(r.get(), 1, {2, 4});
  r->EndStep();
  r->WaitIdle();
  ResidencyStats s = r->stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 7u);
  EXPECT_EQ(s.hits + s.misses, 8u);  // Acquire calls.
  EXPECT_EQ(s.link_bytes, 7 * blob_);
  EXPECT_EQ(s.link_transfers, 7u);
  EXPECT_EQ(s.prefetch_loads, 0u);
  EXPECT_EQ(s.demand_evicted_unused, 0u);
  EXPECT_EQ(s.slots, 3);
  EXPECT_EQ(s.capacity_bytes, 3 * blob_);
  EXPECT_EQ(s.slots_ready, 3);
  EXPECT_TRUE(r->IsResident({0, 1}));
  EXPECT_TRUE(r->IsResident({1, 2}));
  EXPECT_TRUE(r->IsResident({1, 4}));
  EXPECT_FALSE(r->IsResident({0, 0}));
  EXPECT_FALSE(r->IsResident({1, 3}));
  // The metrics moved with the stats.
  auto requests = registry.AddCounter("moeserve_expert_requests_total", "",
                                      {"policy", "result"});
  ASSERT_TRUE(requests.ok());
  EXPECT_EQ((*(*requests)->WithLabels({"test", "hit"}))->Value(), 1);
  EXPECT_EQ((*(*requests)->WithLabels({"test", "miss"}))->Value(), 7);
  auto bytes = registry.AddCounter("moeserve_link_bytes_total", "",
                                   {"policy", "direction"});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*(*bytes)->WithLabels({"test", "h2d"}))->Value(), 7.0 * blob_);
  const std::string text = registry.Serialize();
  EXPECT_NE(text.find("moeserve_expert_cache_capacity_bytes{policy=\"test\"}"),
            std::string::npos);
  EXPECT_NE(text.find("moeserve_expert_cache_bytes{policy=\"test\",state="
                      "\"ready\"}"),
            std::string::npos);
  EXPECT_EQ(text.find("moeserve_link_emulation_info{"), std::string::npos);
}

// Same policy plus prefetch of (l+1, e) for each routed e (a started
// prefetch takes a tick like an access), 4 slots:
//  step 0 L0 {0,1}: prefetch (1,0) t1,(1,1) t2 -> slots 0,1; demand (0,0)
//                   t3, (0,1) t4 -> slots 2,3            misses 2 prefetch 2
//         L1 {2,3}: (1,2) evicts (1,0) (oldest, wasted); (1,3) evicts (1,1)
//                   (wasted); t5, t6                     misses 4 wasted 2
//  step 1 L0 {0,1}: prefetch (1,0) evicts (1,2), (1,1) evicts (1,3);
//                   (0,0),(0,1) hits                     prefetch 4 hits 2
//         L1 {0,1}: both hits, both prefetch used        hits 4 used 2
TEST_F(ResidencyTest, AccountingOnScriptedTraceWithPrefetch) {
  LruTestPolicy policy(/*prefetch_next=*/true);
  metrics::Registry registry;
  auto r = Make(&policy, 4, &registry);
  ASSERT_NE(r, nullptr);
  // The script assumes each layer's prefetches land before the next layer
  // needs slots (a loading slot is not evictable); on a loaded machine the
  // link worker may lag, so wait for it between layers.
  RunLayer(r.get(), 0, {0, 1});
  r->WaitIdle();
  RunLayer(r.get(), 1, {2, 3});
  r->WaitIdle();
  RunLayer(r.get(), 0, {0, 1});
  r->WaitIdle();
  RunLayer(r.get(), 1, {0, 1});
  r->WaitIdle();
  ResidencyStats s = r->stats();
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.hits_loading, 0u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.prefetch_loads, 4u);
  EXPECT_EQ(s.prefetch_used, 2u);
  EXPECT_EQ(s.prefetch_wasted, 2u);
  EXPECT_EQ(s.prefetched_unused_resident, 0u);
  EXPECT_EQ(s.link_bytes, (4 + 4) * blob_);
  EXPECT_EQ(s.prefetch_used + s.prefetch_wasted + s.prefetched_unused_resident,
            s.prefetch_loads);
  auto prefetch =
      registry.AddCounter("moeserve_prefetch_total", "", {"policy", "outcome"});
  ASSERT_TRUE(prefetch.ok());
  EXPECT_EQ((*(*prefetch)->WithLabels({"test", "used"}))->Value(), 2);
  EXPECT_EQ((*(*prefetch)->WithLabels({"test", "wasted"}))->Value(), 2);
}

// A policy that always names the expert in use as its victim.
class GreedyPolicy : public LruTestPolicy {
 public:
  void ChooseVictims(std::span<const ExpertId> candidates, int count,
                     std::vector<ExpertId>* victims) override {
    for (const ExpertId& c : candidates) {
      EXPECT_FALSE((c == ExpertId{0, 0})) << "in-use expert offered";
    }
    victims->push_back({0, 0});
  }
};

TEST_F(ResidencyTest, ExpertInUseIsNeverEvicted) {
  GreedyPolicy policy;
  auto r = Make(&policy, 2);
  ASSERT_NE(r, nullptr);
  absl::StatusOr<const std::byte*> a = r->Acquire({0, 0});
  ASSERT_TRUE(a.ok());
  for (int e = 1; e < 8; ++e) {  // Every one a miss that needs a victim.
    absl::StatusOr<const std::byte*> p = r->Acquire({1, e});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(Same(*p, {1, e}));
    r->Release({1, e});
    r->Evict({0, 0});  // In use: no-op.
    EXPECT_TRUE(r->IsResident({0, 0}));
    EXPECT_TRUE(Same(*a, {0, 0}));
  }
  absl::StatusOr<const std::byte*> c = r->Acquire({1, 0});
  ASSERT_TRUE(c.ok());
  absl::StatusOr<const std::byte*> d = r->Acquire({0, 5});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(d.status().message().find("fast tier of 2 slots too small"),
            std::string::npos)
      << d.status();
  EXPECT_TRUE(Same(*a, {0, 0}));
  r->Release({1, 0});
  r->Release({0, 0});
  ResidencyStats s = r->stats();
  EXPECT_EQ(s.acquire_failures, 1u);
  EXPECT_EQ(s.hits + s.misses, 9u);  // Successful Acquires.
  EXPECT_EQ(s.slots_in_use, 0);
}

TEST_F(ResidencyTest, PinnedExpertIsNeverEvicted) {
  LruTestPolicy policy;
  auto r = Make(&policy, 2);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Pin({0, 3}));
  for (int e = 0; e < 8; ++e) RunLayer(r.get(), 1, {e});
  EXPECT_TRUE(r->IsResident({0, 3}));
  RunLayer(r.get(), 0, {3});
  r->Unpin({0, 3});
  r->Evict({0, 3});
  EXPECT_FALSE(r->IsResident({0, 3}));
  ResidencyStats s = r->stats();
  EXPECT_EQ(s.prefetch_loads, 1u);  // The pin's load.
  EXPECT_EQ(s.prefetch_used, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 8u);
}

// Logs every hook (LRU victims), and checks they all come on one thread.
class HookLog : public LruTestPolicy {
 public:
  void OnStepBegin(const StepInfo&) override { Log("begin"); }
  void OnRoute(int layer, std::span<const int> experts,
               std::span<const int> counts, const float* hidden,
               int64_t n) override {
    Log(absl::StrCat("route ", layer));
    LruTestPolicy::OnRoute(layer, experts, counts, hidden, n);
  }
  void OnAccess(ExpertId id) override {
    Log(absl::StrCat("access ", id.layer, ",", id.expert));
    LruTestPolicy::OnAccess(id);
  }
  void OnLayerDone(int layer) override { Log(absl::StrCat("done ", layer)); }
  void OnStepEnd(const StepStats&) override { Log("end"); }
  void OnLoaded(ExpertId id) override {
    Log(absl::StrCat("loaded ", id.layer, ",", id.expert));
  }
  void OnEvicted(ExpertId id) override {
    Log(absl::StrCat("evicted ", id.layer, ",", id.expert));
  }
  void ChooseVictims(std::span<const ExpertId> candidates, int count,
                     std::vector<ExpertId>* victims) override {
    Log("victims");
    LruTestPolicy::ChooseVictims(candidates, count, victims);
  }

  std::vector<std::string> log;

 private:
  void Log(std::string line) {
    EXPECT_EQ(std::this_thread::get_id(), thread_) << line;
    log.push_back(std::move(line));
  }
  const std::thread::id thread_ = std::this_thread::get_id();
};

// OnLoaded / OnEvicted arrive on the caller's thread at the delivery points:
// before OnStepBegin, OnRoute, OnLayerDone, OnStepEnd and at the end of an
// Acquire; never from inside a ResidencyControl call.
TEST_F(ResidencyTest, LoadAndEvictionHooksComeAtTheDeliveryPoints) {
  HookLog policy;
  auto r = Make(&policy, 2);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Pin({1, 3}));
  r->WaitIdle();
  EXPECT_THAT(policy.log, ::testing::IsEmpty());
  r->BeginStep({.step = 0});
  RunLayer(r.get(), 0, {2});
  RunLayer(r.get(), 0, {5});  // (0, 2) makes room; (1, 3) is pinned.
  r->Evict({0, 5});
  EXPECT_EQ(policy.log.back(), "done 0");  // Not reported from Evict.
  r->EndStep();
  EXPECT_THAT(policy.log, ElementsAre("loaded 1,3", "begin",                  //
                                      "route 0", "access 0,2", "loaded 0,2",  //
                                      "done 0",                               //
                                      "route 0", "victims", "access 0,5",     //
                                      "evicted 0,2", "loaded 0,5", "done 0",  //
                                      "evicted 0,5", "end"));
}

// One slot and a top-2 layer: the protected set must not block progress.
TEST_F(ResidencyTest, OneSlotMakesProgressOnATopTwoLayer) {
  LruTestPolicy policy;
  auto r = Make(&policy, 1);
  ASSERT_NE(r, nullptr);
  RunLayer(r.get(), 0, {2, 5});
  RunLayer(r.get(), 1, {0, 7});
  ResidencyStats s = r->stats();
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.link_bytes, 4 * blob_);
}

TEST_F(ResidencyTest, PrefetchNeverWaitsOrEvictsProtectedOrInUse) {
  LruTestPolicy policy;
  auto r = Make(&policy, 2);
  ASSERT_NE(r, nullptr);
  r->BeginLayer(0, std::vector<int>{0, 1}, std::vector<int>{1, 1}, nullptr, 0);
  EXPECT_FALSE(r->Prefetch({1, 0}));  // Both slots protected.
  EXPECT_FALSE(r->Prefetch({0, 0}));  // Already resident.
  for (int e : {0, 1}) {
    ASSERT_TRUE(r->Acquire({0, e}).ok());
    r->Release({0, e});
  }
  r->EndLayer(0);
  EXPECT_TRUE(r->Prefetch({1, 0}));
  r->WaitIdle();
  EXPECT_EQ(r->stats().prefetch_loads, 1u);
  EXPECT_EQ(r->stats().prefetched_unused_resident, 1u);
}

TEST_F(ResidencyTest, DiskTierBlobsEqualPackedBlobs) {
  auto unpacked = LoadFixture(false);
  auto disk = NewDiskSlowTier(unpacked.get());
  ASSERT_TRUE(disk.ok()) << disk.status();
  LruTestPolicy policy;
  auto r = ExpertResidency::Create(unpacked.get(), disk->get(), 3 * blob_, {},
                                   &policy, nullptr, "disk");
  ASSERT_TRUE(r.ok()) << r.status();
  for (int round = 0; round < 2; ++round) {
    for (int l = 0; l < 2; ++l) {
      for (int e = 0; e < 8; ++e) {
        absl::StatusOr<const std::byte*> p = (*r)->Acquire({l, e});
        ASSERT_TRUE(p.ok()) << p.status();
        EXPECT_TRUE(Same(*p, {l, e})) << l << "," << e;
        (*r)->Release({l, e});
      }
    }
  }
  EXPECT_EQ((*r)->stats().misses, 32u);
}

TEST_F(ResidencyTest, EmulationIsExportedAndSlowsLoads) {
  LruTestPolicy policy;
  metrics::Registry registry;
  const LinkOptions link{.gbps = 2, .latency_us = 500};
  auto r = Make(&policy, 2, &registry, link);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->link_emulation_on());
  RunLayer(r.get(), 0, {0, 1});
  ResidencyStats s = r->stats();
  const double per = 500e-6 + blob_ / 2e9;
  EXPECT_GE(s.link_busy_seconds, 2 * per);
  EXPECT_GT(s.stall_seconds, 0);
  // What the speculative governor subtracts from a pass's time.
  EXPECT_DOUBLE_EQ(r->link_stall_seconds(), s.stall_seconds);
  EXPECT_NE(registry.Serialize().find(
                "moeserve_link_emulation_info{policy=\"test\",gbps=\"2\","
                "latency_us=\"500\"} 1"),
            std::string::npos)
      << registry.Serialize();
}

// The host tier, but the Read of expert `gate` waits for Open(); records
// the order of Reads (the order the single link worker starts transfers).
class GateTier : public SlowTier {
 public:
  GateTier(SlowTier* inner, ExpertId gate) : inner_(inner), gate_(gate) {}
  std::string_view name() const override { return "gate"; }
  absl::Status Read(ExpertId id, std::byte* dst) override {
    {
      base::MutexLock lock(&mu_);
      order_.push_back(absl::StrCat(id.layer, ",", id.expert));
      if (id == gate_) {
        entered_ = true;
        cv_.SignalAll();
        while (!open_) cv_.Wait(&mu_);
      }
    }
    return inner_->Read(id, dst);
  }
  void WaitEntered() {
    base::MutexLock lock(&mu_);
    while (!entered_) cv_.Wait(&mu_);
  }
  void Open() {
    base::MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  std::vector<std::string> order() {
    base::MutexLock lock(&mu_);
    return order_;
  }

 private:
  SlowTier* const inner_;
  const ExpertId gate_;
  base::Mutex mu_;
  base::CondVar cv_;
  bool entered_ ABSL_GUARDED_BY(mu_) = false;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
};

class LaneResidencyTest : public ResidencyTest {
 protected:
  // `slots` slots, one link worker; the load of `gate` holds the worker.
  std::unique_ptr<ExpertResidency> MakeGated(OffloadPolicy* policy, int slots,
                                             ExpertId gate,
                                             metrics::Registry* registry) {
    gate_ = std::make_unique<GateTier>(host_.get(), gate);
    auto r = ExpertResidency::Create(weights_.get(), gate_.get(), slots * blob_,
                                     {}, policy, registry, "test");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  std::unique_ptr<GateTier> gate_;
};

// Queued prefetches go by priority; an acquire of a queued prefetch is a
// hit_loading and promotes it ahead of the others; a cancelled one moves no
// bytes. link_transfers == misses + prefetch_loads - prefetch_cancelled.
TEST_F(LaneResidencyTest, PriorityPromotionAndCancelThroughTheLink) {
  LruTestPolicy policy;
  metrics::Registry registry;
  auto r = MakeGated(&policy, 4, {1, 0}, &registry);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Prefetch({1, 0}));
  gate_->WaitEntered();  // The worker holds (1, 0); the rest queue.
  ASSERT_TRUE(r->Prefetch({1, 1}, /*priority=*/0));
  ASSERT_TRUE(r->Prefetch({1, 2}, /*priority=*/9));
  ASSERT_TRUE(r->Prefetch({1, 3}, /*priority=*/5));
  EXPECT_TRUE(r->IsResident({1, 1}));
  EXPECT_FALSE(r->IsReady({1, 1}));
  EXPECT_FALSE(r->CancelPrefetch({1, 0}));  // Started.
  EXPECT_FALSE(r->CancelPrefetch({0, 0}));  // Not resident.
  EXPECT_TRUE(r->CancelPrefetch({1, 3}));
  EXPECT_FALSE(r->IsResident({1, 3}));
  std::thread acquirer([&] {
    absl::StatusOr<const std::byte*> p = r->Acquire({1, 1});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(Same(*p, {1, 1}));
    r->Release({1, 1});
  });
  // The acquire counts its hit_loading once it has promoted the load.
  while (r->stats().hits_loading == 0) std::this_thread::yield();
  EXPECT_FALSE(r->CancelPrefetch({1, 1}));  // Promoted and waited for.
  gate_->Open();
  acquirer.join();
  r->WaitIdle();
  EXPECT_THAT(gate_->order(), ElementsAre("1,0", "1,1", "1,2"));
  EXPECT_TRUE(r->IsReady({1, 2}));
  const ResidencyStats s = r->stats();
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.hits_loading, 1u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.prefetch_loads, 4u);
  EXPECT_EQ(s.prefetch_cancelled, 1u);
  EXPECT_EQ(s.prefetch_used, 1u);
  EXPECT_EQ(s.prefetched_unused_resident, 2u);
  EXPECT_EQ(s.prefetch_used + s.prefetch_wasted + s.prefetch_cancelled +
                s.prefetched_unused_resident,
            s.prefetch_loads);
  EXPECT_EQ(s.link_transfers,
            s.misses + s.prefetch_loads - s.prefetch_cancelled);
  EXPECT_EQ(s.link_transfers, 3u);
  EXPECT_EQ(s.link_bytes, s.link_transfers * blob_);
  EXPECT_EQ(s.slots_empty, 1);
  auto requests = registry.AddCounter("moeserve_expert_requests_total", "",
                                      {"policy", "result"});
  ASSERT_TRUE(requests.ok());
  EXPECT_EQ((*(*requests)->WithLabels({"test", "hit_loading"}))->Value(), 1);
  EXPECT_EQ((*(*requests)->WithLabels({"test", "hit"}))->Value(), 0);
  auto prefetch =
      registry.AddCounter("moeserve_prefetch_total", "", {"policy", "outcome"});
  ASSERT_TRUE(prefetch.ok());
  EXPECT_EQ((*(*prefetch)->WithLabels({"test", "cancelled"}))->Value(), 1);
  EXPECT_EQ((*(*prefetch)->WithLabels({"test", "used"}))->Value(), 1);
}

// BeginLayer's misses go to the link as one demand batch, ahead of queued
// prefetches; a routed expert whose prefetch is still queued is promoted.
TEST_F(LaneResidencyTest, LayerMissesGoAheadOfQueuedPrefetches) {
  LruTestPolicy policy;
  auto r = MakeGated(&policy, 6, {1, 0}, nullptr);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Prefetch({1, 0}));
  gate_->WaitEntered();
  ASSERT_TRUE(r->Prefetch({1, 1}, /*priority=*/9));
  ASSERT_TRUE(r->Prefetch({0, 4}, /*priority=*/0));
  r->BeginLayer(0, std::vector<int>{2, 3, 4}, std::vector<int>{1, 1, 1},
                nullptr, 0);
  gate_->Open();
  r->WaitIdle();
  // (0, 4) was promoted while the batch of (0, 2), (0, 3) was being put
  // together, so it joined the demand lane first.
  EXPECT_THAT(gate_->order(), ElementsAre("1,0", "0,4", "0,2", "0,3", "1,1"));
  for (int e : {2, 3, 4}) {
    absl::StatusOr<const std::byte*> p = r->Acquire({0, e});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(Same(*p, {0, e}));
    r->Release({0, e});
  }
  r->EndLayer(0);
  const ResidencyStats s = r->stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.hits, 1u);  // (0, 4), ready by then.
  EXPECT_EQ(s.hits_loading, 0u);
  EXPECT_EQ(s.link_transfers, s.misses + s.prefetch_loads);
}

// The draft view: resident experts only, held in use, no statistics and
// no policy hooks (queued OnLoaded waits for the target's next point).
TEST_F(ResidencyTest, DraftViewReadsResidentExpertsWithoutCounting) {
  HookLog policy;
  auto r = Make(&policy, 2);
  ASSERT_NE(r, nullptr);
  r->BeginStep({.step = 0});
  RunLayer(r.get(), 0, {1});
  ASSERT_TRUE(r->Prefetch({1, 6}));
  r->WaitIdle();
  const ResidencyStats before = r->stats();
  const size_t hooks = policy.log.size();

  ExpertProvider* draft = r->draft_experts();
  ASSERT_NE(draft, nullptr);
  EXPECT_EQ(draft->device(), r->device());
  draft->BeginStep({.step = 7});
  draft->BeginLayer(1, std::vector<int>{6}, std::vector<int>{1}, nullptr, 0);
  absl::StatusOr<const std::byte*> a = draft->Acquire({0, 1});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(Same(*a, {0, 1}));
  absl::StatusOr<const std::byte*> b = draft->Acquire({1, 6});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(Same(*b, {1, 6}));
  absl::StatusOr<const std::byte*> c = draft->Acquire({0, 5});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("(0, 5)"), std::string::npos)
      << c.status();
  EXPECT_FALSE(r->IsResident({0, 5}));  // It never loads.
  r->Evict({0, 1});                     // In use by the draft: no-op.
  EXPECT_TRUE(r->IsResident({0, 1}));
  draft->Release({0, 1});
  draft->Release({1, 6});
  draft->EndLayer(1);
  draft->EndStep();

  const ResidencyStats after = r->stats();
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.hits_loading, before.hits_loading);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.acquire_failures, before.acquire_failures);
  EXPECT_EQ(after.stall_seconds, before.stall_seconds);
  EXPECT_EQ(after.prefetch_used, before.prefetch_used);
  EXPECT_EQ(after.prefetched_unused_resident, 1u);
  EXPECT_EQ(after.link_transfers, before.link_transfers);
  EXPECT_EQ(after.slots_in_use, 0);
  EXPECT_EQ(policy.log.size(), hooks);  // No hook, not even OnLoaded.
  r->EndStep();  // The target's next delivery point brings (1, 6)'s load.
  EXPECT_THAT(
      std::vector<std::string>(policy.log.begin() + hooks, policy.log.end()),
      ElementsAre("loaded 1,6", "end"));
  r->Evict({0, 1});
  EXPECT_FALSE(r->IsResident({0, 1}));
}

// Asks for in-place compute of the experts in `inplace` when they are routed
// (and records what the control answered); LRU otherwise.
class InPlaceTestPolicy : public LruTestPolicy {
 public:
  void OnRoute(int layer, std::span<const int> experts, std::span<const int>,
               const float*, int64_t) override {
    for (int e : experts) {
      if (inplace.count({layer, e}) != 0) {
        answers.push_back(control_->ComputeInPlace({layer, e}));
      }
    }
  }
  void OnStepBegin(const StepInfo&) override {
    // Outside OnRoute: refused.
    outside_route_answer = control_->ComputeInPlace({0, 0});
  }
  std::set<std::pair<int, int>> inplace;
  std::vector<bool> answers;
  bool outside_route_answer = true;
};

TEST_F(ResidencyTest, ComputeInPlaceServesTheSlowTierWithoutMovingBytes) {
  InPlaceTestPolicy policy;
  policy.inplace = {{0, 2}, {1, 5}};
  metrics::Registry registry;
  auto r = Make(&policy, 3, &registry, LinkOptions{.inplace_compute_ratio = 1});
  ASSERT_NE(r, nullptr);
  r->BeginStep({.step = 0});
  RunLayer(r.get(), 0, {1, 2});  // (0,2) in place, (0,1) a miss
  RunLayer(r.get(), 1, {3, 5});  // (1,5) in place, (1,3) a miss
  r->EndStep();
  r->WaitIdle();
  EXPECT_FALSE(policy.outside_route_answer);
  EXPECT_THAT(policy.answers, ElementsAre(true, true));
  ResidencyStats s = r->stats();
  EXPECT_EQ(s.inplace, 2u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.link_transfers, 2u);
  EXPECT_EQ(s.link_bytes, 2 * blob_);
  EXPECT_FALSE(r->IsResident({0, 2}));
  EXPECT_FALSE(r->IsResident({1, 5}));
  EXPECT_TRUE(r->IsResident({0, 1}));
  // A resident expert is refused: (0,1) is resident now.
  policy.inplace = {{0, 1}};
  policy.answers.clear();
  r->BeginStep({.step = 1});
  RunLayer(r.get(), 0, {1});
  r->EndStep();
  EXPECT_THAT(policy.answers, ElementsAre(false));
  EXPECT_EQ(r->stats().hits, 1u);
  EXPECT_EQ(r->stats().inplace, 2u);
  const std::string text = registry.Serialize();
  EXPECT_NE(text.find("moeserve_expert_requests_total{policy=\"test\","
                      "result=\"inplace\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("moeserve_inplace_compute_ratio{policy=\"test\"} 1"),
            std::string::npos)
      << text;
  const ExpertCosts costs = r->expert_costs();
  EXPECT_GT(costs.link_seconds, 0);
  EXPECT_GT(costs.fast_compute_seconds, 0);
  EXPECT_GT(costs.inplace_compute_seconds, 0);
}

// What RunTimedLayer measured, in seconds.
struct TimedLayer {
  double inplace = 0;    // the in-place expert's Acquire to Release
  double layer = 0;      // BeginLayer to the end of EndLayer
  double end_layer = 0;  // EndLayer alone (the emulated wait)
};

// One layer: `inplace_ms` of "compute" on in-place expert 2, `fast_ms` on
// fast-tier expert 3 (its demand load finishes first). Sleeps may overrun
// on a loaded machine, so the checks use what was measured.
TimedLayer RunTimedLayer(ExpertResidency* r, int inplace_ms, int fast_ms) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  TimedLayer out;
  r->BeginStep({.step = 0});
  const Clock::time_point layer_start = Clock::now();
  r->BeginLayer(0, std::vector<int>{2, 3}, std::vector<int>{1, 1}, nullptr, 0);
  r->WaitIdle();  // (0,3)'s demand load
  const Clock::time_point inplace_start = Clock::now();
  absl::StatusOr<const std::byte*> p = r->Acquire({0, 2});
  EXPECT_TRUE(p.ok()) << p.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(inplace_ms));
  r->Release({0, 2});
  out.inplace = since(inplace_start);
  p = r->Acquire({0, 3});
  EXPECT_TRUE(p.ok()) << p.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(fast_ms));
  r->Release({0, 3});
  const Clock::time_point end_start = Clock::now();
  r->EndLayer(0);
  out.end_layer = since(end_start);
  out.layer = since(layer_start);
  r->EndStep();
  return out;
}

TEST_F(ResidencyTest, InPlaceComputeIsChargedTheRatioOverlappedWithTheLayer) {
  InPlaceTestPolicy policy;
  policy.inplace = {{0, 2}};
  auto r = Make(&policy, 3, nullptr, LinkOptions{.inplace_compute_ratio = 3});
  ASSERT_NE(r, nullptr);
  // Slow side 3 x ~20 ms against a fast side of ~5 ms: the layer lasts as
  // long as the slow side, and EndLayer waits for it.
  const TimedLayer t = RunTimedLayer(r.get(), 20, 5);
  EXPECT_GE(t.layer, 3 * t.inplace - 0.002);
  ResidencyStats s = r->stats();
  EXPECT_EQ(s.inplace, 1u);
  EXPECT_GE(s.inplace_seconds, 3 * 0.020);
  EXPECT_LE(s.inplace_seconds, 3 * t.inplace + 1e-6);
  EXPECT_LE(s.inplace_wait_seconds, t.end_layer);
  // Unless the fast side overran past the slow side, EndLayer waited.
  if (t.layer - t.end_layer < 3 * t.inplace - 0.005) {
    EXPECT_GT(s.inplace_wait_seconds, 0);
  }
  EXPECT_EQ(s.link_transfers, 1u);  // (0,3) only
}

TEST_F(ResidencyTest, InPlaceComputeHiddenUnderALongerFastSide) {
  InPlaceTestPolicy policy;
  policy.inplace = {{0, 2}};
  auto r = Make(&policy, 3, nullptr, LinkOptions{.inplace_compute_ratio = 3});
  ASSERT_NE(r, nullptr);
  // Slow side 3 x ~2 ms against a fast side of ~50 ms: no wait (unless the
  // in-place sleep overran past a third of the fast side).
  const TimedLayer t = RunTimedLayer(r.get(), 2, 50);
  if (3 * t.inplace < 0.050) {
    EXPECT_EQ(r->stats().inplace_wait_seconds, 0);
  }
  EXPECT_EQ(r->stats().inplace, 1u);
}

TEST_F(ResidencyTest, InPlaceFromTheDiskTierReadsTheBlob) {
  auto unpacked = LoadFixture(false);
  auto disk = NewDiskSlowTier(unpacked.get());
  ASSERT_TRUE(disk.ok()) << disk.status();
  InPlaceTestPolicy policy;
  policy.inplace = {{1, 4}};
  auto r = ExpertResidency::Create(unpacked.get(), disk->get(), 3 * blob_,
                                   LinkOptions{.inplace_compute_ratio = 1},
                                   &policy, nullptr, "disk");
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->BeginStep({.step = 0});
  RunLayer(r->get(), 1, {4, 6});
  (*r)->EndStep();
  EXPECT_EQ((*r)->stats().inplace, 1u);
  EXPECT_EQ((*r)->stats().misses, 1u);
}

// Hybrid execution (EnableHybrid): on a fast tier in a backend's memory
// (the CPU backend standing in for a GPU), in-place compute needs the host
// pool; with it, ComputeInPlace is allowed, ComputesOnHost is final for the
// layer, several in-place experts are held at once, the host's measured
// seconds are the costs (no ratio), and cpu_moe_layers keeps a layer's
// experts out of the fast tier.
TEST_F(ResidencyTest, HybridHostComputeOnABackendFastTier) {
  kernels::cpu::CpuBackend device({.num_threads = 1});
  InPlaceTestPolicy policy;
  policy.inplace = {{1, 2}, {1, 5}};
  auto made = ExpertResidency::Create(weights_.get(), host_.get(), 3 * blob_,
                                      LinkOptions{.inplace_compute_ratio = 8},
                                      &policy, nullptr, "test", &device);
  ASSERT_TRUE(made.ok()) << made.status();
  ExpertResidency& r = **made;
  EXPECT_EQ(r.host_compute(), nullptr);
  // Out of range, and a second call, are refused by name.
  ExpertResidency::HybridOptions bad;
  bad.cpu_moe_layers = weights_->num_layers() + 1;
  absl::Status st = r.EnableHybrid(std::move(bad));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("cpu_moe_layers"));
  ExpertResidency::HybridOptions options;
  options.host = std::make_unique<kernels::cpu::CpuBackend>(
      kernels::cpu::CpuBackendOptions{.num_threads = 1});
  options.cpu_moe_layers = 1;
  ASSERT_TRUE(r.EnableHybrid(std::move(options)).ok());
  EXPECT_EQ(r.EnableHybrid({}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_NE(r.host_compute(), nullptr);
  const ExpertCosts start = r.expert_costs();
  EXPECT_GT(start.host_seconds_first_row, 0);
  EXPECT_GE(start.host_seconds_per_row, 0);
  EXPECT_GT(start.HostSeconds(8), start.HostSeconds(1) - 1e-12);

  // Layer 0 is a host layer: never loaded, prefetched or pinned.
  EXPECT_FALSE(r.Prefetch({0, 1}));
  EXPECT_FALSE(r.Pin({0, 1}));
  EXPECT_EQ(r.PrefetchBatch(std::vector<ExpertId>{{0, 1}, {0, 3}}, 0), 0);
  r.BeginStep({.step = 0});
  r.BeginLayer(0, std::vector<int>{1, 3}, std::vector<int>{1, 2}, nullptr, 0);
  EXPECT_TRUE(r.ComputesOnHost({0, 1}));
  EXPECT_TRUE(r.ComputesOnHost({0, 3}));
  // Both held at once (the hybrid path acquires the layer's host experts
  // together): each its own bytes.
  absl::StatusOr<const std::byte*> a = r.Acquire({0, 1});
  absl::StatusOr<const std::byte*> b = r.Acquire({0, 3});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(Same(*a, {0, 1}));
  EXPECT_TRUE(Same(*b, {0, 3}));
  r.RecordHostCompute({0, 1}, 1, 0.004);
  r.RecordHostCompute({0, 3}, 2, 0.002);
  r.Release({0, 3});
  r.Release({0, 1});
  r.EndLayer(0);
  // Layer 1: the policy's in-place experts go to the host, the other one
  // is a miss on the device side.
  r.BeginLayer(1, std::vector<int>{2, 4, 5}, std::vector<int>{1, 1, 1}, nullptr,
               0);
  EXPECT_THAT(policy.answers, ElementsAre(true, true));
  EXPECT_TRUE(r.ComputesOnHost({1, 2}));
  EXPECT_FALSE(r.ComputesOnHost({1, 4}));
  for (int e : {2, 5}) {
    absl::StatusOr<const std::byte*> p = r.Acquire({1, e});
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(Same(*p, {1, e}));
    r.RecordHostCompute({1, e}, 1, 0.001);
    r.Release({1, e});
  }
  absl::StatusOr<const std::byte*> p = r.Acquire({1, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  r.Release({1, 4});
  r.EndLayer(1);
  r.EndStep();
  r.WaitIdle();
  const ResidencyStats stats = r.stats();
  EXPECT_EQ(stats.inplace, 4u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.link_transfers, 1u);
  // The recorded seconds, not 8x anything: 4 + 2 + 1 + 1 ms.
  EXPECT_NEAR(stats.inplace_seconds, 0.008, 1e-3);
  EXPECT_EQ(stats.inplace_wait_seconds, 0);
  EXPECT_FALSE(r.IsResident({0, 1}));
  EXPECT_FALSE(r.IsResident({1, 2}));
}

// On a host fast tier the static placement needs no host pool (the fast
// tier's own CPU computes in place), and a host pool is refused.
TEST_F(ResidencyTest, CpuMoeLayersOnAHostFastTier) {
  InPlaceTestPolicy policy;
  policy.inplace = {{0, 2}};
  auto made = ExpertResidency::Create(weights_.get(), host_.get(), 3 * blob_,
                                      {}, &policy, nullptr, "test");
  ASSERT_TRUE(made.ok()) << made.status();
  ExpertResidency::HybridOptions with_host;
  with_host.host = std::make_unique<kernels::cpu::CpuBackend>(
      kernels::cpu::CpuBackendOptions{.num_threads = 1});
  EXPECT_EQ((*made)->EnableHybrid(std::move(with_host)).code(),
            absl::StatusCode::kInvalidArgument);
  ExpertResidency::HybridOptions placement;
  placement.cpu_moe_layers = 1;
  EXPECT_TRUE((*made)->EnableHybrid(std::move(placement)).ok());
  EXPECT_EQ((*made)->host_compute(), nullptr);
  RunLayer(made->get(), 0, {2, 3});
  EXPECT_EQ((*made)->stats().inplace, 2u);
  EXPECT_EQ((*made)->stats().misses, 0u);
}

TEST_F(ResidencyTest, RefusesAnInPlaceRatioBelowOne) {
  LruTestPolicy policy;
  auto r = ExpertResidency::Create(weights_.get(), host_.get(), 3 * blob_,
                                   LinkOptions{.inplace_compute_ratio = 0.5},
                                   &policy, nullptr, "test");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("inplace_compute_ratio"),
            std::string::npos);
}

TEST_F(ResidencyTest, PolicyGaugeIsExportedWithTheEngineLabel) {
  LruTestPolicy policy;
  metrics::Registry registry;
  auto r = Make(&policy, 3, &registry);
  ASSERT_NE(r, nullptr);
  r->SetPolicyGauge("moeserve_spec_cutoff_layer", "L.", 3);
  r->SetPolicyGauge("moeserve_spec_cutoff_layer", "L.", 5);
  r->SetPolicyGauge("bad name", "refused, logged", 1);
  const std::string text = registry.Serialize();
  EXPECT_NE(text.find("moeserve_spec_cutoff_layer{policy=\"test\"} 5"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("bad name"), std::string::npos);
}

}  // namespace
}  // namespace moeserve::engine
