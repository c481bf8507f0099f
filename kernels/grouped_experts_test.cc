// ExpertFfnGrouped + CombineExpertRows against the per-expert ops they
// replace (GatherRows, ExpertFfn / ExpertFfnInt4 / ExpertFfnFp8, ScaleAddRows
// expert by expert in ascending order), on the same backend: the results
// must be bit-identical, whatever the grouping (one call for all experts, or
// the experts split over several calls), for bf16, int4 (bf16 or fp16
// scales, with or without zero points) and fp8 experts, decode and prefill
// row counts, dropped choices and a token routed twice to one expert (a
// routing filter's remap). Runs on the CPU backend, and on CUDA when the
// machine has a device (skips that half otherwise; fails with
// MOESERVE_REQUIRE_CUDA=1). Also the refusals of a malformed call.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"
#include "kernels/testing/cuda_skip.h"

namespace moeserve::kernels {
namespace {

// Device memory of a backend holding a copy of host data.
class DeviceData {
 public:
  DeviceData(Backend& b, Stream& s, const void* host, int64_t bytes)
      : backend_(b), stream_(s), bytes_(bytes) {
    buffer_ = *b.Allocate(std::max<int64_t>(bytes, 1));
    if (bytes > 0) {
      EXPECT_TRUE(b.CopyToDevice(s, buffer_->data(), host, bytes).ok());
    }
  }
  void* data() const { return buffer_->data(); }
  template <typename T>
  std::vector<T> ToHost() const {
    std::vector<T> out(bytes_ / sizeof(T));
    EXPECT_TRUE(
        backend_.CopyToHost(stream_, out.data(), buffer_->data(), bytes_).ok());
    EXPECT_TRUE(stream_.Synchronize().ok());
    return out;
  }

 private:
  Backend& backend_;
  Stream& stream_;
  int64_t bytes_;
  std::unique_ptr<Buffer> buffer_;
};

enum class Format { kBf16, kInt4, kFp8 };

struct Case {
  int64_t hidden, ffn, experts, k, tokens;
  Format format = Format::kBf16;
  // int4 only: scale type and zero points (random in [0, 16] when present).
  Int4ExpertOptions int4 = {};
  bool int4_format() const { return format == Format::kInt4; }
  std::string Name() const {
    std::string f = "_bf16";
    if (format == Format::kFp8) f = "_fp8";
    if (format == Format::kInt4) {
      f = std::string("_int4_") + Int4ScaleTypeName(int4.scale_type) +
          (int4.zeros ? "_zeros" : "");
    }
    return "h" + std::to_string(hidden) + "_f" + std::to_string(ffn) + "_k" +
           std::to_string(k) + "_n" + std::to_string(tokens) + f;
  }
};

// The routing of one layer, grouped by expert as MoeModel does it.
struct Routing {
  std::vector<int32_t> perm;   // [R]
  std::vector<float> weights;  // [R]
  std::vector<int32_t> pairs;  // [n, k], ascending positions, -1 after
  std::vector<int64_t> begin;  // [E + 1]
};

Routing MakeRouting(const Case& c, std::mt19937& rng) {
  std::vector<int32_t> ids(c.tokens * c.k);
  std::vector<float> w(c.tokens * c.k);
  std::uniform_real_distribution<float> u(0.05f, 1.f);
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::vector<int32_t> all(c.experts);
    for (int64_t e = 0; e < c.experts; ++e) all[e] = static_cast<int32_t>(e);
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < c.k; ++j) {
      ids[t * c.k + j] = all[j];
      w[t * c.k + j] = u(rng);
    }
    // Token 1 loses a choice (a filter's drop); token 2 has its last choice
    // remapped onto its first (one expert twice).
    if (t == 1 && c.k > 1) ids[t * c.k + 1] = -1;
    if (t == 2 && c.k > 1) ids[t * c.k + c.k - 1] = ids[t * c.k];
  }
  Routing r;
  r.begin.assign(c.experts + 1, 0);
  for (int32_t e : ids) {
    if (e >= 0) ++r.begin[e + 1];
  }
  for (int64_t e = 0; e < c.experts; ++e) r.begin[e + 1] += r.begin[e];
  const int64_t routed = r.begin[c.experts];
  std::vector<int64_t> fill(r.begin.begin(), r.begin.end() - 1);
  r.perm.resize(routed);
  r.weights.resize(routed);
  r.pairs.assign(c.tokens * c.k, -1);
  for (int64_t t = 0; t < c.tokens; ++t) {
    int64_t used = 0;
    for (int64_t j = 0; j < c.k; ++j) {
      const int32_t e = ids[t * c.k + j];
      if (e < 0) continue;
      const int64_t at = fill[e]++;
      r.perm[at] = static_cast<int32_t>(t);
      r.weights[at] = w[t * c.k + j];
      r.pairs[t * c.k + used++] = static_cast<int32_t>(at);
    }
    std::sort(r.pairs.begin() + t * c.k, r.pairs.begin() + t * c.k + used);
  }
  return r;
}

