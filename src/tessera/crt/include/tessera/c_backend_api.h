/*
 * tessera C backend API: the few services generated kernels may call.
 *
 * Kernels call TSBackendAllocWorkspace only for scratch memory a kernel needs
 * internally (e.g. a padded copy of its input). Each platform links exactly
 * one implementation: the host runtime uses the C heap, the micro runtime a
 * statically sized stack allocator.
 */
#ifndef TESSERA_C_BACKEND_API_H_
#define TESSERA_C_BACKEND_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Returns `nbytes` of 16-byte aligned scratch memory, or NULL when out of memory. */
void* TSBackendAllocWorkspace(size_t nbytes);

/* Releases memory from TSBackendAllocWorkspace; frees must be in reverse order
 * of allocation (the micro runtime's allocator is a stack). Returns 0 on success. */
int32_t TSBackendFreeWorkspace(void* ptr);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_C_BACKEND_API_H_ */
