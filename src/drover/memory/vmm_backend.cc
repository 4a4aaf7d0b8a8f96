#include "drover/memory/vmm_backend.h"

#include <map>
#include <utility>

namespace drover::memory {
namespace {

// Runs enter() now and leave() at scope exit.
class Scope {
 public:
  Scope(const std::function<void()>& enter, const std::function<void()>& leave) : leave_(leave) { enter(); }
  ~Scope() { leave_(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const std::function<void()>& leave_;
};

// Invariants: handles_ holds exactly the chunks Commit created and
// Decommit/Release have not released, keyed by the address they are mapped
// at (each chunk's own, never an alias's). An alias maps a handle again and
// owns nothing.
class VmmBackend final : public MemoryBackend {
 public:
  explicit VmmBackend(VmmDriver d) : d_(std::move(d)) {}
  ~VmmBackend() override { d_.close(); }

  const char* Name() const override { return d_.name.c_str(); }
  uint64_t Granule() const override { return d_.chunk; }
  bool SupportsRemap() const override { return true; }

  int Reserve(uint64_t size, uint64_t* base) override {
    Scope scope(d_.enter, d_.leave);
    return Check(d_.address_reserve(size, d_.chunk, base), "AddressReserve", size);
  }

  int Commit(uint64_t base, uint64_t offset, uint64_t size) override {
    Scope scope(d_.enter, d_.leave);
    const uint64_t start = base + offset;
    for (uint64_t at = start; at < start + size; at += d_.chunk) {
      uint64_t handle = 0;
      int rc = Check(d_.create(d_.chunk, &handle), "Create", d_.chunk);
      if (rc == DROVER_MEM_OK) {
        rc = Check(d_.map(at, d_.chunk, handle), "Map", d_.chunk);
        if (rc == DROVER_MEM_OK) {
          handles_[at] = handle;
          rc = Check(d_.set_access(at, d_.chunk), "SetAccess", d_.chunk);
        } else {
          (void)d_.release(handle);
        }
      }
      if (rc != DROVER_MEM_OK) {
        Drop(start, at + (handles_.count(at) != 0 ? d_.chunk : 0));
        return rc;
      }
    }
    return DROVER_MEM_OK;
  }

  int Decommit(uint64_t base, uint64_t offset, uint64_t size) override {
    Scope scope(d_.enter, d_.leave);
    return Drop(base + offset, base + offset + size);
  }

  void Release(uint64_t base, uint64_t size) override {
    Scope scope(d_.enter, d_.leave);
    (void)Drop(base, base + size);
    (void)Check(d_.address_free(base, size), "AddressFree", size);
  }

  int Alias(uint64_t src, uint64_t dst, uint64_t size) override {
    for (uint64_t at = 0; at < size; at += d_.chunk) {
      if (handles_.count(src + at) == 0) {
        last_error_ = d_.name + ": alias of " + std::to_string(size) + " bytes: source not committed";
        return DROVER_MEM_ERR_INVALID_ARGUMENT;
      }
    }
    Scope scope(d_.enter, d_.leave);
    for (uint64_t at = 0; at < size; at += d_.chunk) {
      int rc = Check(d_.map(dst + at, d_.chunk, handles_[src + at]), "Map", d_.chunk);
      if (rc == DROVER_MEM_OK) {
        rc = Check(d_.set_access(dst + at, d_.chunk), "SetAccess", d_.chunk);
        if (rc != DROVER_MEM_OK) at += d_.chunk;  // mapped: unmapped below with the rest
      }
      if (rc != DROVER_MEM_OK) {
        for (uint64_t back = 0; back < at; back += d_.chunk) (void)d_.unmap(dst + back, d_.chunk);
        return rc;
      }
    }
    return DROVER_MEM_OK;
  }

  int Unalias(uint64_t dst, uint64_t size) override {
    Scope scope(d_.enter, d_.leave);
    int first_error = DROVER_MEM_OK;
    for (uint64_t at = 0; at < size; at += d_.chunk) {
      const int rc = Check(d_.unmap(dst + at, d_.chunk), "Unmap", d_.chunk);
      if (first_error == DROVER_MEM_OK) first_error = rc;
    }
    return first_error;
  }

 private:
  // Unmaps and releases the chunks committed in [start, end).
  int Drop(uint64_t start, uint64_t end) {
    int first_error = DROVER_MEM_OK;
    auto it = handles_.lower_bound(start);
    for (; it != handles_.end() && it->first < end; it = handles_.erase(it)) {
      int rc = Check(d_.unmap(it->first, d_.chunk), "Unmap", d_.chunk);
      if (rc == DROVER_MEM_OK) rc = Check(d_.release(it->second), "Release", d_.chunk);
      if (first_error == DROVER_MEM_OK) first_error = rc;
    }
    return first_error;
  }

  int Check(int status, const char* call, uint64_t size) {
    if (status == 0) return DROVER_MEM_OK;
    last_error_ = d_.prefix + call + " of " + std::to_string(size) + " bytes: " + d_.describe(status);
    return status == d_.out_of_memory ? DROVER_MEM_ERR_OUT_OF_MEMORY : DROVER_MEM_ERR_BACKEND;
  }

  VmmDriver d_;
  std::map<uint64_t, uint64_t> handles_;
};

// Reserve allocates (and so commits) at once; Commit has nothing left to do.
class PlainDeviceBackend final : public MemoryBackend {
 public:
  explicit PlainDeviceBackend(PlainDriver d) : d_(std::move(d)) {}
  ~PlainDeviceBackend() override { d_.close(); }

  const char* Name() const override { return d_.name.c_str(); }
  uint64_t Granule() const override { return d_.granule; }
  bool SupportsRemap() const override { return false; }

  int Reserve(uint64_t size, uint64_t* base) override {
    Scope scope(d_.enter, d_.leave);
    const int status = d_.alloc(size, base);
    if (status == 0) return DROVER_MEM_OK;
    last_error_ = d_.alloc_name + " of " + std::to_string(size) + " bytes: " + d_.describe(status);
    return status == d_.out_of_memory ? DROVER_MEM_ERR_OUT_OF_MEMORY : DROVER_MEM_ERR_BACKEND;
  }
  int Commit(uint64_t, uint64_t, uint64_t) override { return DROVER_MEM_OK; }
  int Decommit(uint64_t, uint64_t, uint64_t size) override {
    last_error_ = d_.name + ": decommit of " + std::to_string(size) + " bytes: no VMM";
    return DROVER_MEM_ERR_UNSUPPORTED;
  }
  void Release(uint64_t base, uint64_t) override {
    Scope scope(d_.enter, d_.leave);
    (void)d_.free(base);
  }

 private:
  PlainDriver d_;
};

}  // namespace

std::unique_ptr<MemoryBackend> MakeVmmBackend(VmmDriver driver) {
  return std::make_unique<VmmBackend>(std::move(driver));
}

std::unique_ptr<MemoryBackend> MakePlainDeviceBackend(PlainDriver driver) {
  return std::make_unique<PlainDeviceBackend>(std::move(driver));
}

}  // namespace drover::memory
