// HostExperts: a layer's host experts computed on the worker thread give
// the rows the CPU backend's own grouped op gives (bit for bit: the same
// kernels), layer after layer, with each expert's seconds; refusals are
// clear. Also under TSan (deploy/run_tests.sh): Start / Wait hand the
// layer between two threads.
#include "engine/host_experts.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine {
namespace {

using kernels::DType;
using kernels::Tensor;

constexpr int64_t kHidden = 64, kFfn = 32;
constexpr kernels::Device kCpu = kernels::Device::kCpu;

uint16_t Bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// One packed bf16 expert (gate, up, down), random.
std::vector<uint16_t> RandomExpert(std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.1f);
  std::vector<uint16_t> blob(3 * kFfn * kHidden);
  for (uint16_t& w : blob) w = Bf16(dist(rng));
  return blob;
}

class HostExpertsTest : public ::testing::Test {
 protected:
  kernels::cpu::CpuBackend host_{{.num_threads = 2}};
  kernels::cpu::CpuBackend device_{{.num_threads = 1}};
};

TEST_F(HostExpertsTest, RowsEqualTheBackendsGroupedOpLayerAfterLayer) {
  absl::StatusOr<std::unique_ptr<HostExperts>> made =
      HostExperts::Create(&host_, &device_);
  ASSERT_TRUE(made.ok()) << made.status();
  HostExperts& h = **made;
  std::mt19937 rng(7);
  const std::vector<uint16_t> a = RandomExpert(rng), b = RandomExpert(rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t n = 3 + layer;  // tokens
    // Expert a takes pairs [0, 2), expert b pairs [2, n + 1).
    const int64_t routed = n + 1;
    std::vector<int32_t> perm(routed);
    for (int64_t p = 0; p < routed; ++p) perm[p] = (p * 5 + layer) % n;
    ASSERT_TRUE(h.Reserve(n, routed, kHidden, kFfn).ok());
    std::vector<float> x(n * kHidden);
    for (float& v : x) v = dist(rng);
    std::memcpy(h.hidden(), x.data(), x.size() * 4);
    const std::vector<kernels::ExpertGroup> groups = {
        {a.data(), 0, 2}, {b.data(), 2, routed - 2}};
    kernels::GroupedExperts work;
    work.x = Tensor(h.hidden(), DType::kF32, {n, kHidden}, kCpu);
    work.rows = Tensor(perm.data(), DType::kI32, {routed}, kCpu);
    work.groups = groups;
    work.ffn = kFfn;
    h.Start(work);
    std::vector<double> seconds;
    ASSERT_TRUE(h.Wait(&seconds).ok());
    ASSERT_EQ(seconds.size(), 2u);
    EXPECT_GT(seconds[0], 0);
    EXPECT_GT(seconds[1], 0);

    // The reference: the same op on a CPU backend, directly.
    kernels::GroupedExperts call;
    call.x = Tensor(x.data(), DType::kF32, {n, kHidden}, kCpu);
    call.rows = Tensor(perm.data(), DType::kI32, {routed}, kCpu);
    call.groups = groups;
    call.ffn = kFfn;
    std::vector<float> ws(
        kernels::GroupedExpertWorkspaceElems(routed, kFfn, kHidden));
    std::vector<float> want(routed * kHidden);
    auto stream = device_.CreateStream();
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE(
        device_
            .ExpertFfnGrouped(
                **stream, call,
                Tensor(ws.data(), DType::kF32,
                       {static_cast<int64_t>(ws.size())}, kCpu),
                Tensor(want.data(), DType::kF32, {routed, kHidden}, kCpu))
            .ok());
    ASSERT_TRUE((*stream)->Synchronize().ok());
    EXPECT_EQ(std::memcmp(h.out(), want.data(), want.size() * 4), 0)
        << "layer " << layer;
  }
  const absl::StatusOr<double> t =
      h.TimeExpert(reinterpret_cast<const std::byte*>(a.data()), 8, kHidden,
                   kFfn, nullptr, nullptr, 2);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT(*t, 0);
}

TEST_F(HostExpertsTest, UnreservedBuffersAndWrongBackendsAreRefused) {
  kernels::cpu::CpuBackend* none = nullptr;
  EXPECT_EQ(HostExperts::Create(none, &device_).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<HostExperts>> made =
      HostExperts::Create(&host_, &device_);
  ASSERT_TRUE(made.ok()) << made.status();
  std::mt19937 rng(1);
  const std::vector<uint16_t> a = RandomExpert(rng);
  const std::vector<int32_t> perm = {0, 1};
  const std::vector<kernels::ExpertGroup> groups = {{a.data(), 0, 2}};
  std::vector<int32_t> rows = perm;
  kernels::GroupedExperts work;
  work.x = Tensor((*made)->hidden(), DType::kF32, {2, kHidden}, kCpu);
  work.rows = Tensor(rows.data(), DType::kI32, {2}, kCpu);
  work.groups = groups;
  work.ffn = kFfn;
  (*made)->Start(work);  // nothing reserved
  const absl::Status st = (*made)->Wait(nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("not reserved"));
}

}  // namespace
}  // namespace moeserve::engine
