// HostBackend: segments of anonymous host memory, for tests and CPU devices.
//
// Reserve maps the range PROT_NONE with MAP_NORESERVE (address space only, no
// commit charge); Commit makes a part readable and writable (pages are
// materialised on first touch); Decommit drops the pages (MADV_DONTNEED) and
// makes the part inaccessible again, so a stray access faults instead of
// silently reading stale data.

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "drover/memory/backend.h"

namespace drover::memory {
namespace {

class HostBackend final : public MemoryBackend {
 public:
  HostBackend() : granule_(static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))) {}

  const char* Name() const override { return "host"; }
  uint64_t Granule() const override { return granule_; }
  bool SupportsRemap() const override { return true; }

  int Reserve(uint64_t size, uint64_t* base) override {
    void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Fail("mmap", size, DROVER_MEM_ERR_OUT_OF_MEMORY);
    *base = reinterpret_cast<uint64_t>(p);
    return DROVER_MEM_OK;
  }

  int Commit(uint64_t base, uint64_t offset, uint64_t size) override {
    if (::mprotect(reinterpret_cast<void*>(base + offset), size, PROT_READ | PROT_WRITE) != 0) {
      return Fail("mprotect", size, DROVER_MEM_ERR_OUT_OF_MEMORY);
    }
    return DROVER_MEM_OK;
  }

  int Decommit(uint64_t base, uint64_t offset, uint64_t size) override {
    void* p = reinterpret_cast<void*>(base + offset);
    if (::madvise(p, size, MADV_DONTNEED) != 0) return Fail("madvise", size, DROVER_MEM_ERR_BACKEND);
    if (::mprotect(p, size, PROT_NONE) != 0) return Fail("mprotect", size, DROVER_MEM_ERR_BACKEND);
    return DROVER_MEM_OK;
  }

  void Release(uint64_t base, uint64_t size) override {
    ::munmap(reinterpret_cast<void*>(base), size);
  }

 private:
  int Fail(const char* call, uint64_t size, int code) {
    last_error_ = std::string(call) + " of " + std::to_string(size) + " bytes: " + ::strerror(errno);
    return code;
  }

  uint64_t granule_;
};

}  // namespace

std::unique_ptr<MemoryBackend> MakeBackend(int kind, int device, int* error) {
  *error = DROVER_MEM_OK;
  switch (kind) {
    case DROVER_MEM_BACKEND_HOST:
      if (device != 0) {
        *error = DROVER_MEM_ERR_INVALID_ARGUMENT;
        return nullptr;
      }
      return std::make_unique<HostBackend>();
    case DROVER_MEM_BACKEND_CUDA:
    case DROVER_MEM_BACKEND_HIP:
    case DROVER_MEM_BACKEND_OPENCL:
      *error = DROVER_MEM_ERR_UNSUPPORTED;
      return nullptr;
  }
  *error = DROVER_MEM_ERR_INVALID_ARGUMENT;
  return nullptr;
}

}  // namespace drover::memory
