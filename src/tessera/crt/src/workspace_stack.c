/*
 * Micro implementation of the workspace API: a stack allocator over memory
 * the entry point hands over (sized by the compiler: no malloc, no heap).
 * Kernels free in reverse order of allocation, so a stack is exact.
 */
#include "tessera/c_backend_api.h"
#include "tessera/c_runtime_api.h"

#define TS_WORKSPACE_ALIGNMENT 16u

/* The allocator's state belongs to the thread running the model where the
 * platform has threads (hosted builds), so runs with separate pools may
 * overlap; bare-metal builds have one state: one model run at a time. */
#if !defined(TS_WORKSPACE_STATE)
#if defined(__linux__) || defined(__APPLE__)
#define TS_WORKSPACE_STATE _Thread_local
#else
#define TS_WORKSPACE_STATE
#endif
#endif

static TS_WORKSPACE_STATE uint8_t* ts_workspace_base;
static TS_WORKSPACE_STATE size_t ts_workspace_size;
static TS_WORKSPACE_STATE size_t ts_workspace_top;

void TSWorkspaceInit(void* base, size_t size) {
  ts_workspace_base = (uint8_t*)base;
  ts_workspace_size = base == NULL ? 0u : size;
  ts_workspace_top = 0u;
}

void* TSBackendAllocWorkspace(size_t nbytes) {
  size_t start = (ts_workspace_top + TS_WORKSPACE_ALIGNMENT - 1u) & ~(size_t)(TS_WORKSPACE_ALIGNMENT - 1u);
  if (ts_workspace_base == NULL || nbytes > ts_workspace_size || start > ts_workspace_size - nbytes) {
    return NULL;
  }
  ts_workspace_top = start + nbytes;
  return ts_workspace_base + start;
}

int32_t TSBackendFreeWorkspace(void* ptr) {
  uint8_t* p = (uint8_t*)ptr;
  if (p < ts_workspace_base || p > ts_workspace_base + ts_workspace_top) {
    return -1; /* not the most recent allocation */
  }
  ts_workspace_top = (size_t)(p - ts_workspace_base);
  return 0;
}