// Per-expert reference and grouped result of one case, on `b`.
void CheckCase(Backend& b, const Case& c, int batches) {
  SCOPED_TRACE(c.Name() + " on " + b.name() + ", " + std::to_string(batches) +
               " call(s)");
  std::mt19937 rng(static_cast<uint32_t>(c.hidden * 131 + c.tokens * 7 + c.k +
                                         static_cast<int>(c.format)));
  std::unique_ptr<Stream> s = *b.CreateStream();
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(c.tokens * c.hidden);
  for (float& v : x) v = normal(rng);
  const int64_t blob_elems = 3 * c.ffn * c.hidden;
  Int4ExpertLayout layout;
  Fp8ExpertLayout fp8_layout;
  int64_t blob_bytes = blob_elems * 2;
  if (c.int4_format()) {
    const Int4ExpertLayout groups = *MakeInt4ExpertLayout(c.hidden, c.ffn);
    layout = *Int4ExpertLayoutWithOptions(c.hidden, c.ffn, groups.group_in,
                                          groups.group_out, c.int4);
    blob_bytes = (layout.bytes + 255) / 256 * 256;
  } else if (c.format == Format::kFp8) {
    fp8_layout = *MakeFp8ExpertLayout(c.hidden, c.ffn, 128, 128);
    blob_bytes = (fp8_layout.bytes + 255) / 256 * 256;
  }
  // All experts in one arena, each at a 256-byte boundary.
  std::vector<std::byte> arena(c.experts * blob_bytes);
  std::vector<bf16> blob(blob_elems);
  for (int64_t e = 0; e < c.experts; ++e) {
    for (bf16& v : blob) v = FloatToBf16(normal(rng) * 0.2f);
    std::byte* dst = arena.data() + e * blob_bytes;
    if (c.int4_format()) {
      QuantizeExpertInt4(blob.data(), layout, dst);
      if (layout.has_zeros) {  // Asymmetric: every zero point random.
        std::uniform_int_distribution<int> zero(0, kInt4MaxZero);
        for (Int4Part part :
             {Int4Part::kGate, Int4Part::kUp, Int4Part::kDown}) {
          const Int4Matrix w = Int4ExpertPart(dst, layout, part);
          auto* z = const_cast<uint8_t*>(w.zeros);
          for (int64_t i = 0; i < w.rows * w.groups_per_row(); ++i) {
            z[i] = static_cast<uint8_t>(zero(rng));
          }
        }
      }
    } else if (c.format == Format::kFp8) {
      QuantizeExpertFp8(blob.data(), fp8_layout, dst);
    } else {
      std::memcpy(arena.data() + e * blob_bytes, blob.data(), blob_elems * 2);
    }
  }
  const Routing r = MakeRouting(c, rng);
  const int64_t routed = static_cast<int64_t>(r.perm.size());
  const Device dev = b.device();
  DeviceData d_x(b, *s, x.data(), x.size() * 4);
  DeviceData d_arena(b, *s, arena.data(), arena.size());
  DeviceData d_perm(b, *s, r.perm.data(), routed * 4);
  DeviceData d_w(b, *s, r.weights.data(), routed * 4);
  DeviceData d_pairs(b, *s, r.pairs.data(), r.pairs.size() * 4);
  std::vector<float> zeros(c.tokens * c.hidden, 0.f);
  DeviceData d_ref(b, *s, zeros.data(), zeros.size() * 4);
  DeviceData d_got(b, *s, zeros.data(), zeros.size() * 4);
  std::vector<float> big(
      std::max<int64_t>(GroupedExpertWorkspaceElems(routed, c.ffn, c.hidden),
                        1),
      0.f);
  DeviceData d_ws(b, *s, big.data(), big.size() * 4);
  DeviceData d_rows_out(b, *s, big.data(),
                        std::max<int64_t>(routed * c.hidden, 1) * 4);
  DeviceData d_in(b, *s, big.data(),
                  std::max<int64_t>(routed * c.hidden, 1) * 4);
  const Tensor tx(d_x.data(), DType::kF32, {c.tokens, c.hidden}, dev);
  auto* arena_base = static_cast<std::byte*>(d_arena.data());

  // Reference: expert by expert, ascending.
  for (int64_t e = 0; e < c.experts; ++e) {
    const int64_t m = r.begin[e + 1] - r.begin[e];
    if (m == 0) continue;
    Tensor rows(static_cast<int32_t*>(d_perm.data()) + r.begin[e], DType::kI32,
                {m}, dev);
    Tensor w(static_cast<float*>(d_w.data()) + r.begin[e], DType::kF32, {m},
             dev);
    Tensor in(d_in.data(), DType::kF32, {m, c.hidden}, dev);
    Tensor out(d_rows_out.data(), DType::kF32, {m, c.hidden}, dev);
    Tensor ws(d_ws.data(), DType::kF32, {ExpertFfnWorkspaceElems(m, c.ffn)},
              dev);
    ASSERT_TRUE(b.GatherRows(*s, tx, rows, in).ok());
    void* eb = arena_base + e * blob_bytes;
    if (c.int4_format()) {
      ASSERT_TRUE(b.ExpertFfnInt4(*s, in,
                                  Tensor(eb, DType::kU8, {layout.bytes}, dev),
                                  layout, ws, out)
                      .ok());
    } else if (c.format == Format::kFp8) {
      ASSERT_TRUE(b.ExpertFfnFp8(
                       *s, in, Tensor(eb, DType::kU8, {fp8_layout.bytes}, dev),
                       fp8_layout, ws, out)
                      .ok());
    } else {
      ASSERT_TRUE(b.ExpertFfn(*s, in,
                              Tensor(eb, DType::kBF16, {blob_elems}, dev),
                              c.ffn, ws, out)
                      .ok());
    }
    ASSERT_TRUE(b.ScaleAddRows(*s, out, rows, w,
                               Tensor(d_ref.data(), DType::kF32,
                                      {c.tokens, c.hidden}, dev))
                    .ok());
  }

  // Grouped: the experts in `batches` consecutive calls, then one combine.
  std::vector<ExpertGroup> all;
  for (int64_t e = 0; e < c.experts; ++e) {
    const int64_t m = r.begin[e + 1] - r.begin[e];
    if (m > 0) all.push_back({arena_base + e * blob_bytes, r.begin[e], m});
  }
  const Tensor expert_out(d_rows_out.data(), DType::kF32, {routed, c.hidden},
                          dev);
  const size_t per_call = (all.size() + batches - 1) / batches;
  for (size_t g0 = 0; g0 < all.size(); g0 += per_call) {
    GroupedExperts call;
    call.x = tx;
    call.rows = Tensor(d_perm.data(), DType::kI32, {routed}, dev);
    call.groups = std::span<const ExpertGroup>(all).subspan(
        g0, std::min(per_call, all.size() - g0));
    call.ffn = c.ffn;
    call.int4 = c.int4_format() ? &layout : nullptr;
    call.fp8 = c.format == Format::kFp8 ? &fp8_layout : nullptr;
    const absl::Status st =
        b.ExpertFfnGrouped(*s, call,
                           Tensor(d_ws.data(), DType::kF32,
                                  {static_cast<int64_t>(big.size())}, dev),
                           expert_out);
    ASSERT_TRUE(st.ok()) << st;
  }
  const absl::Status st = b.CombineExpertRows(
      *s, expert_out, Tensor(d_w.data(), DType::kF32, {routed}, dev),
      Tensor(d_pairs.data(), DType::kI32, {c.tokens, c.k}, dev),
      Tensor(d_got.data(), DType::kF32, {c.tokens, c.hidden}, dev));
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<float> want = d_ref.ToHost<float>();
  const std::vector<float> got = d_got.ToHost<float>();
  int64_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], 4) != 0) ++differ;
  }
  EXPECT_EQ(differ, 0) << "of " << want.size() << " values, e.g. [0] "
                       << want[0] << " vs " << got[0];
  float norm = 0.f;
  for (float v : want) norm = std::max(norm, std::abs(v));
  EXPECT_GT(norm, 0.f) << "a reference of zeros proves nothing";
}

