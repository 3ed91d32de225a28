/* Host implementation of the workspace API on top of the C heap. */
#include <stdlib.h>

#include "tessera/c_backend_api.h"

void* TSBackendAllocWorkspace(size_t nbytes) {
  void* ptr = NULL;
  /* 64-byte alignment keeps AVX-512 loads on whole cache lines. */
  if (posix_memalign(&ptr, 64, nbytes == 0 ? 1 : nbytes) != 0) return NULL;
  return ptr;
}

int32_t TSBackendFreeWorkspace(void* ptr) {
  free(ptr);
  return 0;
}
