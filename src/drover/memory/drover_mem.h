#ifndef DROVER_MEMORY_DROVER_MEM_H_
#define DROVER_MEMORY_DROVER_MEM_H_
/*
 * libdrover_mem: a memory pool for workloads (C API).
 *
 * A pool reserves large segments from a backend (host memory, CUDA, HIP,
 * OpenCL) and sub-allocates them with a two-level
 * segregated-fit (TLSF) allocator: O(1) allocate and free, no backend call on
 * the fast path, free neighbours coalesced at once. Block metadata lives in
 * host memory beside the pool (never inside the managed memory, which may be
 * a GPU's), so the same allocator serves device memory.
 *
 * On a backend with virtual memory management (host, CUDA VMM, HIP VMM) an
 * allocation that no contiguous free block can hold, once the pool cannot
 * grow, is served by mapping scattered free chunks of its segments into one
 * new virtual range ("stitching"); drover_mem_remap_stats says whether a pool
 * does and how much it has stitched. Other backends sub-allocate plainly.
 *
 * Every allocation carries a tag (a tenant, a model, a KV cache ...): usage per
 * tag is exact. Pools are named by handles that are checked on every call: a
 * handle of a destroyed pool gets DROVER_MEM_ERR_INVALID_POOL, never a crash.
 *
 * Thread-safe: each pool has one mutex; calls on different pools do not
 * contend. See docs/memory.md.
 *
 *   drover_mem_options_t opt;
 *   drover_mem_options_init(&opt);
 *   opt.reserve_bytes = 1ull << 30;
 *   drover_mem_pool_t pool;
 *   if (drover_mem_pool_create(&opt, &pool) != DROVER_MEM_OK) ...
 *   void* p;
 *   int rc = drover_mem_alloc(pool, 4096, 0, tenant_tag, &p);
 *   ...
 *   drover_mem_free(pool, p);
 *   drover_mem_pool_destroy(pool);
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: every call returns one. Negative values are errors. */
enum {
  DROVER_MEM_OK = 0,
  DROVER_MEM_ERR_INVALID_ARGUMENT = -1,  /* a null out-pointer or options, bad option values */
  DROVER_MEM_ERR_INVALID_POOL = -2,      /* the handle names no live pool (destroyed, or never created) */
  DROVER_MEM_ERR_INVALID_SIZE = -3,      /* zero, or so large it is a negative number cast to size_t */
  DROVER_MEM_ERR_INVALID_ALIGNMENT = -4, /* not a power of two, or larger than a segment */
  DROVER_MEM_ERR_INVALID_TAG = -5,       /* tag >= options.max_tags */
  DROVER_MEM_ERR_TOO_LARGE = -6,         /* can never fit: larger than the pool's limit */
  DROVER_MEM_ERR_OUT_OF_MEMORY = -7,     /* cannot fit now: the pool is at its limit, or the backend refused */
  DROVER_MEM_ERR_FOREIGN_POINTER = -8,   /* free of a pointer that is not in this pool */
  DROVER_MEM_ERR_DOUBLE_FREE = -9,       /* free of a pointer into free memory of this pool */
  DROVER_MEM_ERR_INTERIOR_POINTER = -10, /* free of a pointer inside a live allocation, not its start */
  DROVER_MEM_ERR_LIMIT_TOO_SMALL = -11,  /* limit or reservation smaller than one backend granule */
  DROVER_MEM_ERR_UNSUPPORTED = -12,      /* a backend that is not built or not present on this machine */
  DROVER_MEM_ERR_TOO_MANY_POOLS = -13,   /* DROVER_MEM_MAX_POOLS pools are live */
  DROVER_MEM_ERR_BACKEND = -14           /* the backend failed for another reason (errno kept in the message) */
};

/* At most this many pools are live at once in a process. */
#define DROVER_MEM_MAX_POOLS 4096

typedef enum {
  DROVER_MEM_BACKEND_HOST = 0, /* host memory (memfd mappings, remaps): tests and CPU devices */
  /* CUDA driver API, libcuda.so.1 (or $DROVER_LIBCUDA) loaded at run time:
   * VMM (remaps) where the device has it, cuMemAlloc otherwise */
  DROVER_MEM_BACKEND_CUDA = 1,
  DROVER_MEM_BACKEND_HIP = 2,   /* HIP, libamdhip64.so loaded at run time: VMM where present */
  DROVER_MEM_BACKEND_OPENCL = 3 /* OpenCL 2.0 shared virtual memory (clSVMAlloc); no remapping */
} drover_mem_backend_t;

/* drover_mem_options_t.flags */
#define DROVER_MEM_FLAG_NO_REMAP 1u /* plain sub-allocation even where the backend can remap */

/* A pool's handle: a slot and a generation, checked on every call. Zero is
 * never a valid handle. */
typedef struct {
  uint64_t id;
} drover_mem_pool_t;

typedef struct {
  /* A drover_mem_backend_t (an int, so that any value a C caller passes is
   * checked, not undefined). Default DROVER_MEM_BACKEND_HOST. */
  int backend;
  int device; /* device ordinal for device backends; 0 */
  /* Bytes reserved at creation (the first segment), rounded up to the
   * backend's granule. Default 64 MiB. */
  size_t reserve_bytes;
  /* Most bytes the pool may reserve in all; an allocation beyond it fails with
   * DROVER_MEM_ERR_OUT_OF_MEMORY. Rounded down to the granule. 0 means
   * reserve_bytes (no growth). */
  size_t limit_bytes;
  /* Size of each further segment when the pool grows (rounded up to the
   * granule; a larger allocation gets a segment of its own size). 0 means
   * reserve_bytes. */
  size_t grow_bytes;
  /* Every allocation is aligned to at least this (power of two, 16 to the
   * backend's granule) and its size rounded up to a multiple of it. Vendor
   * rules: CUDA and HIP guarantee 256, OpenCL CL_DEVICE_MEM_BASE_ADDR_ALIGN
   * (often 128), host 16. Default 256. */
  size_t min_alignment;
  /* Tags are 0 .. max_tags-1 (1 to 65536). Default 256. */
  uint32_t max_tags;
  /* DROVER_MEM_FLAG_* bits; unknown bits are DROVER_MEM_ERR_INVALID_ARGUMENT. Default 0. */
  uint32_t flags;
} drover_mem_options_t;

