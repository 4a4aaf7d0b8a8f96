// Host memory backends, for tests and CPU devices, and MakeBackend.
//
// HostBackend has the semantics of a GPU's virtual memory management, with
// the kernel doing the mapping: Reserve maps the range PROT_NONE with
// MAP_NORESERVE (address space only, no commit charge); Commit creates a
// memfd of the part's size (the "physical allocation", like cuMemCreate) and
// maps it MAP_SHARED | MAP_FIXED over the part (cuMemMap); Alias maps the
// same file pages again at another address, so both addresses name the same
// bytes (what stitching needs); Decommit punches the pages out of the file
// and puts the reservation back. Pages are materialised on first touch.
//
// PlainHostBackend is the old anonymous mapping, for a backend without VMM.

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>

#include "drover/memory/backend.h"

namespace drover::memory {
namespace {

void* At(uint64_t address) { return reinterpret_cast<void*>(address); }

// Puts [address, address + size) back to reserved, inaccessible address space.
bool MapReserved(uint64_t address, uint64_t size) {
  return ::mmap(At(address), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) !=
         MAP_FAILED;
}

class HostBackendBase : public MemoryBackend {
 public:
  HostBackendBase() : granule_(static_cast<uint64_t>(::sysconf(_SC_PAGESIZE))) {}
  uint64_t Granule() const override { return granule_; }

  int Reserve(uint64_t size, uint64_t* base) override {
    void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Fail("mmap", size, DROVER_MEM_ERR_OUT_OF_MEMORY);
    *base = reinterpret_cast<uint64_t>(p);
    return DROVER_MEM_OK;
  }

 protected:
  int Fail(const char* call, uint64_t size, int code) {
    last_error_ = std::string(call) + " of " + std::to_string(size) + " bytes: " + ::strerror(errno);
    return code;
  }

 private:
  uint64_t granule_;
};

class PlainHostBackend final : public HostBackendBase {
 public:
  const char* Name() const override { return "host-plain"; }
  bool SupportsRemap() const override { return false; }

  int Commit(uint64_t base, uint64_t offset, uint64_t size) override {
    if (::mprotect(At(base + offset), size, PROT_READ | PROT_WRITE) != 0) {
      return Fail("mprotect", size, DROVER_MEM_ERR_OUT_OF_MEMORY);
    }
    return DROVER_MEM_OK;
  }

  int Decommit(uint64_t base, uint64_t offset, uint64_t size) override {
    void* p = At(base + offset);
    if (::madvise(p, size, MADV_DONTNEED) != 0) return Fail("madvise", size, DROVER_MEM_ERR_BACKEND);
    if (::mprotect(p, size, PROT_NONE) != 0) return Fail("mprotect", size, DROVER_MEM_ERR_BACKEND);
    return DROVER_MEM_OK;
  }

  void Release(uint64_t base, uint64_t size) override { ::munmap(At(base), size); }
};

// Invariants: pieces_ tile the committed parts of every range exactly, keyed
// by address; each names a part of one memfd (shared by the pieces a
// Decommit split off one Commit, closed with the last of them). Aliases are
// not pieces: they own nothing.
class HostBackend final : public HostBackendBase {
 public:
  const char* Name() const override { return "host"; }
  bool SupportsRemap() const override { return true; }

  int Commit(uint64_t base, uint64_t offset, uint64_t size) override {
    const int fd = ::memfd_create("drover-mem", MFD_CLOEXEC);
    if (fd < 0) return Fail("memfd_create", size, DROVER_MEM_ERR_OUT_OF_MEMORY);
    auto file = std::shared_ptr<int>(new int(fd), [](int* f) {
      ::close(*f);
      delete f;
    });
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) return Fail("ftruncate", size, DROVER_MEM_ERR_OUT_OF_MEMORY);
    if (::mmap(At(base + offset), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
      const int rc = Fail("mmap", size, DROVER_MEM_ERR_OUT_OF_MEMORY);
      MapReserved(base + offset, size);
      return rc;
    }
    pieces_[base + offset] = Piece{std::move(file), 0, size};
    return DROVER_MEM_OK;
  }

