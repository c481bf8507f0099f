// Benchmarks of CudaBackend's weight-bound ops at decode shapes, against the
// device-memory roofline, in one binary so the ratios come from one GPU in
// one run (the CUDA twin of kernels/cpu/ops_benchmark.cc):
//   BM_DeviceCopy   1 GiB device-to-device copy, bytes counted once (read
//                   side): the roofline for a weight-bound decode
//   BM_MatMul       y = x W^T, Args {m, k, n, path}
//   BM_ExpertFfn    one SwiGLU expert, Args {m, hidden, ffn, path}
//   BM_MatMulInt4   int4 weights (group 128), Args {m, k, n}
//   BM_QuantGemv    one [n, k] matrix in each expert format at m = 1, 4,
//                   Args {m, k, n, format}: 0 bf16 (MatMul's GEMV), 1 int4 g128
//                   bf16 scales symmetric (MatMulInt4), 2 int4 g128 fp16 scales
//                   + zeros (GPTQ/AWQ), 3 fp8 e4m3 with 128x128 scale blocks;
//                   the label gives the bytes read (weights, scales, zeros)
//   BM_ExpertFfnQuant  one SwiGLU expert in each format at m = 1 (numbering:
//                   ExpertFfn, ExpertFfnInt4 x2, ExpertFfnFp8), Args {m,
//                   hidden, ffn, format}
// path: 0 = default (GEMV below 16 rows, cuBLASLt from 16), 1 = GEMV only,
// 2 = cuBLASLt only. Counters: GB/s = weight bytes read per op / time per op
// (the number to hold against BM_DeviceCopy), TFLOP/s = 2 m n k / time.
// Time per op: CUDA events around kInner back-to-back ops; weights rotate
// through >= 512 MiB of copies so the L2 cache (50 MB on an H100) holds none,
// as an MoE layer's experts do. Shapes: Qwen1.5-MoE (hidden 2048, expert ffn
// 1408) and Mixtral (hidden 4096, ffn 14336, 8 kv heads x 128).
//
//   bazel run --config=opt //kernels/cuda:cuda_ops_benchmark
//   # Issue 31's figure, Mixtral w1 at m = 1, int4 vs bf16 (and fp8):
//   ... --benchmark_filter='BM_QuantGemv/1/4096/14336/'
//
// Without a CUDA device it prints "no CUDA device" and exits 0.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/launchers.h"
#include "kernels/fp8_expert.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"

namespace moeserve::kernels::cuda {
namespace {

constexpr int64_t kRotateBytes = int64_t{512} << 20;
constexpr int kInner = 16;  // Ops between two events.

enum Path : int { kDefault = 0, kGemvOnly = 1, kLtOnly = 2 };
const char* const kPathName[] = {"default", "gemv", "cublaslt"};

// One backend + stream per path, made in main() once a device is known.
struct Env {
  std::unique_ptr<CudaBackend> backend[3];
  std::unique_ptr<Stream> stream[3];
};
Env* g_env = nullptr;

absl::Status MakeEnv(Env* env) {
  const CudaBackendOptions options[3] = {{}, {.lt_min_m = 0}, {.lt_min_m = 1}};
  for (int p = 0; p < 3; ++p) {
    MOESERVE_ASSIGN_OR_RETURN(env->backend[p],
                              CudaBackend::Create(0, options[p]));
    MOESERVE_ASSIGN_OR_RETURN(env->stream[p], env->backend[p]->CreateStream());
  }
  return absl::OkStatus();
}

// Copies of `bytes` bytes of pseudo-random data in device memory, to rotate
// through (at least two, at least kRotateBytes together).
class Rotation {
 public:
  static absl::StatusOr<std::unique_ptr<Rotation>> Make(Backend& b, Stream& s,
                                                        int64_t bytes) {
    // 256-byte strides keep every copy aligned like a fresh allocation.
    const int64_t stride = (bytes + 255) / 256 * 256;
    const int64_t copies = std::max<int64_t>(2, kRotateBytes / stride);
    MOESERVE_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buf,
                              b.Allocate(stride * copies));
    std::vector<uint16_t> host((bytes + 1) / 2);
    uint32_t x = 12345;
    for (auto& h : host) {  // Small bf16 values; any bits do for int4.
      x = x * 1664525u + 1013904223u;
      h = FloatToBf16(static_cast<float>(static_cast<int32_t>(x)) * 1e-11f);
    }
    char* base = static_cast<char*>(buf->data());
    for (int64_t c = 0; c < copies; ++c) {
      MOESERVE_RETURN_IF_ERROR(
          b.CopyToDevice(s, base + c * stride, host.data(), bytes));
    }
    MOESERVE_RETURN_IF_ERROR(s.Synchronize());
    return std::unique_ptr<Rotation>(
        new Rotation(std::move(buf), stride, copies));
  }
  void* Next() {
    return static_cast<char*>(buf_->data()) + (i_++ % copies_) * stride_;
  }