constexpr Int4ExpertOptions kBf16Sym = {Int4ScaleType::kBf16, false};
constexpr Int4ExpertOptions kF16Zeros = {Int4ScaleType::kF16, true};
constexpr Int4ExpertOptions kBf16Zeros = {Int4ScaleType::kBf16, true};
constexpr Int4ExpertOptions kF16Sym = {Int4ScaleType::kF16, false};

const Case kCases[] = {
    // Decode-sized groups (the grouped GEMV on CUDA).
    {64, 32, 8, 2, 1},
    {128, 64, 16, 4, 4},
    // hidden not a multiple of 8: the GEMV's scalar path.
    {72, 40, 8, 2, 5},
    // Prefill-sized groups (cuBLASLt per expert on CUDA, m >= 16).
    {64, 32, 4, 2, 40},
    // int4 experts: a draft's pool (bf16 scales, symmetric) and checkpoint
    // formats (fp16 scales and zero points: GPTQ / AWQ), decode and prefill
    // row counts. Groups (Int4GroupFor): hidden 144 / ffn 40 -> 16 and 40
    // (the scalar path), 256 / 96 -> 128 and 32, 1024 / 160 -> 128 and 32.
    {128, 64, 8, 2, 3, Format::kInt4, kBf16Sym},
    {256, 96, 8, 4, 20, Format::kInt4, kBf16Sym},
    {256, 96, 8, 2, 6, Format::kInt4, kF16Zeros},
    {128, 64, 16, 4, 40, Format::kInt4, kF16Zeros},
    {144, 40, 8, 2, 5, Format::kInt4, kBf16Zeros},
    {1024, 160, 8, 2, 9, Format::kInt4, kF16Sym},
    // fp8 experts (128 x 128 blocks, partial where 128 does not divide;
    // hidden 52 / ffn 37: the scalar path).
    {256, 96, 8, 2, 4, Format::kFp8},
    {128, 64, 16, 4, 40, Format::kFp8},
    {52, 37, 8, 2, 5, Format::kFp8},
    {1024, 160, 8, 2, 9, Format::kFp8},
};

