#pragma once
// MemoryBackend: where a pool's segments come from.
//
// Shaped after virtual memory management (CUDA's cuMemAddressReserve /
// cuMemCreate / cuMemMap / cuMemSetAccess, HIP's hipMemAddressReserve ...):
// a segment is first a reserved address range, then backed with physical
// memory in granule-sized pieces. The pool uses Reserve + Commit for a whole
// segment today; defragmentation by remapping (issue 19, item 3) will commit
// and decommit parts of a range and map scattered physical chunks into a new
// range, through the same four calls. A backend without VMM (OpenCL, plain
// cudaMalloc) reserves and commits in one step and says so in
// SupportsRemap().
//
// Implementations: HostBackend (anonymous mmap). Not thread-safe: the pool
// calls its backend under the pool's mutex. Calls are slow (system or driver
// calls) and never on the allocation fast path: only when a pool grows,
// trims, or is created and destroyed.

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

  // The last error in words ("mmap of 1073741824 bytes: Cannot allocate memory").
  const std::string& last_error() const { return last_error_; }

 protected:
  std::string last_error_;
};

// The backend of kind, or null with *error set (DROVER_MEM_ERR_UNSUPPORTED
// for the device backends not built yet).
std::unique_ptr<MemoryBackend> MakeBackend(int kind, int device, int* error);

// drover_mem_pool_create over a backend the caller made (options.backend and
// .device are ignored): for fault-injecting decorators in tests and for
// backends not yet named by drover_mem_backend_t.
int CreatePool(std::unique_ptr<MemoryBackend> backend, const drover_mem_options_t& options, drover_mem_pool_t* pool);

}  // namespace drover::memory
