// <immintrin.h> without GCC 12's false -W(maybe-)uninitialized reports.
//
// Several AVX-512 intrinsics start their result from
// _mm512_undefined_epi32(), written `__m512i __Y = __Y;` in GCC 12's
// avx512fintrin.h. At -O1 and above, wherever such an intrinsic is inlined,
// -Wmaybe-uninitialized (or -Wuninitialized) reports that line of the header:
// hundreds of warnings per kernel file that are about the header, not our code.
// GCC applies a diagnostic pragma by the location of the warning, so ignoring
// the warning around the include silences exactly those reports; warnings
// located in our own code are untouched. Include this instead of
// <immintrin.h>, first (its include guard makes later includes no-ops).
#ifndef MOESERVE_KERNELS_CPU_X86_INTRINSICS_H_
#define MOESERVE_KERNELS_CPU_X86_INTRINSICS_H_

#if defined(__x86_64__)
#pragma GCC diagnostic push
#if !defined(__clang__)  // a GCC-only warning; clang would warn about its name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#endif  // MOESERVE_KERNELS_CPU_X86_INTRINSICS_H_
