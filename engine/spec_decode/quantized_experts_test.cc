// QuantizedExperts: the int4 pool quantized on many threads is byte for byte
// the pool quantized on one, and each blob is QuantizeExpertInt4 of that
// expert's own matrices; an int4 checkpoint's pool is its own experts, as
// big as BytesFor says.
#include "engine/spec_decode/quantized_experts.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_weights.h"
#include "engine/spec_decode/expert_matrices.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::engine::spec_decode {
namespace {

std::string Runfile(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root == nullptr ? "." : root) + "/moeserve/" + path;
}

TEST(QuantizedExpertsTest, AnyThreadCountGivesTheSameBlobs) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
      ModelWeights::Load(Runfile("tests/golden/mixtral_tiny"));
  ASSERT_TRUE(weights.ok()) << weights.status();
  kernels::cpu::CpuBackend backend({.num_threads = 1});
  const ModelConfig& c = (*weights)->config();
  std::vector<std::unique_ptr<QuantizedExperts>> pools;
  for (int threads : {1, 3, 0}) {
    absl::StatusOr<std::unique_ptr<QuantizedExperts>> pool =
        QuantizedExperts::Create(**weights, &backend, threads);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pools.push_back(*std::move(pool));
  }
  const kernels::Int4ExpertLayout& layout = pools[0]->layout();
  const size_t matrix_bytes =
      static_cast<size_t>(c.hidden_size) * c.expert_intermediate_size * 2;
  std::vector<std::byte> packed(3 * matrix_bytes);
  std::vector<std::byte> want(layout.bytes);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (int e = 0; e < c.num_experts; ++e) {
      absl::StatusOr<ExpertMatrices> m =
          LocateExpertMatrices(**weights, l, e, matrix_bytes);
      ASSERT_TRUE(m.ok()) << m.status();
      for (int k = 0; k < 3; ++k) {
        std::memcpy(packed.data() + k * matrix_bytes, m->m[k], matrix_bytes);
      }
      kernels::QuantizeExpertInt4(
          reinterpret_cast<const kernels::bf16*>(packed.data()), layout,
          want.data());
      for (const auto& pool : pools) {
        absl::StatusOr<const std::byte*> got = pool->Acquire({l, e});
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(std::memcmp(*got, want.data(), want.size()), 0)
            << "layer " << l << " expert " << e;
      }
    }
  }
}

TEST(QuantizedExpertsTest, AnInt4CheckpointDraftsWithItsOwnExperts) {
  absl::StatusOr<std::unique_ptr<ModelWeights>> weights =
      ModelWeights::Load(Runfile("tests/golden/qwen3_moe_gptq_asym"));
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_NE((*weights)->int4_layout(), nullptr);
  kernels::cpu::CpuBackend backend({.num_threads = 1});
  absl::StatusOr<std::unique_ptr<QuantizedExperts>> pool =
      QuantizedExperts::Create(**weights, &backend, 2);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->layout(), *(*weights)->int4_layout());
  EXPECT_EQ((*pool)->bytes(),
            *QuantizedExperts::BytesFor((*weights)->config()));
  const ModelConfig& c = (*weights)->config();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (int e = 0; e < c.num_experts; ++e) {
      const std::byte* mine = *(*pool)->Acquire({l, e});
      EXPECT_EQ(std::memcmp(mine, (*weights)->expert({l, e}).data,
                            (*pool)->layout().bytes),
                0)
          << l << "," << e;
    }
  }
}

}  // namespace
}  // namespace moeserve::engine::spec_decode
