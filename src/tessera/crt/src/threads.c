/* Host thread count for the kernels' parallel loops (OpenMP when the
 * library was compiled with -fopenmp, a single thread otherwise), and where
 * the pool's threads run.
 *
 * Placement (Linux). Left to the scheduler, a pool thread that went to
 * sleep between parallel loops can be woken onto the CPU of the thread that
 * wakes it. On a 2-vCPU AMD EPYC (Zen 3) VM it was, whenever the caller had
 * slept between runs (probably because the idle vCPU counts as preempted):
 * the two threads then took turns on one CPU, the one spinning at a barrier
 * holding it while the other waited, and ic_resnet8 ran in 1.7-2.0 ms at
 * two threads against 0.45 ms at one, for seconds at a time (onnxruntime at
 * two threads: 0.3 ms). So before a run at more than one thread, each pool
 * thread but the caller is bound to one CPU of the caller's affinity mask:
 * the CPUs after the caller's, in order (processes whose callers run on
 * different CPUs spread out), then the caller's own when there are more
 * threads than CPUs, and round again. The caller itself is never bound.
 * The binding is redone only when the caller's CPU or the count changed
 * since its last run: one sched_getcpu per run otherwise. Users who set
 * OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY decide placement
 * themselves, and nothing is bound. */
#if defined(__linux__)
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#endif
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "tessera/c_runtime_api.h"

#if defined(_OPENMP) && defined(__linux__)
static int ts_user_places_threads(void) {
  static int known = -1; /* every thread that finds it unset stores the same value */
  int answer = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (answer < 0) {
    answer = getenv("OMP_PROC_BIND") || getenv("OMP_PLACES") || getenv("GOMP_CPU_AFFINITY");
    __atomic_store_n(&known, answer, __ATOMIC_RELAXED);
  }
  return answer;
}

/* OpenMP keeps a pool per calling thread, so each remembers where it placed its own */
static __thread int ts_placed_cpu = -1, ts_placed_threads;

static void ts_place_pool(int32_t threads) {
  const int caller = sched_getcpu();
  if (caller < 0 || (caller == ts_placed_cpu && threads == ts_placed_threads) || ts_user_places_threads()) return;
  ts_placed_cpu = caller;
  ts_placed_threads = threads;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int order[CPU_SETSIZE], count = 0; /* the allowed CPUs after the caller's, the caller's own last */
  for (int step = 1; step <= CPU_SETSIZE; ++step) {
    const int cpu = (caller + step) % CPU_SETSIZE;
    if (CPU_ISSET(cpu, &allowed)) order[count++] = cpu;
  }
  if (count <= 1) return; /* the caller may run on one CPU only: nowhere else to put the others */
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    if (t > 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(order[(t - 1) % count], &one);
      (void)sched_setaffinity(0, sizeof one, &one); /* a refusal leaves the thread where it was */
    }
  }
}
#endif

__attribute__((visibility("default"))) int32_t TSSetNumThreads(int32_t num_threads) {
#ifdef _OPENMP
  if (num_threads > 0) omp_set_num_threads(num_threads);
#if defined(__linux__)
  if (num_threads > 1) ts_place_pool(num_threads);
#endif
  return omp_get_max_threads();
#else
  (void)num_threads;
  return 1;
#endif
}

/* An empty parallel region at the calling thread's count: the pool's threads wake, and then spin a while
 * (GOMP_SPINCOUNT, runtime/openmp_wait.py) waiting for the next region. GraphModule.profile calls it before
 * it times each kernel on its own: between calls from Python the threads would have gone to sleep, and the
 * kernel's first parallel loop would pay a wake-up that a run, whose kernels follow each other in C, does
 * not (at two threads, Inception-v2's concatenations timed 0.25 ms a call instead of 0.07 ms). */
__attribute__((visibility("default"))) void TSWakeThreads(void) {
#ifdef _OPENMP
#pragma omp parallel
  {
  }
#endif
}
