// What every backend's differential test shares (the llama.cpp
// test-backend-ops idea): a fast deterministic RNG for random inputs, the
// tolerances per kind of op, and the comparison against the scalar
// reference (kernels/cpu/reference_ops). One harness, one yardstick, for the
// vectorised CPU kernels and the CUDA kernels alike.
#ifndef MOESERVE_KERNELS_TESTING_DIFFERENTIAL_H_
#define MOESERVE_KERNELS_TESTING_DIFFERENTIAL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::testing {

// Tolerances: max |got - want| / max |want|. Pick one by how the kernel
// computes, per backend (the same op may accumulate differently on CPU and
// CUDA). Exact ops (copies, gathers, ids, a single fp32 add) compare with ==.
//
// fp32 accumulation of up to 14336 products vs double: ~1e-6 observed.
inline constexpr double kTolDot = 2e-5;
// Transcendentals in fp32 (exp, sin, cos) vs double: a few ulp.
inline constexpr double kTolPointwise = 2e-6;
// CUDA MatMul on cuBLASLt: x split into bf16 hi + lo (x - hi - lo is at most
// ~2^-17 |x|), bf16 x bf16 products exact in fp32, fp32 tensor-core
// accumulation in its own order. The split error is ~10x below the fp32
// accumulation error at model sizes, so the fp32-dot bound holds.
inline constexpr double kTolSplitBf16Dot = kTolDot;
// CUDA Attention: fp32 dot products and an fp32 online softmax (running max,
// rescaled sums) vs double.
inline constexpr double kTolOnlineSoftmax = kTolDot;
// int4 MatMul: exact dequantised weights ((q - 8) * bf16 scale), fp32
// accumulation with one scale multiply per 32 columns.
inline constexpr double kTolInt4Dot = kTolDot;
// CPU MatMul with x rounded to bf16 (the avx512bf16 kernels, vdpbf16ps; the
// amxbf16 kernels, tdpbf16ps, round x the same way and differ only in fp32
// summation order, so the same bound and the same kTolDot check apply):
// each x loses up to 2^-8 of itself (round to nearest even), products are
// exact and sums fp32, so |error| <= 2^-8 sum |w_i x_i|: a one-term dot can
// be off by 2^-8 = 3.9e-3 of itself, and over k terms the errors add like a
// random walk. Measured on the harness's uniform data (m up to 130, k 1 to
// 2048): at most 2.6e-3 of the output scale. Against a reference fed the
// same bf16-rounded x the kernels must still meet kTolDot, so this bound
// cannot hide a summation bug.
inline constexpr double kTolBf16ActivationDot = 8e-3;
// ExpertFfn on those kernels: x rounded before gate/up and the activation
// again before down, through silu. Measured at most 6.0e-3 of the output
// scale (worst at hidden 52, ffn 37: few terms to average over).
inline constexpr double kTolBf16ActivationFfn = 1.5e-2;
// fp32 sums of a few terms in a run-dependent order (CUDA ScaleAddRows
// accumulates repeated rows with atomicAdd): a few ulp of the largest term.
inline constexpr double kTolUnorderedSum = kTolPointwise;

// splitmix64: fast enough to fill hundreds of MB in unoptimised builds.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  float Uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(Next() >> 40) / (1 << 24);
  }
  int32_t Int(int32_t n) { return static_cast<int32_t>(Next() % n); }
  std::vector<float> F32(int64_t n, float lo = -1, float hi = 1) {
    std::vector<float> v(n);
    for (float& x : v) x = Uniform(lo, hi);
    return v;
  }
  std::vector<bf16> Bf16(int64_t n, float lo = -1, float hi = 1) {
    std::vector<bf16> v(n);
    for (bf16& x : v) x = FloatToBf16(Uniform(lo, hi));
    return v;
  }
  // n values repeating a random block of `period`: cheap for weights of
  // hundreds of millions of elements (an lm_head) in unoptimised builds.
  std::vector<bf16> Bf16Tiled(int64_t n, int64_t period = int64_t{1} << 20,
                              float lo = -1, float hi = 1) {
    std::vector<bf16> block = Bf16(std::min(n, period), lo, hi);
    std::vector<bf16> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = block[i % period];
    return v;
  }

 private:
  uint64_t s_;
};

// Max error relative to the output's scale; fails on any NaN mismatch.
inline ::testing::AssertionResult Close(const std::vector<float>& got,
                                        const std::vector<float>& want,
                                        double tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs " << want.size();
  }
  double scale = 0, worst = 0;
  size_t worst_i = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double{w}));
  scale = std::max(scale, 1e-30);
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]) / scale;
    if (!(err <= worst)) {  // Also catches NaN.
      worst = std::isnan(err) ? INFINITY : err;
      worst_i = i;
    }
  }
  if (worst <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "relative error " << worst << " > " << tol << " at " << worst_i
         << ": got " << got[worst_i] << ", want " << want[worst_i] << " (scale "
         << scale << ")";
}

// The query side of an AttentionBatch where sequence s has n_new[s] new
// tokens ending at position ctx[s] - 1 (ctx[s]: its length after the
// step's KV writes): query_start (prefix sums) and each query's position.
struct AttentionQueries {
  std::vector<int32_t> query_start = {0};
  std::vector<int32_t> positions;
};
inline AttentionQueries NewTokenQueries(const std::vector<int64_t>& n_new,
                                        const std::vector<int64_t>& ctx) {
  AttentionQueries q;
  for (size_t s = 0; s < n_new.size(); ++s) {
    q.query_start.push_back(q.query_start.back() + n_new[s]);
    for (int64_t i = 0; i < n_new[s]; ++i) {
      q.positions.push_back(ctx[s] - n_new[s] + i);
    }
  }
  return q;
}

}  // namespace moeserve::kernels::testing

#endif  // MOESERVE_KERNELS_TESTING_DIFFERENTIAL_H_