  int Decommit(uint64_t base, uint64_t offset, uint64_t size) override {
    const uint64_t start = base + offset;
    const uint64_t end = start + size;
    Split(start);
    Split(end);
    for (auto it = pieces_.lower_bound(start); it != pieces_.end() && it->first < end;) {
      // The file keeps its size; the pages go back to the system.
      if (::fallocate(*it->second.file, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                      static_cast<off_t>(it->second.offset), static_cast<off_t>(it->second.size)) != 0) {
        return Fail("fallocate", it->second.size, DROVER_MEM_ERR_BACKEND);
      }
      it = pieces_.erase(it);
    }
    if (!MapReserved(start, size)) return Fail("mmap", size, DROVER_MEM_ERR_BACKEND);
    return DROVER_MEM_OK;
  }

  void Release(uint64_t base, uint64_t size) override {
    pieces_.erase(pieces_.lower_bound(base), pieces_.lower_bound(base + size));
    ::munmap(At(base), size);
  }

  int Alias(uint64_t src, uint64_t dst, uint64_t size) override {
    // Check that pieces cover the source before mapping anything.
    auto it = pieces_.upper_bound(src);
    if (it == pieces_.begin()) return NotCommitted(src, size);
    --it;
    for (uint64_t at = src; at < src + size; ++it) {
      if (it == pieces_.end() || it->first > at || it->first + it->second.size <= at) return NotCommitted(src, size);
      at = it->first + it->second.size;
    }
    it = std::prev(pieces_.upper_bound(src));
    for (uint64_t at = src; at < src + size; ++it) {
      const Piece& p = it->second;
      const uint64_t skip = at - it->first;
      const uint64_t len = std::min(p.size - skip, src + size - at);
      if (::mmap(At(dst + (at - src)), len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, *p.file,
                 static_cast<off_t>(p.offset + skip)) == MAP_FAILED) {
        const int rc = Fail("mmap", len, DROVER_MEM_ERR_OUT_OF_MEMORY);
        MapReserved(dst, at + len - src);
        return rc;
      }
      at += len;
    }
    return DROVER_MEM_OK;
  }

  int Unalias(uint64_t dst, uint64_t size) override {
    if (!MapReserved(dst, size)) return Fail("mmap", size, DROVER_MEM_ERR_BACKEND);
    return DROVER_MEM_OK;
  }

 private:
  struct Piece {
    std::shared_ptr<int> file;
    uint64_t offset = 0;  // in the file
    uint64_t size = 0;
  };

  // Makes address a piece boundary when a piece spans it.
  void Split(uint64_t address) {
    auto it = pieces_.upper_bound(address);
    if (it == pieces_.begin()) return;
    --it;
    Piece& p = it->second;
    if (it->first == address || it->first + p.size <= address) return;
    const uint64_t front = address - it->first;
    pieces_[address] = Piece{p.file, p.offset + front, p.size - front};
    p.size = front;
  }

  int NotCommitted(uint64_t src, uint64_t size) {
    last_error_ = "alias of " + std::to_string(size) + " bytes at " + std::to_string(src) + ": not committed";
    return DROVER_MEM_ERR_INVALID_ARGUMENT;
  }

  std::map<uint64_t, Piece> pieces_;
};

void SetDetail(std::string* detail, const std::string& text) {
  if (detail != nullptr) *detail = text;
}

}  // namespace

std::unique_ptr<MemoryBackend> MakePlainHostBackend() { return std::make_unique<PlainHostBackend>(); }

std::unique_ptr<MemoryBackend> MakeBackend(int kind, int device, int* error, std::string* detail) {
  *error = DROVER_MEM_OK;
  switch (kind) {
    case DROVER_MEM_BACKEND_HOST:
      if (device != 0) {
        *error = DROVER_MEM_ERR_INVALID_ARGUMENT;
        SetDetail(detail, "the host backend has one device, 0");
        return nullptr;
      }
      return std::make_unique<HostBackend>();
    case DROVER_MEM_BACKEND_CUDA: {
      CudaBackendOptions o;
      o.device = device;
      return MakeCudaBackend(o, error, detail);
    }
    case DROVER_MEM_BACKEND_HIP: return MakeHipBackend(device, "", error, detail);
    case DROVER_MEM_BACKEND_OPENCL: return MakeOpenClBackendOnDevice(device, error, detail);
  }
  *error = DROVER_MEM_ERR_INVALID_ARGUMENT;
  SetDetail(detail, "unknown backend " + std::to_string(kind));
  return nullptr;
}

}  // namespace drover::memory
