/* Does this CPU have the instruction-set features the library was compiled
 * for?  gcc predefines a macro for every feature that -march/-m flags turn
 * on; each is checked against the running CPU, so a library built for
 * x86-64-v4 refuses to run (instead of dying of SIGILL) on an AVX2 machine.
 * The function itself is compiled for the x86-64 baseline, so the check
 * cannot use the instructions it is checking for. */
#include <stddef.h>

#include "tessera/c_runtime_api.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define TS_REQUIRE(name) \
  if (!__builtin_cpu_supports(name)) return name;

__attribute__((visibility("default"), target("arch=x86-64")))
const char* TSMissingCpuFeature(void) {
  __builtin_cpu_init();
#ifdef __SSE4_2__
  TS_REQUIRE("sse4.2")
#endif
#ifdef __POPCNT__
  TS_REQUIRE("popcnt")
#endif
#ifdef __AVX__
  TS_REQUIRE("avx")
#endif
#ifdef __AVX2__
  TS_REQUIRE("avx2")
#endif
#ifdef __FMA__
  TS_REQUIRE("fma")
#endif
#ifdef __BMI2__
  TS_REQUIRE("bmi2")
#endif
#ifdef __AVX512F__
  TS_REQUIRE("avx512f")
#endif
#ifdef __AVX512BW__
  TS_REQUIRE("avx512bw")
#endif
#ifdef __AVX512DQ__
  TS_REQUIRE("avx512dq")
#endif
#ifdef __AVX512VL__
  TS_REQUIRE("avx512vl")
#endif
#ifdef __AVX512VNNI__
  TS_REQUIRE("avx512vnni")
#endif
#ifdef __AVX512BF16__
  TS_REQUIRE("avx512bf16")
#endif
#ifdef __AVX512FP16__
  TS_REQUIRE("avx512fp16")
#endif
  return NULL;
}
#else
__attribute__((visibility("default"))) const char* TSMissingCpuFeature(void) { return NULL; }
#endif
