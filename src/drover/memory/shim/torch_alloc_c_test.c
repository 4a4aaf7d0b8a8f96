/*
 * libdrover_torch_alloc.so from C, the way PyTorch's CUDAPluggableAllocator
 * uses it: dlopen, dlsym of the two names, calls with (size, device, stream)
 * and (ptr, size, device, stream). Host pools for device 0 (with a limit),
 * a CUDA pool on the stand-in libcuda.so.1 for device 2, bad input for the
 * rest. Exits non-zero on the first failed check.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef void* (*malloc_fn)(ssize_t, int, void*);
typedef void (*free_fn)(void*, ssize_t, int, void*);
typedef size_t (*in_use_fn)(int);

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(void) {
  void* lib = dlopen(DROVER_TORCH_ALLOC_PATH, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  malloc_fn torch_malloc;
  free_fn torch_free;
  in_use_fn in_use;
  *(void**)&torch_malloc = dlsym(lib, "drover_torch_malloc");
  *(void**)&torch_free = dlsym(lib, "drover_torch_free");
  *(void**)&in_use = dlsym(lib, "drover_torch_bytes_in_use");
  CHECK(torch_malloc != NULL && torch_free != NULL && in_use != NULL);
  if (failures) return 1;
  const ssize_t mib = 1 << 20;
  void* stream = NULL; /* cudaStream_t: the default stream */

  /* Device 0: a host pool limited to 16 MiB. */
  setenv("DROVER_TORCH_BACKEND", "host", 1);
  setenv("DROVER_TORCH_POOL_LIMIT", "16777216", 1);
  setenv("DROVER_TORCH_POOL_RESERVE", "4194304", 1);
  void* a = torch_malloc(12 * mib, 0, stream);
  CHECK(a != NULL);
  if (a != NULL) memset(a, 0x5a, (size_t)(12 * mib));
  CHECK(in_use(0) == (size_t)(12 * mib));
  void* b = torch_malloc(8 * mib, 0, stream); /* past the limit: NULL, PyTorch's OutOfMemoryError */
  CHECK(b == NULL);
  void* c = torch_malloc(1000, 0, stream);
  CHECK(c != NULL);
  CHECK(in_use(0) == (size_t)(12 * mib) + 1024); /* 1000 rounded up to 512 */
  torch_free(a, 12 * mib, 0, stream);
  torch_free(c, 1000, 0, stream);
  CHECK(in_use(0) == 0);

  /* Bad input: NULL or a message, never a crash; the accounting stays. */
  CHECK(torch_malloc(0, 0, stream) == NULL);
  CHECK(torch_malloc(-5, 0, stream) == NULL);
  CHECK(torch_malloc(mib, -1, stream) == NULL);
  CHECK(torch_malloc(mib, 64, stream) == NULL);
  int local = 0;
  torch_free(&local, 4, 0, stream);    /* a foreign pointer */
  torch_free(a, 12 * mib, 0, stream);  /* a double free */
  torch_free(a, 12 * mib, 99, stream); /* a bad device */
  torch_free(NULL, 0, 0, stream);
  CHECK(in_use(0) == 0);

  /* Device 1: an unknown backend, refused (and remembered). */
  setenv("DROVER_TORCH_BACKEND", "tpu", 1);
  CHECK(torch_malloc(mib, 1, stream) == NULL);
  CHECK(torch_malloc(mib, 1, stream) == NULL);

  /* Device 2: the CUDA backend, on the stand-in driver (DROVER_LIBCUDA). */
  setenv("DROVER_TORCH_BACKEND", "cuda", 1);
  void* g = torch_malloc(3 * mib, 2, stream);
  CHECK(g != NULL);
  if (g != NULL) memset(g, 1, (size_t)(3 * mib)); /* the stand-in's device memory is host memory */
  CHECK(in_use(2) == (size_t)(3 * mib));
  torch_free(g, 3 * mib, 2, stream);
  CHECK(in_use(2) == 0);

  if (failures == 0) printf("torch_alloc_c_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