 private:
  Rotation(std::unique_ptr<Buffer> buf, int64_t stride, int64_t copies)
      : buf_(std::move(buf)), stride_(stride), copies_(copies) {}
  std::unique_ptr<Buffer> buf_;
  int64_t stride_, copies_, i_ = 0;
};

// Device F32 buffer of n elements (contents: whatever the device had; the
// ops' speed does not depend on them), or null with the error in *st.
std::unique_ptr<Buffer> DeviceF32(Backend& b, Stream& s, int64_t n,
                                  absl::Status* st) {
  auto buf = b.Allocate(std::max<int64_t>(n, 1) * 4);
  if (!buf.ok()) {
    *st = buf.status();
    return nullptr;
  }
  *st = b.Zero(s, (*buf)->data(), n * 4);
  return std::move(*buf);
}

// Times `op` (which enqueues one op on `s`) kInner times per iteration with
// events and reports the time per op; on an error, SkipWithError.
template <typename Op>
void TimeOps(benchmark::State& state, Backend& b, Stream& s, Op op) {
  auto fail = [&](const absl::Status& st) {
    state.SkipWithError(std::string(st.message()).c_str());
  };
  // Warm-up: cuBLASLt plans, first-launch costs.
  if (absl::Status st = op(); !st.ok()) return fail(st);
  if (absl::Status st = s.Synchronize(); !st.ok()) return fail(st);
  auto start = b.CreateEvent(), stop = b.CreateEvent();
  if (!start.ok()) return fail(start.status());
  if (!stop.ok()) return fail(stop.status());
  for (auto _ : state) {
    absl::Status st = b.RecordEvent(s, **start);
    for (int i = 0; i < kInner && st.ok(); ++i) st = op();
    if (st.ok()) st = b.RecordEvent(s, **stop);
    if (st.ok()) st = (*stop)->Synchronize();
    absl::StatusOr<double> secs =
        st.ok() ? (*stop)->SecondsSince(**start) : absl::StatusOr<double>(st);
    if (!secs.ok()) return fail(secs.status());
    state.SetIterationTime(*secs / kInner);
  }
}

void SetCounters(benchmark::State& state, double bytes, double flops) {
  state.counters["GB/s"] = benchmark::Counter(
      bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOP/s"] = benchmark::Counter(
      flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

// "<name>, <MB> MB read": the bytes behind the GB/s counter.
std::string BytesLabel(const char* name, double bytes) {
  char mb[32];
  std::snprintf(mb, sizeof(mb), "%.1f", bytes / 1e6);
  return absl::StrCat(name, ", ", mb, " MB read");
}

void BM_DeviceCopy(benchmark::State& state) {
  CudaBackend& b = *g_env->backend[0];
  Stream& s = *g_env->stream[0];
  const int64_t bytes = int64_t{1} << 30;
  auto src = b.Allocate(bytes), dst = b.Allocate(bytes);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("cannot allocate 2 GiB");
    return;
  }
  TimeOps(state, b, s, [&] {
    return b.CopyOnDevice(s, (*dst)->data(), (*src)->data(), bytes);
  });
  SetCounters(state, bytes, 0);
  state.SetLabel("bytes read");
}
BENCHMARK(BM_DeviceCopy)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_MatMul(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const int path = static_cast<int>(state.range(3));
  CudaBackend& b = *g_env->backend[path];
  Stream& s = *g_env->stream[path];
  absl::Status st;
  auto w = Rotation::Make(b, s, n * k * 2);
  if (!w.ok())
    return state.SkipWithError(std::string(w.status().message()).c_str());
  auto x = DeviceF32(b, s, m * k, &st);
  auto y = st.ok() ? DeviceF32(b, s, m * n, &st) : nullptr;
  if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  TimeOps(state, b, s, [&] {
    return b.MatMul(s, Tensor(x->data(), DType::kF32, {m, k}, Device::kCuda),
                    Tensor((*w)->Next(), DType::kBF16, {n, k}, Device::kCuda),
                    Tensor(),
                    Tensor(y->data(), DType::kF32, {m, n}, Device::kCuda));
  });
  SetCounters(state, 2.0 * n * k, 2.0 * m * n * k);
  state.SetLabel(kPathName[path]);
}

void BM_ExpertFfn(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = state.range(1),
                ffn = state.range(2);
  const int path = static_cast<int>(state.range(3));
  CudaBackend& b = *g_env->backend[path];
  Stream& s = *g_env->stream[path];
  absl::Status st;
  const int64_t blob = 3 * ffn * hidden;
  auto w = Rotation::Make(b, s, blob * 2);
  if (!w.ok())
    return state.SkipWithError(std::string(w.status().message()).c_str());
  auto x = DeviceF32(b, s, m * hidden, &st);
  auto out = st.ok() ? DeviceF32(b, s, m * hidden, &st) : nullptr;
  const int64_t ws_elems = ExpertFfnWorkspaceElems(m, ffn);
  auto ws = st.ok() ? DeviceF32(b, s, ws_elems, &st) : nullptr;
  if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  TimeOps(state, b, s, [&] {
    return b.ExpertFfn(
        s, Tensor(x->data(), DType::kF32, {m, hidden}, Device::kCuda),
        Tensor((*w)->Next(), DType::kBF16, {blob}, Device::kCuda), ffn,
        Tensor(ws->data(), DType::kF32, {ws_elems}, Device::kCuda),
        Tensor(out->data(), DType::kF32, {m, hidden}, Device::kCuda));
  });
  SetCounters(state, 2.0 * blob, 2.0 * m * blob);
  state.SetLabel(kPathName[path]);
}

void BM_MatMulInt4(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const int64_t group = 128;
  CudaBackend& b = *g_env->backend[0];
  Stream& s = *g_env->stream[0];
  absl::Status st;
  // Packed nibbles then the bf16 scales, in one rotated block.
  const int64_t wq_bytes = n * k / 2, scale_bytes = n * (k / group) * 2;
  auto w = Rotation::Make(b, s, wq_bytes + scale_bytes);
  if (!w.ok())
    return state.SkipWithError(std::string(w.status().message()).c_str());
  auto x = DeviceF32(b, s, m * k, &st);
  auto y = st.ok() ? DeviceF32(b, s, m * n, &st) : nullptr;
  if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  TimeOps(state, b, s, [&] {
    char* block = static_cast<char*>((*w)->Next());
    return b.MatMulInt4(
        s, Tensor(x->data(), DType::kF32, {m, k}, Device::kCuda),
        Tensor(block, DType::kI4, {n, k}, Device::kCuda),
        Tensor(block + wq_bytes, DType::kBF16, {n, k / group}, Device::kCuda),
        group, Tensor(y->data(), DType::kF32, {m, n}, Device::kCuda));
  });
  SetCounters(state, wq_bytes + scale_bytes, 2.0 * m * n * k);
  state.SetLabel(BytesLabel("int4 g128", wq_bytes + scale_bytes));
}

enum Format : int { kBf16 = 0, kInt4 = 1, kInt4F16Zeros = 2, kFp8 = 3 };
const char* const kFormatName[] = {"bf16", "int4 g128 bf16 sym",
                                   "int4 g128 fp16+zeros", "fp8 128x128"};
constexpr int64_t kQuantGroup = 128;

int64_t Align256(int64_t v) { return (v + 255) / 256 * 256; }

// One [n, k] matrix of a format in one block: weights, then scales, then
// zeros, each 256-byte aligned; `read` is the bytes the op reads.
struct MatrixParts {
  int64_t scales = 0, zeros = 0, total = 0, read = 0;
};
MatrixParts PartsOf(Format f, int64_t k, int64_t n) {
  MatrixParts p;
  int64_t q = 2 * n * k, s = 0, z = 0;
  if (f == kInt4 || f == kInt4F16Zeros) {
    q = n * k / 2;
    s = n * (k / kQuantGroup) * 2;
    if (f == kInt4F16Zeros) z = n * (k / kQuantGroup);
  } else if (f == kFp8) {
    q = n * k;
    s = ((n + 127) / 128) * ((k + 127) / 128) * 4;
  }
  p.scales = Align256(q);
  p.zeros = p.scales + Align256(s);
  p.total = p.zeros + Align256(z);
  p.read = q + s + z;
  return p;
}

void BM_QuantGemv(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Format f = static_cast<Format>(state.range(3));
  // The GEMV-only backend: bf16 at m < 16 runs the same kind of kernel.
  CudaBackend& b = *g_env->backend[kGemvOnly];
  Stream& s = *g_env->stream[kGemvOnly];
  absl::StatusOr<Strm> raw = RawStream(&b, s);
  if (!raw.ok()) {
    return state.SkipWithError(std::string(raw.status().message()).c_str());
  }
  const MatrixParts parts = PartsOf(f, k, n);
  absl::Status st;
  auto w = Rotation::Make(b, s, parts.total);
  if (!w.ok())
    return state.SkipWithError(std::string(w.status().message()).c_str());
  auto x = DeviceF32(b, s, m * k, &st);
  auto y = st.ok() ? DeviceF32(b, s, m * n, &st) : nullptr;
  if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  const Tensor tx(x->data(), DType::kF32, {m, k}, Device::kCuda);
  const Tensor ty(y->data(), DType::kF32, {m, n}, Device::kCuda);
  TimeOps(state, b, s, [&]() -> absl::Status {
    char* block = static_cast<char*>((*w)->Next());
    const auto* q = reinterpret_cast<const uint8_t*>(block);
    switch (f) {
      case kBf16:
        return b.MatMul(s, tx,
                        Tensor(block, DType::kBF16, {n, k}, Device::kCuda),
                        Tensor(), ty);
      case kInt4:
        return b.MatMulInt4(s, tx,
                            Tensor(block, DType::kI4, {n, k}, Device::kCuda),
                            Tensor(block + parts.scales, DType::kBF16,
                                   {n, k / kQuantGroup}, Device::kCuda),
                            kQuantGroup, ty);
      case kInt4F16Zeros:
        return FromCuda(
            LaunchMatMulInt4(
                static_cast<const float*>(x->data()), m, k, q,
                reinterpret_cast<const uint16_t*>(block + parts.scales),
                /*f16_scales=*/true,
                reinterpret_cast<const uint8_t*>(block + parts.zeros),
                kQuantGroup, n, static_cast<float*>(y->data()), *raw),
            "int4");
      case kFp8:
        return FromCuda(
            LaunchMatMulFp8(
                static_cast<const float*>(x->data()), m, k, q,
                reinterpret_cast<const float*>(block + parts.scales), 128, 128,
                n, static_cast<float*>(y->data()), *raw),
            "fp8");
    }
    return absl::InvalidArgumentError("format");
  });
  SetCounters(state, parts.read, 2.0 * m * n * k);
  state.SetLabel(BytesLabel(kFormatName[f], parts.read));
}

void QuantGemvArgs(benchmark::internal::Benchmark* b) {
  // Mixtral w1 (w3), w2; Qwen1.5-MoE gate+up.
  for (auto [k, n] : {std::pair<int64_t, int64_t>{4096, 14336},
                      std::pair<int64_t, int64_t>{14336, 4096},
                      std::pair<int64_t, int64_t>{2048, 2816}}) {
    for (int64_t m : {1, 4}) {
      for (int f = kBf16; f <= kFp8; ++f) b->Args({m, k, n, f});
    }
  }
}
BENCHMARK(BM_QuantGemv)
    ->Apply(QuantGemvArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_ExpertFfnQuant(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = state.range(1),
                ffn = state.range(2);
  const Format f = static_cast<Format>(state.range(3));
  CudaBackend& b = *g_env->backend[kDefault];
  Stream& s = *g_env->stream[kDefault];
  int64_t bytes = 3 * ffn * hidden * 2, read = bytes;
  absl::StatusOr<Int4ExpertLayout> int4 = Int4ExpertLayoutWithOptions(
      hidden, ffn, kQuantGroup, kQuantGroup,
      {f == kInt4F16Zeros ? Int4ScaleType::kF16 : Int4ScaleType::kBf16,
       f == kInt4F16Zeros});
  absl::StatusOr<Fp8ExpertLayout> fp8 =
      MakeFp8ExpertLayout(hidden, ffn, 128, 128);
  if (!int4.ok() || !fp8.ok()) return state.SkipWithError("layout");
  if (f == kInt4 || f == kInt4F16Zeros) bytes = read = int4->bytes;
  if (f == kFp8) bytes = read = fp8->bytes;
  absl::Status st;
  auto w = Rotation::Make(b, s, bytes);
  if (!w.ok())
    return state.SkipWithError(std::string(w.status().message()).c_str());
  auto x = DeviceF32(b, s, m * hidden, &st);
  auto out = st.ok() ? DeviceF32(b, s, m * hidden, &st) : nullptr;
  const int64_t ws_elems = ExpertFfnWorkspaceElems(m, ffn);
  auto ws = st.ok() ? DeviceF32(b, s, ws_elems, &st) : nullptr;
  if (!st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  const Tensor tx(x->data(), DType::kF32, {m, hidden}, Device::kCuda);
  const Tensor tws(ws->data(), DType::kF32, {ws_elems}, Device::kCuda);
  const Tensor tout(out->data(), DType::kF32, {m, hidden}, Device::kCuda);
  TimeOps(state, b, s, [&]() -> absl::Status {
    void* blob = (*w)->Next();
    switch (f) {
      case kBf16:
        return b.ExpertFfn(
            s, tx,
            Tensor(blob, DType::kBF16, {3 * ffn * hidden}, Device::kCuda), ffn,
            tws, tout);
      case kInt4:
      case kInt4F16Zeros:
        return b.ExpertFfnInt4(
            s, tx, Tensor(blob, DType::kU8, {int4->bytes}, Device::kCuda),
            *int4, tws, tout);
      case kFp8:
        return b.ExpertFfnFp8(
            s, tx, Tensor(blob, DType::kU8, {fp8->bytes}, Device::kCuda), *fp8,
            tws, tout);
    }
    return absl::InvalidArgumentError("format");
  });
  SetCounters(state, read, 2.0 * m * 3 * ffn * hidden);
  state.SetLabel(BytesLabel(kFormatName[f], read));
}

void ExpertQuantArgs(benchmark::internal::Benchmark* b) {
  for (auto [hidden, ffn] : {std::pair<int64_t, int64_t>{4096, 14336},
                             std::pair<int64_t, int64_t>{2048, 1408}}) {
    for (int f = kBf16; f <= kFp8; ++f) b->Args({1, hidden, ffn, f});
  }
}
BENCHMARK(BM_ExpertFfnQuant)
    ->Apply(ExpertQuantArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// (k, n): Qwen1.5-MoE expert gate+up, down, attention q/o; Mixtral expert
// w1 (w3), w2, attention q/o, k/v.
constexpr std::pair<int64_t, int64_t> kShapes[] = {
    {2048, 2816},  {1408, 2048}, {2048, 2048}, {4096, 14336},
    {14336, 4096}, {4096, 4096}, {4096, 1024}};

void MatMulArgs(benchmark::internal::Benchmark* b) {
  for (auto [k, n] : kShapes) {
    for (int64_t m : {1, 4, 16, 64}) {
      b->Args({m, k, n, kDefault});
      // Both paths where the choice is open.
      if (m >= 4) {
        b->Args({m, k, n, kGemvOnly});
        b->Args({m, k, n, kLtOnly});
      }
    }
  }
}
BENCHMARK(BM_MatMul)
    ->Apply(MatMulArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void ExpertArgs(benchmark::internal::Benchmark* b) {
  for (auto [hidden, ffn] : {std::pair<int64_t, int64_t>{2048, 1408},
                             std::pair<int64_t, int64_t>{4096, 14336}}) {
    for (int64_t m : {1, 4, 16, 64}) {
      b->Args({m, hidden, ffn, kDefault});
      if (m >= 16) b->Args({m, hidden, ffn, kGemvOnly});
    }
  }
}
BENCHMARK(BM_ExpertFfn)
    ->Apply(ExpertArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_MatMulInt4)
    ->ArgsProduct({{1, 4, 16}, {2048}, {2816}})
    ->ArgsProduct({{1, 4, 16}, {4096}, {14336}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace moeserve::kernels::cuda

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using ::moeserve::kernels::cuda::Env;
  auto env = std::make_unique<Env>();
  const absl::Status st = ::moeserve::kernels::cuda::MakeEnv(env.get());
  if (absl::IsUnavailable(st)) {
    // The status says "no CUDA device (why)".
    std::printf(
        "cuda_ops_benchmark: %s; nothing measured (needs a machine with an "
        "NVIDIA GPU and driver).\n",
        std::string(st.message()).c_str());
    return 0;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "cuda_ops_benchmark: %s\n", st.ToString().c_str());
    return 1;
  }
  ::moeserve::kernels::cuda::g_env = env.get();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  ::moeserve::kernels::cuda::g_env = nullptr;
  return 0;
}
