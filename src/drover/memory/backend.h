#pragma once
// MemoryBackend: where a pool's segments come from.
//
// Shaped after virtual memory management (CUDA's cuMemAddressReserve /
// cuMemCreate / cuMemMap / cuMemSetAccess, HIP's hipMemAddressReserve ...):
// a segment is first a reserved address range, then backed with physical
// memory in granule-sized pieces. The pool uses Reserve + Commit for a whole
// segment. A backend with VMM (SupportsRemap) can also map the physical
// memory that backs part of one range into another range (Alias): that is
// how the pool serves a large allocation from scattered free chunks
// (stitching, pool.cc). A backend without VMM (OpenCL SVM, cuMemAlloc when
// the device has no VMM) reserves and commits in one step, says so in
// SupportsRemap(), and the pool falls back to plain sub-allocation.
//
// Implementations (MakeBackend): host memory (memfd + mmap MAP_FIXED, with
// VMM semantics), CUDA through the driver API (cuda_vmm_backend.cc, libcuda
// loaded with dlopen), HIP (hip_backend.cc, libamdhip64 loaded with dlopen),
// OpenCL shared virtual memory (opencl_backend.cc, libOpenCL loaded with
// dlopen). Not thread-safe: the pool calls its backend under the pool's
// mutex. Calls are slow (system or driver calls) and never on the allocation
// fast path: only when a pool grows, stitches, trims, or is created and
// destroyed.

#include <cstdint>
#include <memory>
#include <string>

#include "drover/memory/drover_mem.h"

namespace drover::memory {

class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;

  virtual const char* Name() const = 0;
  // Reservation and commit granule in bytes (host: the page size; CUDA VMM:
  // cuMemGetAllocationGranularity, usually 2 MiB). A power of two.
  virtual uint64_t Granule() const = 0;
  // True when Commit can back any granule of a range independently
  // (physical pages need not be contiguous).
  virtual bool SupportsRemap() const = 0;

  // Reserves an address range of size bytes (a multiple of Granule()), not
  // yet usable. Returns DROVER_MEM_OK and *base, or an error code.
  virtual int Reserve(uint64_t size, uint64_t* base) = 0;
  // Backs [base + offset, base + offset + size) with physical memory, readable
  // and writable by the device. Offsets and sizes are multiples of Granule().
  virtual int Commit(uint64_t base, uint64_t offset, uint64_t size) = 0;
  // Returns the physical memory of a committed part to the system.
  virtual int Decommit(uint64_t base, uint64_t offset, uint64_t size) = 0;
  // Releases a whole range (decommitting what is still committed).
  virtual void Release(uint64_t base, uint64_t size) = 0;

  // Remapping (only where SupportsRemap()). Maps the physical memory that
  // backs the committed [src, src + size) also at [dst, dst + size), a part
  // of a reserved range that is not committed; both addresses then name the
  // same bytes. src, dst and size are multiples of Granule(). The memory
  // stays owned by src's range: Decommit or Release of it while an alias
  // lives is the caller's bug.
  virtual int Alias(uint64_t src, uint64_t dst, uint64_t size) {
    (void)src, (void)dst, (void)size;
    last_error_ = std::string(Name()) + " cannot remap";
    return DROVER_MEM_ERR_UNSUPPORTED;
  }
  // Unmaps an alias made by Alias (the physical memory stays with its owner);
  // dst's range is reserved and uncommitted again.
  virtual int Unalias(uint64_t dst, uint64_t size) {
    (void)dst, (void)size;
    return DROVER_MEM_ERR_UNSUPPORTED;
  }

  // The last error in words ("mmap of 1073741824 bytes: Cannot allocate memory").
  const std::string& last_error() const { return last_error_; }

 protected:
  std::string last_error_;
};

// The backend of kind, or null with *error set: DROVER_MEM_ERR_UNSUPPORTED
// when the vendor library or a device is absent (*detail, when not null,
// says which: "dlopen libamdhip64.so: ...").
std::unique_ptr<MemoryBackend> MakeBackend(int kind, int device, int* error, std::string* detail = nullptr);

// Host memory without remapping (anonymous mmap, like a device without VMM):
// for tests that compare plain sub-allocation with stitching.
std::unique_ptr<MemoryBackend> MakePlainHostBackend();

// The CUDA driver API backend (cuda_vmm_backend.cc) on device: libcuda is
// opened from library, or from $DROVER_LIBCUDA, or as "libcuda.so.1" when both
// are empty. With VMM (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
// it remaps in chunks of chunk_bytes (0: the larger of the allocation
// granularity and 2 MiB, as GMLake); without, it serves segments with
// cuMemAlloc and SupportsRemap() is false. force_plain: use cuMemAlloc even
// where VMM exists.
struct CudaBackendOptions {
  int device = 0;
  std::string library;
  uint64_t chunk_bytes = 0;
  bool force_plain = false;
};
std::unique_ptr<MemoryBackend> MakeCudaBackend(const CudaBackendOptions& options, int* error, std::string* detail);

// HIP (hip_backend.cc): libamdhip64 from library, $DROVER_LIBAMDHIP64 or
// "libamdhip64.so"; hipMemAddressReserve / hipMemCreate / hipMemMap /
// hipMemSetAccess where the device has VMM, hipMalloc otherwise.
std::unique_ptr<MemoryBackend> MakeHipBackend(int device, const std::string& library, int* error, std::string* detail);

// OpenCL (opencl_backend.cc): segments are coarse-grained shared virtual
// memory (clSVMAlloc, OpenCL 2.0), so pointers from the pool are what
// clSetKernelArgSVMPointer and clEnqueueSVM* take. cl_context and cl_device
// are the caller's (a cl_context and cl_device_id, retained while the backend
// lives); MakeBackend(DROVER_MEM_BACKEND_OPENCL, n) makes its own context on
// the n-th device of all platforms. No remapping: OpenCL has no VMM.
// DROVER_MEM_ERR_UNSUPPORTED where the device has no SVM.
std::unique_ptr<MemoryBackend> MakeOpenClBackend(void* cl_context, void* cl_device, int* error, std::string* detail);
std::unique_ptr<MemoryBackend> MakeOpenClBackendOnDevice(int device, int* error, std::string* detail);

// drover_mem_pool_create over a backend the caller made (options.backend and
// .device are ignored): for fault-injecting decorators in tests and for
// backends not yet named by drover_mem_backend_t.
int CreatePool(std::unique_ptr<MemoryBackend> backend, const drover_mem_options_t& options, drover_mem_pool_t* pool);

}  // namespace drover::memory
