/* Host thread count for the kernels' parallel loops (OpenMP when the
 * library was compiled with -fopenmp, a single thread otherwise). */
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "tessera/c_runtime_api.h"

__attribute__((visibility("default"))) int32_t TSSetNumThreads(int32_t num_threads) {
#ifdef _OPENMP
  if (num_threads > 0) omp_set_num_threads(num_threads);
  return omp_get_max_threads();
#else
  (void)num_threads;
  return 1;
#endif
}
