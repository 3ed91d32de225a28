/*
 * tessera C runtime API: what applications and generated entry points share.
 *
 * A TSTensor describes one argument of the packed interface; the status codes
 * are what generated functions return (0 is success).
 */
#ifndef TESSERA_C_RUNTIME_API_H_
#define TESSERA_C_RUNTIME_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TS_DTYPE_INT = 0,
  TS_DTYPE_UINT = 1,
  TS_DTYPE_FLOAT = 2,
  TS_DTYPE_BOOL = 3,
} TSDTypeCode;

/* A dense row-major tensor argument. */
typedef struct {
  void* data;
  const int64_t* shape;
  int32_t ndim;
  uint8_t dtype_code; /* a TSDTypeCode */
  uint8_t dtype_bits;
} TSTensor;

/* Mirrored in Python by tessera/crt/status.py (a test keeps the two equal). */
typedef enum {
  TS_OK = 0,
  TS_ERROR_KERNEL = -1,             /* a kernel could not get its scratch memory */
  TS_ERROR_ARG_COUNT = -2,          /* packed call: wrong number of arguments */
  TS_ERROR_ARG_TYPE = -3,           /* packed call: an argument has the wrong dtype */
  TS_ERROR_ARG_SHAPE = -4,          /* packed call: an argument has the wrong shape */
  TS_ERROR_NULL_POINTER = -5,       /* a pool or tensor pointer is NULL */
  TS_ERROR_INDEX_OUT_OF_RANGE = -6, /* a gather/scatter index (or sequence length) outside its axis */
  TS_ERROR_DIVIDE_BY_ZERO = -7,     /* an integer division or modulo by zero */
} TSStatus;

/* Host builds: threads for the kernels' parallel loops (n <= 0 keeps the
 * current count); returns the count now in effect (1 without OpenMP). The
 * count holds for runs on the calling thread only (OpenMP keeps it per thread). */
int32_t TSSetNumThreads(int32_t num_threads);

/* Host builds: wakes the calling thread's OpenMP pool with an empty parallel region
 * (for timing one kernel at a time; nothing without OpenMP). */
void TSWakeThreads(void);

/* Gives the workspace allocator `size` bytes at `base` (16-byte aligned) for
 * the kernels of one run; generated entry points call it before running.
 * On Linux and macOS the allocator is per thread, so runs on several threads
 * (each with its own pools and workspace) may overlap; elsewhere it is one
 * global, unless TS_WORKSPACE_STATE is defined (e.g. as _Thread_local) when
 * compiling workspace_stack.c. */
void TSWorkspaceInit(void* base, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_C_RUNTIME_API_H_ */
