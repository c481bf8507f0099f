#include "tools/bench/machine.h"

#include "kernels/cpu/x86_intrinsics.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moeserve::bench {
namespace {

// Value of the first "key : value" line of `path` whose key is `key`.
std::string ProcField(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> kv = absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (kv.size() == 2 && absl::StripAsciiWhitespace(kv[0]) == key) {
      return std::string(absl::StripAsciiWhitespace(kv[1]));
    }
  }
  return "";
}

__attribute__((target("avx2"))) uint64_t SumAvx2(const uint64_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 16 <= n; i += 16) {
    const __m256i* v = reinterpret_cast<const __m256i*>(p + i);
    a = _mm256_add_epi64(a, _mm256_load_si256(v));
    b = _mm256_add_epi64(b, _mm256_load_si256(v + 1));
    c = _mm256_add_epi64(c, _mm256_load_si256(v + 2));
    d = _mm256_add_epi64(d, _mm256_load_si256(v + 3));
  }
  a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t SumScalar(const uint64_t* p, size_t n) {
  uint64_t s[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  }
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

struct FreeDeleter {
  void operator()(uint64_t* p) const { std::free(p); }
};

}  // namespace

MachineInfo DescribeMachine() {
  MachineInfo m;
  m.cpu_model = ProcField("/proc/cpuinfo", "model name");
  if (m.cpu_model.empty()) m.cpu_model = "unknown";
  m.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  std::string total = ProcField("/proc/meminfo", "MemTotal");
  uint64_t kib = 0;
  if (absl::SimpleAtoi(absl::StripSuffix(total, " kB"), &kib)) {
    m.memory_bytes = kib * 1024;
  }
  __builtin_cpu_init();
  m.simd = __builtin_cpu_supports("avx512f") ? "avx512f"
           : __builtin_cpu_supports("avx2")  ? "avx2"
                                             : "baseline";
  return m;
}

double MeasureReadBandwidthGbps(uint64_t bytes, int threads, int repeats) {
  const size_t words = bytes / 8 / (16 * threads) * (16 * threads);
  std::unique_ptr<uint64_t, FreeDeleter> buf(
      static_cast<uint64_t*>(std::aligned_alloc(64, words * 8)));
  for (size_t i = 0; i < words; ++i) buf.get()[i] = i;
  const bool avx2 = __builtin_cpu_supports("avx2");
  const size_t per_thread = words / threads;
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;  // threads - 1 helpers; we are thread 0
    auto sum = [&](int t) {
      const uint64_t* p = buf.get() + t * per_thread;
      sink += avx2 ? SumAvx2(p, per_thread) : SumScalar(p, per_thread);
    };
    for (int t = 1; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        sum(t);
      });
    }
    while (ready.load() < threads - 1) std::this_thread::yield();
    const auto start = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    sum(0);
    for (std::thread& th : pool) th.join();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    best = std::max(best, static_cast<double>(words * 8) / s / 1e9);
  }
  return best;
}

}  // namespace moeserve::bench
