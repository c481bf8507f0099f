// What the benchmark ran on, and the memory-read roofline measured in the
// same process.
// Thread-compatible; every function is independent.
#ifndef MOESERVE_TOOLS_BENCH_MACHINE_H_
#define MOESERVE_TOOLS_BENCH_MACHINE_H_

#include <cstdint>
#include <string>

namespace moeserve::bench {

struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo "model name"; "unknown" if absent.
  int logical_cpus = 0;   // std::thread::hardware_concurrency().
  uint64_t memory_bytes = 0;  // /proc/meminfo MemTotal.
  std::string simd;           // "avx512f", "avx2" or "baseline".
};

MachineInfo DescribeMachine();

// Best-of-`repeats` read bandwidth in GB/s (1e9 bytes/s): `threads` threads
// each sum their share of a `bytes`-sized buffer (choose bytes >> last-level
// cache). The buffer is written once before timing, so pages are resident.
// REQUIRES: bytes >= 4096 * threads, threads >= 1, repeats >= 1.
double MeasureReadBandwidthGbps(uint64_t bytes, int threads, int repeats);

}  // namespace moeserve::bench

#endif  // MOESERVE_TOOLS_BENCH_MACHINE_H_
