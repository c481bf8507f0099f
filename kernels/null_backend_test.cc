#include "kernels/null_backend.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace moeserve::kernels {
namespace {

std::unique_ptr<Stream> NewStream(Backend& b) { return *b.CreateStream(); }

TEST(NullBackend, NameAndDevice) {
  NullBackend b;
  EXPECT_EQ(b.name(), "null");
  EXPECT_EQ(b.device(), Device::kCpu);
}

TEST(NullBackend, AllocatesZeroedAlignedHostMemory) {
  NullBackend b;
  for (int64_t bytes : {int64_t{1}, int64_t{4097}, int64_t{3} << 20}) {
    for (bool host : {false, true}) {
      absl::StatusOr<std::unique_ptr<Buffer>> buf =
          host ? b.AllocateHost(bytes) : b.Allocate(bytes);
      ASSERT_TRUE(buf.ok()) << buf.status();
      EXPECT_EQ((*buf)->bytes(), bytes);
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*buf)->data()) % 4096, 0u);
      const auto* p = static_cast<const unsigned char*>((*buf)->data());
      EXPECT_EQ(p[0], 0);
      EXPECT_EQ(p[bytes - 1], 0);
      std::memset((*buf)->data(), 7, bytes);  // writable
    }
  }
  EXPECT_EQ(b.Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.AllocateHost(-5).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NullBackend, CopiesSmallBuffersAndSkipsLargeOnes) {
  NullBackend b({.copy_limit_bytes = 64});
  auto s = NewStream(b);
  std::vector<int32_t> src(32), dst(32, -1);
  for (int i = 0; i < 32; ++i) src[i] = i;
  ASSERT_TRUE(b.CopyToDevice(*s, dst.data(), src.data(), 64).ok());
  EXPECT_EQ(dst[15], 15);
  EXPECT_EQ(dst[16], -1);  // 64 bytes only
  ASSERT_TRUE(b.CopyToHost(*s, dst.data() + 16, src.data() + 16, 64).ok());
  EXPECT_EQ(dst[31], 31);
  // Over the limit: checked, not performed.
  std::vector<int32_t> big(32, -2);
  ASSERT_TRUE(b.CopyOnDevice(*s, big.data(), src.data(), 128).ok());
  EXPECT_EQ(big[0], -2);
  EXPECT_EQ(b.CopyToDevice(*s, big.data(), src.data(), -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Zero(*s, big.data(), -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->Synchronize().ok());
}

TEST(NullBackend, RefusesAnotherBackendsStreamAndEvent) {
  NullBackend b, other;
  cpu::CpuBackend cpu({.num_threads = 1});
  auto foreign = NewStream(other);
  auto cpu_stream = NewStream(cpu);
  int32_t x = 0;
  EXPECT_EQ(b.CopyToDevice(*foreign, &x, &x, 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Zero(*cpu_stream, &x, 4).code(),
            absl::StatusCode::kInvalidArgument);
  auto s = NewStream(b);
  std::unique_ptr<Event> cpu_event = *cpu.CreateEvent();
  EXPECT_EQ(b.RecordEvent(*s, *cpu_event).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.WaitEvent(*s, *cpu_event).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NullBackend, EventsAreTimestamps) {
  NullBackend b;
  auto s = NewStream(b);
  std::unique_ptr<Event> start = *b.CreateEvent();
  std::unique_ptr<Event> end = *b.CreateEvent();
  ASSERT_TRUE(b.RecordEvent(*s, *start).ok());
  ASSERT_TRUE(b.RecordEvent(*s, *end).ok());
  ASSERT_TRUE(b.WaitEvent(*s, *end).ok());
  ASSERT_TRUE(end->Synchronize().ok());
  absl::StatusOr<double> sec = end->SecondsSince(*start);
  ASSERT_TRUE(sec.ok()) << sec.status();
  EXPECT_GE(*sec, 0);
}

TEST(NullBackend, RouterWritesDistinctValidVaryingIds) {
  NullBackend b;
  auto s = NewStream(b);
  constexpr int64_t kRows = 64, kExperts = 8;
  constexpr int kTopK = 3;
  std::vector<float> logits(kRows * kExperts, 0.0f);
  std::vector<float> weights(kRows * kTopK);
  std::vector<int32_t> ids(kRows * kTopK);
  Tensor l(logits.data(), DType::kF32, {kRows, kExperts});
  Tensor w(weights.data(), DType::kF32, {kRows, kTopK});
  Tensor i(ids.data(), DType::kI32, {kRows, kTopK});
  std::set<int32_t> seen;
  std::vector<int32_t> first;
  for (int call = 0; call < 2; ++call) {
    ASSERT_TRUE(b.RouterTopK(*s, l, kTopK, true, w, i).ok());
    for (int64_t r = 0; r < kRows; ++r) {
      std::set<int32_t> row;
      for (int j = 0; j < kTopK; ++j) {
        const int32_t e = ids[r * kTopK + j];
        ASSERT_GE(e, 0);
        ASSERT_LT(e, kExperts);
        row.insert(e);
        seen.insert(e);
        EXPECT_FLOAT_EQ(weights[r * kTopK + j], 1.0f / kTopK);
      }
      EXPECT_EQ(row.size(), size_t{kTopK}) << "row " << r;
    }
    if (call == 0) first = ids;
  }
  EXPECT_EQ(seen.size(), size_t{kExperts});  // every expert is used
  EXPECT_NE(ids, first);                     // the next call routes anew
  b.RestartRouting();
  ASSERT_TRUE(b.RouterTopK(*s, l, kTopK, true, w, i).ok());
  EXPECT_EQ(ids, first);  // as the first call did

  // k == E: every expert once.
  std::vector<float> w8(kRows * kExperts);
  std::vector<int32_t> i8(kRows * kExperts);
  ASSERT_TRUE(b.RouterTopK(*s, l, kExperts, false,
                           Tensor(w8.data(), DType::kF32, {kRows, kExperts}),
                           Tensor(i8.data(), DType::kI32, {kRows, kExperts}))
                  .ok());
  EXPECT_EQ(std::set<int32_t>(i8.begin(), i8.begin() + kExperts).size(),
            size_t{kExperts});
}

TEST(NullBackend, ArgmaxWritesTokenZeroAndMatMulWritesNothing) {
  NullBackend b;
  auto s = NewStream(b);
  std::vector<float> x(2 * 5, 1.0f);
  x[3] = 9.0f;
  std::vector<int32_t> out(2, 77);
  ASSERT_TRUE(b.Argmax(*s, Tensor(x.data(), DType::kF32, {2, 5}),
                       Tensor(out.data(), DType::kI32, {2}))
                  .ok());
  EXPECT_EQ(out, std::vector<int32_t>({0, 0}));

  std::vector<bf16> w(3 * 5, FloatToBf16(1.0f));
  std::vector<float> y(2 * 3, -1.0f);
  ASSERT_TRUE(b.MatMul(*s, Tensor(x.data(), DType::kF32, {2, 5}),
                       Tensor(w.data(), DType::kBF16, {3, 5}), Tensor(),
                       Tensor(y.data(), DType::kF32, {2, 3}))
                  .ok());
  EXPECT_EQ(y, std::vector<float>(6, -1.0f));
}

// Bad calls are refused as the CPU backend refuses them (the same
// op_checks.h functions).
TEST(NullBackend, RefusesBadShapesAsTheCpuBackendDoes) {
  NullBackend null;
  cpu::CpuBackend cpu({.num_threads = 1});
  std::vector<float> f(256, 0.0f);
  std::vector<bf16> h(256, 0);
  std::vector<int32_t> n(64, 0);
  auto F = [&](std::initializer_list<int64_t> shape) {
    return Tensor(f.data(), DType::kF32, shape);
  };
  auto B = [&](std::initializer_list<int64_t> shape) {
    return Tensor(h.data(), DType::kBF16, shape);
  };
  auto I = [&](std::initializer_list<int64_t> shape) {
    return Tensor(n.data(), DType::kI32, shape);
  };
  const std::vector<std::function<absl::Status(Backend&, Stream&)>> calls = {
      [&](Backend& b, Stream& s) {
        return b.MatMul(s, F({2, 4}), B({3, 5}), Tensor(), F({2, 3}));
      },
      [&](Backend& b, Stream& s) {
        return b.Embedding(s, F({2}), B({4, 8}), F({2, 8}));  // ids not I32
      },
      [&](Backend& b, Stream& s) {
        return b.RmsNorm(s, F({2, 8}), B({7}), 1e-6f, F({2, 8}));
      },
      [&](Backend& b, Stream& s) {
        return b.Add(s, F({2, 3}), F({3, 2}), F({2, 3}));
      },
      [&](Backend& b, Stream& s) {
        return b.RouterTopK(s, F({2, 4}), 5, true, F({2, 5}), I({2, 5}));
      },
      [&](Backend& b, Stream& s) {
        return b.GatherRows(s, F({4, 8}), I({2}), F({3, 8}));
      },
      [&](Backend& b, Stream& s) {
        return b.ExpertFfn(s, F({1, 8}), B({3 * 4 * 8}), 4, F({1}), F({1, 8}));
      },
      [&](Backend& b, Stream& s) {
        return b.Argmax(s, F({2, 4}), I({3}));
      },
      [&](Backend& b, Stream& s) {
        return b.Softmax(s, F({2, 4}), F({4, 2}));
      },
  };
  auto null_stream = NewStream(null);
  auto cpu_stream = NewStream(cpu);
  for (size_t c = 0; c < calls.size(); ++c) {
    const absl::Status got = calls[c](null, *null_stream);
    const absl::Status want = calls[c](cpu, *cpu_stream);
    EXPECT_EQ(got.code(), absl::StatusCode::kInvalidArgument)
        << "call " << c << ": " << got;
    EXPECT_EQ(got, want) << "call " << c;
  }
}

// The grouped ops: checked as the CPU backend checks them, nothing written.
TEST(NullBackend, GroupedExpertOpsCheckAndWriteNothing) {
  NullBackend null;
  cpu::CpuBackend cpu({.num_threads = 1});
  auto ns = NewStream(null);
  auto cs = NewStream(cpu);
  constexpr int64_t kTokens = 2, kHidden = 8, kFfn = 4, kPairs = 3;
  std::vector<float> x(kTokens * kHidden, 1.0f);
  std::vector<int32_t> rows = {0, 1, 0};
  std::vector<bf16> blob(3 * kFfn * kHidden, FloatToBf16(0.5f));
  const ExpertGroup groups[] = {{blob.data(), 0, 2}, {blob.data(), 2, 1}};
  GroupedExperts call;
  call.x = Tensor(x.data(), DType::kF32, {kTokens, kHidden});
  call.rows = Tensor(rows.data(), DType::kI32, {kPairs});
  call.groups = groups;
  call.ffn = kFfn;
  std::vector<float> ws(GroupedExpertWorkspaceElems(kPairs, kFfn, kHidden));
  std::vector<float> out(kPairs * kHidden, -1.0f);
  const Tensor w(ws.data(), DType::kF32, {static_cast<int64_t>(ws.size())});
  const Tensor o(out.data(), DType::kF32, {kPairs, kHidden});
  ASSERT_TRUE(null.ExpertFfnGrouped(*ns, call, w, o).ok());
  EXPECT_EQ(out, std::vector<float>(kPairs * kHidden, -1.0f));
  const Tensor short_ws(ws.data(), DType::kF32, {1});
  const absl::Status bad = null.ExpertFfnGrouped(*ns, call, short_ws, o);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad, cpu.ExpertFfnGrouped(*cs, call, short_ws, o));

  std::vector<float> weights(kPairs, 1.0f);
  std::vector<int32_t> pairs = {0, 1, 2, -1};
  std::vector<float> y(kTokens * kHidden, 3.0f);
  const Tensor pw(weights.data(), DType::kF32, {kPairs});
  const Tensor yt(y.data(), DType::kF32, {kTokens, kHidden});
  ASSERT_TRUE(null.CombineExpertRows(
                      *ns, o, pw, Tensor(pairs.data(), DType::kI32, {2, 2}), yt)
                  .ok());
  EXPECT_EQ(y, std::vector<float>(kTokens * kHidden, 3.0f));
  const Tensor bad_pairs(pairs.data(), DType::kF32, {2, 2});  // not I32
  const absl::Status bad_combine =
      null.CombineExpertRows(*ns, o, pw, bad_pairs, yt);
  EXPECT_EQ(bad_combine.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_combine, cpu.CombineExpertRows(*cs, o, pw, bad_pairs, yt));
}

}  // namespace
}  // namespace moeserve::kernels
