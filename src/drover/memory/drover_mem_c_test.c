/* The C API from C: the header compiles as C11 with the project's warnings,
 * and a pool works end to end (registered with ctest as memory_c_api_test). */

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "drover/memory/drover_mem.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(void) {
  drover_mem_options_t opt;
  drover_mem_options_init(&opt);
  opt.reserve_bytes = 1u << 20;
  opt.max_tags = 4;
  drover_mem_pool_t pool;
  CHECK(drover_mem_pool_create(&opt, &pool) == DROVER_MEM_OK);

  void* p = NULL;
  CHECK(drover_mem_alloc(pool, 1000, 4096, 3, &p) == DROVER_MEM_OK);
  CHECK(p != NULL && ((uintptr_t)p % 4096) == 0);
  memset(p, 0x5a, 1000);
  size_t usable = 0;
  uint32_t tag = 0;
  CHECK(drover_mem_usable_size(pool, p, &usable, &tag) == DROVER_MEM_OK);
  CHECK(usable == 1024 && tag == 3);
  drover_mem_tag_usage_t u;
  CHECK(drover_mem_tag_usage(pool, 3, &u) == DROVER_MEM_OK);
  CHECK(u.bytes_in_use == 1024 && u.allocations == 1);

  void* q = NULL;
  CHECK(drover_mem_alloc(pool, 0, 0, 0, &q) == DROVER_MEM_ERR_INVALID_SIZE);
  CHECK(drover_mem_alloc(pool, (size_t)-1, 0, 0, &q) == DROVER_MEM_ERR_INVALID_SIZE);
  CHECK(drover_mem_alloc(pool, 64, 48, 0, &q) == DROVER_MEM_ERR_INVALID_ALIGNMENT);
  CHECK(drover_mem_alloc(pool, 64, 0, 4, &q) == DROVER_MEM_ERR_INVALID_TAG);
  CHECK(drover_mem_free(pool, &usable) == DROVER_MEM_ERR_FOREIGN_POINTER);
  CHECK(drover_mem_free(pool, p) == DROVER_MEM_OK);
  CHECK(drover_mem_free(pool, p) == DROVER_MEM_ERR_DOUBLE_FREE);

  drover_mem_stats_t s;
  CHECK(drover_mem_stats(pool, &s) == DROVER_MEM_OK);
  CHECK(s.bytes_in_use == 0 && s.allocations == 0 && s.peak_bytes_in_use == 1024);
  CHECK(s.failed_allocations == 4);
  CHECK(drover_mem_pool_destroy(pool) == DROVER_MEM_OK);
  CHECK(drover_mem_alloc(pool, 64, 0, 0, &q) == DROVER_MEM_ERR_INVALID_POOL);
  CHECK(strcmp(drover_mem_strerror(DROVER_MEM_ERR_DOUBLE_FREE), "pointer into free memory of the pool (double free)") ==
        0);

  if (failures != 0) return 1;
  printf("drover_mem C API: ok\n");
  return 0;
}
