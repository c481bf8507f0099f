// BackendResidentExperts: every blob is the weights' blob byte for byte, in
// memory of its own (not the weights' arena), for bf16 and int4
// checkpoints alike (the layout is the weights'); ids outside the model are
// refused.
#include "engine/spec_decode/backend_resident_experts.h"

#include <cstring>
#include <memory>
#include <string>

#include "engine/model_weights.h"
#include "engine/testing/golden.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine::spec_decode {
namespace {

using ::moeserve::engine::testing::Runfile;

class BackendResidentExpertsTest
    : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendResidentExpertsTest, EveryBlobIsACopyOfTheWeightsBlob) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
      ModelWeights::Load(Runfile("tests/golden/" + GetParam()));
  ASSERT_TRUE(weights.ok()) << weights.status();
  kernels::cpu::CpuBackend backend({.num_threads = 1});
  absl::StatusOr<std::unique_ptr<BackendResidentExperts>> experts =
      BackendResidentExperts::Create(**weights, &backend);
  ASSERT_TRUE(experts.ok()) << experts.status();
  EXPECT_EQ((*experts)->device(), kernels::Device::kCpu);
  EXPECT_GE((*experts)->bytes(), (*weights)->expert_bytes());
  EXPECT_EQ((*experts)->int4_layout(), (*weights)->int4_layout());
  EXPECT_EQ((*experts)->fp8_layout(), (*weights)->fp8_layout());
  const ModelWeights& w = **weights;
  for (int l = 0; l < w.num_layers(); ++l) {
    for (int e = 0; e < w.num_experts(); ++e) {
      const ExpertBlob& blob = w.expert({l, e});
      absl::StatusOr<const std::byte*> got = (*experts)->Acquire({l, e});
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_NE(*got, blob.data);
      EXPECT_EQ(std::memcmp(*got, blob.data, blob.bytes), 0)
          << "layer " << l << " expert " << e;
      (*experts)->Release({l, e});
    }
  }
  for (ExpertId bad : {ExpertId{-1, 0}, ExpertId{w.num_layers(), 0},
                       ExpertId{0, w.num_experts()}}) {
    EXPECT_EQ((*experts)->Acquire(bad).status().code(),
              absl::StatusCode::kOutOfRange);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, BackendResidentExpertsTest,
                         ::testing::Values("mixtral_tiny",
                                           "qwen3_moe_gptq_asym"));

}  // namespace
}  // namespace moeserve::engine::spec_decode