void RunAll(Backend& b) {
  for (const Case& c : kCases) {
    for (int batches : {1, 3}) CheckCase(b, c, batches);
  }
}

TEST(GroupedExpertsTest, CpuMatchesPerExpertOpsBitForBit) {
  cpu::CpuBackend cpu({.num_threads = 2});
  RunAll(cpu);
}

TEST(GroupedExpertsTest, CudaMatchesPerExpertOpsBitForBit) {
  absl::StatusOr<std::unique_ptr<Backend>> cuda =
      CreateBackend({.name = "cuda"});
  MOESERVE_SKIP_WITHOUT_CUDA(cuda.status());
  RunAll(**cuda);
}

TEST(GroupedExpertsTest, RefusesMalformedCalls) {
  cpu::CpuBackend b({.num_threads = 1});
  std::unique_ptr<Stream> s = *b.CreateStream();
  std::vector<float> x(4 * 8), ws(1000), out(6 * 8), y(4 * 8), w(6);
  std::vector<int32_t> rows = {0, 1, 2, 3, 0, 1};
  std::vector<bf16> blob(3 * 4 * 8);
  const ExpertGroup ok_groups[] = {{blob.data(), 0, 4}, {blob.data(), 4, 2}};
  GroupedExperts call;
  call.x = Tensor(x.data(), DType::kF32, {4, 8});
  call.rows = Tensor(rows.data(), DType::kI32, {6});
  call.groups = ok_groups;
  call.ffn = 4;
  const Tensor tws(ws.data(), DType::kF32, {1000});
  const Tensor tout(out.data(), DType::kF32, {6, 8});
  EXPECT_TRUE(b.ExpertFfnGrouped(*s, call, tws, tout).ok());

  const ExpertGroup overlapping[] = {{blob.data(), 0, 4}, {blob.data(), 3, 2}};
  call.groups = overlapping;
  absl::Status st = b.ExpertFfnGrouped(*s, call, tws, tout);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("group 1"), absl::string_view::npos) << st;

  const ExpertGroup beyond[] = {{blob.data(), 4, 3}};
  call.groups = beyond;
  EXPECT_TRUE(absl::IsInvalidArgument(b.ExpertFfnGrouped(*s, call, tws, tout)));

  const ExpertGroup no_blob[] = {{nullptr, 0, 1}};
  call.groups = no_blob;
  EXPECT_TRUE(absl::IsInvalidArgument(b.ExpertFfnGrouped(*s, call, tws, tout)));

  call.groups = ok_groups;
  st = b.ExpertFfnGrouped(*s, call, Tensor(ws.data(), DType::kF32, {10}), tout);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("workspace"), absl::string_view::npos) << st;

  // A row index outside x.
  rows[5] = 4;
  st = b.ExpertFfnGrouped(*s, call, tws, tout);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  rows[5] = 1;

  std::vector<int32_t> pairs = {0, 4, 1, 5, 2, -1, 3, -1};
  const Tensor tpairs(pairs.data(), DType::kI32, {4, 2});
  const Tensor tw(w.data(), DType::kF32, {6});
  const Tensor ty(y.data(), DType::kF32, {4, 8});
  EXPECT_TRUE(b.CombineExpertRows(*s, tout, tw, tpairs, ty).ok());
  pairs[1] = 6;  // beyond the 6 pairs
  st = b.CombineExpertRows(*s, tout, tw, tpairs, ty);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("pairs"), absl::string_view::npos) << st;
  pairs[1] = 4;
  // y overlapping x.
  EXPECT_TRUE(absl::IsInvalidArgument(b.CombineExpertRows(
      *s, tout, tw, tpairs, Tensor(out.data(), DType::kF32, {4, 8}))));
}

}  // namespace
}  // namespace moeserve::kernels
