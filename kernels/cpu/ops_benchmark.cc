// Benchmarks of the CPU kernels against the memory roofline, in one binary so
// the ratio is measured on one machine in one run:
//   BM_ReadBandwidth   streaming read of 1 GiB with the kernels' thread pool
//                      (the roofline for a weight-bound decode)
//   BM_Memcpy          256 MiB memcpy, bytes counted once (read side)
//   BM_MatMul          y = x W^T, bytes = weight bytes read; the label
//                      names the kernel variant (cpu-avx512-2t); a second
//                      set runs every variant at m = 1 ... 512
//   BM_ExpertFfn       one fused SwiGLU expert, bytes = expert blob bytes
//   BM_ExpertFfnInt4   the same expert quantized to int4 (int4_expert.h),
//                      bytes = int4 expert bytes (q + scales [+ zeros]);
//                      the label names the int4 kernel's ISA and layout
//                      (draft: bf16 scales; gptq: fp16 scales + zeros;
//                      gptq-g32: the same, groups of 32)
//   BM_ExpertFfnFp8    the same expert quantized to fp8 e4m3 (fp8_expert.h),
//                      bytes = fp8 expert bytes (q + F32 scales); the label
//                      names the fp8 kernel's ISA and the scale tile
//   BM_PagedAttention  one decode step's attention over a paged KV cache,
//                      scalar vs the default variant (AVX2 vector exp)
// Weights rotate through enough copies (>= 1 GiB) to defeat the L3 cache,
// as an MoE layer's experts do. Args: m, k, n (hidden, ffn), threads.
//
//   bazel run --config=opt //kernels/cpu:ops_benchmark
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_int4.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cpu {
namespace {

// More than the last-level cache of the machines this runs on (the Xeon
// with AMX this was tuned on reports a 300 MiB L3), so m = 1 reads DRAM.
constexpr int64_t kRotateBytes = int64_t{1} << 30;

int Threads(int64_t arg) {
  return arg > 0 ? static_cast<int>(arg)
                 : static_cast<int>(std::thread::hardware_concurrency());
}

std::vector<bf16> RandomBf16(int64_t n) {
  std::vector<bf16> v(n);
  uint32_t s = 12345;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = FloatToBf16(static_cast<float>(static_cast<int32_t>(s)) * 1e-10f);
  }
  return v;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int64_t words = (int64_t{1} << 30) / 8;
  std::vector<uint64_t> buf(words, 1);
  ThreadPool pool(Threads(state.range(0)));
  std::vector<uint64_t> sums(64 * 8);
  for (auto _ : state) {
    pool.ParallelFor(words, [&](int64_t b, int64_t e) {
      uint64_t s = 0;  // Integer sum: vectorises without reassociation flags.
      for (int64_t i = b; i < e; ++i) s += buf[i];
      sums[(b * 8 / words) * 8] += s;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() * words * 8);
  state.SetLabel(absl::StrCat(pool.num_threads(), " threads"));
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(0)->UseRealTime();

void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = int64_t{256} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel("1 thread, bytes read");
}
BENCHMARK(BM_Memcpy)->UseRealTime();

// Copies to rotate through for a weight of `bytes`: `want` if positive (a
// model's working set), else enough for kRotateBytes (DRAM).
int64_t Copies(int64_t bytes, int64_t want) {
  return want > 0 ? want : std::max<int64_t>(1, kRotateBytes / bytes);
}

// Copies of a weight matrix of `elems` bf16 to rotate through.
struct Rotation {
  explicit Rotation(int64_t elems, int64_t want_copies = 0)
      : elems(elems),
        copies(Copies(elems * 2, want_copies)),
        data(RandomBf16(elems * copies)) {}
  bf16* Next() { return data.data() + (i++ % copies) * elems; }
  int64_t elems, copies, i = 0;
  std::vector<bf16> data;
};

// The options for threads arg `threads` and kernel-variant arg `isa` (an
// Isa as int; -1: the default choice).
CpuBackendOptions Options(int64_t threads, int64_t isa = -1) {
  CpuBackendOptions options;
  options.num_threads = Threads(threads);
  if (isa >= 0) options.isa = static_cast<Isa>(isa);
  return options;
}

void BM_MatMul(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const int64_t isa = state.range(4);
  if (isa >= 0 && !IsaSupported(static_cast<Isa>(isa))) {
    state.SkipWithError("this CPU lacks the kernel variant");
    return;
  }
  CpuBackend backend(Options(state.range(3), isa));
  auto stream = *backend.CreateStream();
  Rotation w(n * k);
  std::vector<float> x(m * k, 0.5f), y(m * n);
  for (auto _ : state) {
    absl::Status st =
        backend.MatMul(*stream, Tensor(x.data(), DType::kF32, {m, k}),
                       Tensor(w.Next(), DType::kBF16, {n, k}), Tensor(),
                       Tensor(y.data(), DType::kF32, {m, n}));
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
  }
  state.SetBytesProcessed(state.iterations() * n * k * 2);
  state.counters["flops"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(backend.name());
}

// {m, hidden, ffn, threads, isa (-1: default), copies (0: 1 GiB)}.
void BM_ExpertFfn(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = state.range(1),
                ffn = state.range(2), isa = state.range(4);
  if (isa >= 0 && !IsaSupported(static_cast<Isa>(isa))) {
    state.SkipWithError("this CPU lacks the kernel variant");
    return;
  }
  CpuBackend backend(Options(state.range(3), isa));
  auto stream = *backend.CreateStream();
  Rotation blob(3 * ffn * hidden, state.range(5));
  std::vector<float> x(m * hidden, 0.5f), out(m * hidden);
  std::vector<float> ws(ExpertFfnWorkspaceElems(m, ffn));
  for (auto _ : state) {
    absl::Status st = backend.ExpertFfn(
        *stream, Tensor(x.data(), DType::kF32, {m, hidden}),
        Tensor(blob.Next(), DType::kBF16, {3 * ffn * hidden}), ffn,
        Tensor(ws.data(), DType::kF32, {int64_t(ws.size())}),
        Tensor(out.data(), DType::kF32, {m, hidden}));
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
  }
  state.SetBytesProcessed(state.iterations() * 3 * ffn * hidden * 2);
  state.SetLabel(backend.name());
}

// One decode step's attention: `seqs` sequences of `ctx` cached positions
// each (one query row each), `heads` query heads over `kv_heads` KV heads of
// head_dim `hd`, 16-token blocks laid out in order. Arg isa: 0 (scalar) or
// -1 (the default variant). Counter "positions": cached positions attended
// per second, per head.
void BM_PagedAttention(benchmark::State& state) {
  const int64_t ctx = state.range(0), seqs = state.range(1),
                heads = state.range(2), kv_heads = state.range(3),
                hd = state.range(4), isa = state.range(6);
  constexpr int64_t kBlock = 16;
  CpuBackendOptions options = Options(state.range(5), isa);
  options.use_simd = isa != static_cast<int64_t>(Isa::kScalar);
  CpuBackend backend(options);
  auto stream = *backend.CreateStream();
  const int64_t blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const int64_t num_blocks = seqs * blocks_per_seq;
  std::vector<float> k_pool(num_blocks * kBlock * kv_heads * hd),
      v_pool(k_pool.size());
  for (size_t i = 0; i < k_pool.size(); ++i) {
    k_pool[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    v_pool[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
  }
  std::vector<int32_t> qstart(seqs + 1), pos(seqs), tables(num_blocks);
  for (int64_t s = 0; s <= seqs; ++s) qstart[s] = static_cast<int32_t>(s);
  for (int64_t s = 0; s < seqs; ++s) pos[s] = static_cast<int32_t>(ctx - 1);
  for (int64_t b = 0; b < num_blocks; ++b) tables[b] = static_cast<int32_t>(b);
  std::vector<float> q(seqs * heads * hd, 0.25f), out(q.size());
  PagedKvCache cache{
      Tensor(k_pool.data(), DType::kF32, {num_blocks, kBlock, kv_heads, hd}),
      Tensor(v_pool.data(), DType::kF32, {num_blocks, kBlock, kv_heads, hd})};
  AttentionBatch batch{
      Tensor(qstart.data(), DType::kI32, {seqs + 1}),
      Tensor(pos.data(), DType::kI32, {seqs}),
      Tensor(tables.data(), DType::kI32, {seqs, blocks_per_seq})};
  for (auto _ : state) {
    absl::Status st = backend.Attention(
        *stream, Tensor(q.data(), DType::kF32, {seqs, heads, hd}), cache, batch,
        Tensor(out.data(), DType::kF32, {seqs, heads * hd}));
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
  }
  state.counters["positions"] =
      benchmark::Counter(static_cast<double>(ctx * seqs * heads),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(backend.name());
}

// {m, hidden, ffn, threads, layout, isa, copies}. Layout 0: the draft's
// (bf16 scales, no zeros, MakeInt4ExpertLayout's groups); 1: a GPTQ / AWQ
// checkpoint's (fp16 scales, a zero point per group), same groups; 2: as 1
// with groups of 32 everywhere (make_quantized.py's demo-fg checkpoints).
// isa -1: CpuBackend::ExpertFfnInt4 (the default int4 variant); else the
// same three kernels (MatMulInt4 gate + up, SiluMulRows, MatMulInt4 down) on
// that int4 variant. copies 0: enough for 1 GiB (DRAM-bound); else that many
// (192: demo-fg's 6 layers x 32 experts, its working set).
void BM_ExpertFfnInt4(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = state.range(1),
                ffn = state.range(2), layout_arg = state.range(4),
                isa = state.range(5);
  if (isa >= 0 && !Int4IsaSupported(static_cast<Isa>(isa))) {
    state.SkipWithError("this CPU lacks the int4 kernel variant");
    return;
  }
  CpuBackend backend({Threads(state.range(3)), true});
  auto stream = *backend.CreateStream();
  ThreadPool pool(Threads(state.range(3)));
  absl::StatusOr<Int4ExpertLayout> layout = MakeInt4ExpertLayout(hidden, ffn);
  if (layout.ok() && layout_arg != 0) {
    const bool g32 = layout_arg == 2;
    layout = Int4ExpertLayoutWithOptions(
        hidden, ffn, g32 ? 32 : layout->group_in, g32 ? 32 : layout->group_out,
        {Int4ScaleType::kF16, true});
  }
  if (!layout.ok()) {
    state.SkipWithError(std::string(layout.status().message()).c_str());
    return;
  }
  // One quantized expert, copied to enough 64-byte aligned slots (layout.bytes
  // is a multiple of 64).
  const int64_t bytes = layout->bytes;
  const int64_t copies = Copies(bytes, state.range(6));
  std::unique_ptr<Buffer> slots = *backend.Allocate(bytes * copies);
  auto* base = static_cast<std::byte*>(slots->data());
  QuantizeExpertInt4(RandomBf16(3 * ffn * hidden).data(), *layout, base);
  for (int64_t c = 1; c < copies; ++c) {
    std::memcpy(base + c * bytes, base, bytes);
  }
  std::vector<float> x(m * hidden, 0.5f), out(m * hidden);
  std::vector<float> ws(ExpertFfnWorkspaceElems(m, ffn));
  int64_t i = 0;
  for (auto _ : state) {
    const std::byte* expert = base + (i++ % copies) * bytes;
    if (isa < 0) {
      absl::Status st = backend.ExpertFfnInt4(
          *stream, Tensor(x.data(), DType::kF32, {m, hidden}),
          Tensor(const_cast<std::byte*>(expert), DType::kU8, {bytes}), *layout,
          Tensor(ws.data(), DType::kF32, {int64_t(ws.size())}),
          Tensor(out.data(), DType::kF32, {m, hidden}));
      if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
      continue;
    }
    // As CpuBackend::ExpertFfnInt4.
    const Int4Matrix up = Int4ExpertPart(expert, *layout, Int4Part::kUp);
    float* act = ws.data() + m * 2 * ffn;
    MatMulInt4(pool, static_cast<Isa>(isa), x.data(), m,
               Int4ExpertPart(expert, *layout, Int4Part::kGate), &up,
               ws.data());
    SiluMulRows(pool, ws.data(), 2 * ffn, ws.data() + ffn, 2 * ffn, m, ffn,
                act);
    MatMulInt4(pool, static_cast<Isa>(isa), act, m,
               Int4ExpertPart(expert, *layout, Int4Part::kDown), nullptr,
               out.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  const Isa ran = isa < 0 ? backend.int4_isa() : static_cast<Isa>(isa);
  state.SetLabel(absl::StrCat(pool.num_threads(), "t int4 ", IsaName(ran),
                              layout_arg == 0   ? " draft"
                              : layout_arg == 1 ? " gptq"
                                                : " gptq-g32",
                              isa < 0 ? " (backend)" : ""));
}

// Arg tile: 0 = 128 x 128 blocks (the "fp8" method), 1 = per channel,
// 2 = per tensor (compressed-tensors).
void BM_ExpertFfnFp8(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = state.range(1),
                ffn = state.range(2), tile = state.range(4);
  CpuBackend backend({Threads(state.range(3)), true});
  auto stream = *backend.CreateStream();
  const int64_t br = tile == 0 ? 128 : tile == 1 ? 1 : kFp8Whole;
  const int64_t bc = tile == 0 ? 128 : kFp8Whole;
  absl::StatusOr<Fp8ExpertLayout> layout =
      MakeFp8ExpertLayout(hidden, ffn, br, bc);
  if (!layout.ok()) {
    state.SkipWithError(std::string(layout.status().message()).c_str());
    return;
  }
  // One quantized expert, copied to enough 64-byte aligned slots to defeat
  // the L3 cache.
  const int64_t bytes = layout->bytes;
  const int64_t copies = std::max<int64_t>(1, kRotateBytes / bytes);
  std::unique_ptr<Buffer> pool = *backend.Allocate(bytes * copies);
  auto* base = static_cast<std::byte*>(pool->data());
  QuantizeExpertFp8(RandomBf16(3 * ffn * hidden).data(), *layout, base);
  for (int64_t c = 1; c < copies; ++c) {
    std::memcpy(base + c * bytes, base, bytes);
  }
  std::vector<float> x(m * hidden, 0.5f), out(m * hidden);
  std::vector<float> ws(ExpertFfnWorkspaceElems(m, ffn));
  int64_t i = 0;
  for (auto _ : state) {
    absl::Status st = backend.ExpertFfnFp8(
        *stream, Tensor(x.data(), DType::kF32, {m, hidden}),
        Tensor(base + (i++ % copies) * bytes, DType::kU8, {bytes}), *layout,
        Tensor(ws.data(), DType::kF32, {int64_t(ws.size())}),
        Tensor(out.data(), DType::kF32, {m, hidden}));
    if (!st.ok()) state.SkipWithError(std::string(st.message()).c_str());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(absl::StrCat(backend.name(), " fp8 ",
                              IsaName(backend.fp8_isa()),
                              tile == 0   ? " block128"
                              : tile == 1 ? " channel"
                                          : " tensor"));
}

// {m, k, n, threads (0 = all cores), isa (-1 = default)}: Qwen1.5-MoE-sized
// (2048 x 1408) and Mixtral-sized (4096 x 14336) expert projections at
// decode batch 1 and 8, with the default kernels.
BENCHMARK(BM_MatMul)
    ->Args({1, 2048, 1408, 1, -1})
    ->Args({1, 2048, 1408, 0, -1})
    ->Args({8, 2048, 1408, 0, -1})
    ->Args({1, 4096, 14336, 1, -1})
    ->Args({1, 4096, 14336, 0, -1})
    ->Args({8, 4096, 14336, 0, -1})
    ->Args({64, 4096, 14336, 0, -1})
    ->UseRealTime();
// Old vs new kernels in one run (issue 15): every variant this CPU has
// (scalar only at m = 1) on the Qwen1.5-MoE expert's stacked gate/up
// projection (k 2048, n 2 x 1408) at m = 1 (decode), 8, 16, 64 (batched
// decode, verification) and 512 (prefill), all cores; and Mixtral's w1 at
// m = 1 (a 117 MB weight: the DRAM-bound GEMV). Filter with
// --benchmark_filter=BM_MatMul/.*/0/[0-9]$ for these. The same on one
// thread (threads arg 1): on a shared machine its CPU time is the least
// disturbed figure.
void VariantArgs(benchmark::internal::Benchmark* b) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmxBf16}) {
    const auto i = static_cast<int64_t>(isa);
    for (int64_t threads : {0, 1}) {
      for (int64_t m : {1, 8, 16, 64, 512}) {
        b->Args({m, 2048, 2816, threads, i});
      }
      b->Args({1, 4096, 14336, threads, i});
    }
  }
  b->Args({1, 2048, 2816, 0, static_cast<int64_t>(Isa::kScalar)});
}
BENCHMARK(BM_MatMul)->Apply(VariantArgs)->UseRealTime();
// {m, hidden, ffn, threads, isa, copies}: the Qwen1.5-MoE and Mixtral
// experts from DRAM; demo-fg's (256 x 96) on one thread with its 192
// experts' working set (28 MB, about this AMD EPYC's 32 MiB L3) and from
// DRAM, on the default (fp32) and the AVX512_BF16 variant.
void ExpertFfnArgs(benchmark::internal::Benchmark* b) {
  b->Args({1, 2048, 1408, 0, -1, 0});
  b->Args({8, 2048, 1408, 0, -1, 0});
  b->Args({1, 4096, 14336, 0, -1, 0});
  for (Isa isa : {Isa::kAvx512, Isa::kAvx512Bf16}) {
    const auto i = static_cast<int64_t>(isa);
    b->Args({1, 256, 96, 1, i, 192});
    b->Args({1, 256, 96, 1, i, 0});
    b->Args({1, 4096, 14336, 1, i, 0});
  }
}
BENCHMARK(BM_ExpertFfn)->Apply(ExpertFfnArgs)->UseRealTime();
// {m, hidden, ffn, threads, layout, isa, copies}: GB/s of int4 bytes read.
// The backend's default variant at decode m = 1, the draft's layout (0) and
// a checkpoint's (1: fp16 scales + zeros); then old vs new in one run (issue
// 31): kAvx512 (fp32, vpermps table) and kAvx512Bf16 (vdpbf16ps) on
// demo-fg's GPTQ checkpoint (groups of 32) with its working set and from
// DRAM, and Mixtral's expert at m = 1 (one thread, all cores) and m = 8.
void ExpertFfnInt4Args(benchmark::internal::Benchmark* b) {
  b->Args({1, 2048, 1408, 0, 0, -1, 0});
  b->Args({1, 2048, 1408, 0, 1, -1, 0});
  for (Isa isa : {Isa::kAvx512, Isa::kAvx512Bf16}) {
    const auto i = static_cast<int64_t>(isa);
    b->Args({1, 256, 96, 1, 2, i, 192});
    b->Args({8, 256, 96, 1, 2, i, 192});
    b->Args({1, 256, 96, 1, 2, i, 0});
    b->Args({1, 2048, 1408, 0, 1, i, 0});
    b->Args({1, 4096, 14336, 1, 0, i, 0});
    b->Args({1, 4096, 14336, 1, 1, i, 0});
    b->Args({1, 4096, 14336, 0, 1, i, 0});
    b->Args({8, 4096, 14336, 0, 1, i, 0});
  }
}
BENCHMARK(BM_ExpertFfnInt4)->Apply(ExpertFfnInt4Args)->UseRealTime();
// {m, hidden, ffn, threads, tile}: GB/s of fp8 bytes read at decode m = 1
// (the shapes of BM_ExpertFfn and BM_ExpertFfnInt4), and m = 8.
BENCHMARK(BM_ExpertFfnFp8)
    ->Args({1, 2048, 1408, 0, 0})
    ->Args({1, 2048, 1408, 0, 1})
    ->Args({1, 4096, 14336, 1, 0})
    ->Args({1, 4096, 14336, 0, 0})
    ->Args({1, 4096, 14336, 0, 1})
    ->Args({1, 4096, 14336, 0, 2})
    ->Args({8, 4096, 14336, 0, 0})
    ->UseRealTime();
// {ctx, seqs, heads, kv_heads, head_dim, threads, isa}: the demo model's
// attention (8 heads over 4, head_dim 32) at a 512-token context, one and 16
// sequences; Mixtral's (32 over 8, head_dim 128) at 4096; scalar vs default.
void AttentionArgs(benchmark::internal::Benchmark* b) {
  for (int64_t isa : {int64_t{0}, int64_t{-1}}) {
    b->Args({512, 1, 8, 4, 32, 0, isa});
    b->Args({512, 16, 8, 4, 32, 0, isa});
    b->Args({4096, 1, 32, 8, 128, 0, isa});
  }
}
BENCHMARK(BM_PagedAttention)->Apply(AttentionArgs)->UseRealTime();

}  // namespace
}  // namespace moeserve::kernels::cpu