typedef struct {
  uint64_t bytes_in_use;       /* sum of the usable sizes of live allocations */
  uint64_t bytes_requested;    /* sum of the sizes asked for by live allocations */
  uint64_t bytes_reserved;     /* physical bytes held: the segments' sizes less decommitted chunks */
  uint64_t peak_bytes_in_use;  /* highest bytes_in_use since creation */
  uint64_t bytes_free;         /* bytes_reserved - bytes_in_use */
  uint64_t largest_free_block; /* the largest allocation that fits without growing */
  double fragmentation;        /* 1 - largest_free_block / bytes_free; 0 when nothing is free */
  uint64_t allocations;        /* live allocations */
  uint64_t total_allocations;  /* successful allocations since creation */
  uint64_t failed_allocations; /* allocations refused (any error) since creation */
  uint64_t segments;           /* segments reserved from the backend */
  uint64_t limit_bytes;        /* the pool's limit after rounding */
  uint64_t granule;            /* the backend's granule */
  uint64_t min_alignment;
} drover_mem_stats_t;

typedef struct {
  uint64_t bytes_in_use; /* usable bytes of this tag's live allocations */
  uint64_t allocations;  /* this tag's live allocations */
  uint64_t peak_bytes_in_use;
} drover_mem_tag_usage_t;

/* Remapping and what it gathers. A stitched range is virtual: its memory is
 * the free chunks of segments (counted in bytes_reserved once), so
 * drover_mem_stats' bytes_free = bytes_reserved - bytes_in_use still holds. */
typedef struct {
  int remaps;                  /* 1 when the pool stitches (the backend has VMM and the flag allows) */
  uint64_t chunk;              /* the unit of remapping (the backend's granule); 0 when remaps is 0 */
  uint64_t free_chunk_bytes;   /* free bytes in whole chunks of the segments: the most one stitch can gather */
  uint64_t largest_allocation; /* the largest allocation that fits without growing, stitching included */
  double fragmentation;        /* 1 - largest_allocation / bytes_free; 0 when nothing is free */
  /* Stitched ranges held, including ranges whose allocations were all freed:
   * those are kept for reuse until an allocation finds no room or a trim. */
  uint64_t stitched_ranges;
  uint64_t stitched_bytes;       /* bytes of segment memory mapped into them */
  uint64_t stitched_allocations; /* live allocations inside stitched ranges */
  uint64_t total_stitches;       /* stitched ranges made since creation */
  uint64_t failed_stitches;      /* stitches tried and refused (too few free chunks, or the backend) */
  uint64_t decommitted_bytes;    /* free chunks whose physical memory drover_mem_release_free gave back */
} drover_mem_remap_stats_t;

/* Fills *options with the defaults. */
void drover_mem_options_init(drover_mem_options_t* options);

/* Creates a pool and reserves its first segment. */
int drover_mem_pool_create(const drover_mem_options_t* options, drover_mem_pool_t* pool);

/* Releases every segment; live allocations become invalid. The handle is
 * dead afterwards: every call with it returns DROVER_MEM_ERR_INVALID_POOL. */
int drover_mem_pool_destroy(drover_mem_pool_t pool);

/* Allocates size bytes aligned to max(alignment, min_alignment); alignment 0
 * means min_alignment. On success *ptr is the block; on error *ptr is NULL. */
int drover_mem_alloc(drover_mem_pool_t pool, size_t size, size_t alignment, uint32_t tag, void** ptr);

/* Frees an allocation of this pool. Freeing NULL is a no-op (DROVER_MEM_OK). */
int drover_mem_free(drover_mem_pool_t pool, void* ptr);

/* The usable size of a live allocation (its size rounded up to min_alignment)
 * and, if tag is not NULL, its tag. */
int drover_mem_usable_size(drover_mem_pool_t pool, const void* ptr, size_t* size, uint32_t* tag);

int drover_mem_stats(drover_mem_pool_t pool, drover_mem_stats_t* stats);

int drover_mem_tag_usage(drover_mem_pool_t pool, uint32_t tag, drover_mem_tag_usage_t* usage);

/* Remapping state and fragmentation as stitching sees it. */
int drover_mem_remap_stats(drover_mem_pool_t pool, drover_mem_remap_stats_t* stats);

/* Releases the stitched ranges and the segments, other than the first, that
 * hold no allocation. */
int drover_mem_trim(drover_mem_pool_t pool);

/* Under memory pressure: trims, then on a backend with VMM returns the
 * physical memory of every whole free chunk inside the segments to the
 * backend (the address ranges stay reserved; an allocation that finds no
 * room commits them again before growing). *released (may be NULL) gets
 * the bytes given back. Without VMM it only trims. */
int drover_mem_release_free(drover_mem_pool_t pool, size_t* released);

/* A static lower-case description of an error code ("invalid pool handle"). */
const char* drover_mem_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* DROVER_MEMORY_DROVER_MEM_H_ */
