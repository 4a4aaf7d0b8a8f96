#pragma once
// VmmBackend: a MemoryBackend over a vendor's virtual memory management calls
// (CUDA's cuMem*, HIP's hipMem*: the same seven calls under two prefixes),
// and PlainDeviceBackend over a vendor's plain malloc/free for devices
// without VMM. cuda_vmm_backend.cc and hip_backend.cc load the vendor library
// and fill a VmmDriver or PlainDriver; the backends here own the mapping
// bookkeeping, once for both vendors.
//
// Physical memory is created in chunks of VmmDriver::chunk bytes, one vendor
// handle each (cuMemMap cannot map part of a handle: its offset must be 0 on
// CUDA), so that any chunk can be mapped again elsewhere (Alias).
//
// Not thread-safe, like every MemoryBackend (the pool's mutex).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "drover/memory/backend.h"

namespace drover::memory {

// The vendor's calls, each returning the vendor's status (0: success). The
// functions run between enter() and leave() (the device's context made
// current and restored).
struct VmmDriver {
  std::string name;    // "cuda", "hip"
  std::string prefix;  // "cuMem", "hipMem": names calls in errors
  uint64_t chunk = 0;  // bytes per physical allocation; a multiple of the vendor's granularity
  int out_of_memory = 2;
  std::function<int(uint64_t size, uint64_t alignment, uint64_t* va)> address_reserve;
  std::function<int(uint64_t va, uint64_t size)> address_free;
  std::function<int(uint64_t size, uint64_t* handle)> create;
  std::function<int(uint64_t handle)> release;
  std::function<int(uint64_t va, uint64_t size, uint64_t handle)> map;
  std::function<int(uint64_t va, uint64_t size)> unmap;
  std::function<int(uint64_t va, uint64_t size)> set_access;  // read-write for the device
  std::function<std::string(int status)> describe;
  std::function<void()> enter = [] {};
  std::function<void()> leave = [] {};
  std::function<void()> close = [] {};  // run once when the backend goes
};

struct PlainDriver {
  std::string name;
  std::string alloc_name;  // "cuMemAlloc"
  uint64_t granule = 0;
  int out_of_memory = 2;
  std::function<int(uint64_t size, uint64_t* ptr)> alloc;
  std::function<int(uint64_t ptr)> free;
  std::function<std::string(int status)> describe;
  std::function<void()> enter = [] {};
  std::function<void()> leave = [] {};
  std::function<void()> close = [] {};
};

std::unique_ptr<MemoryBackend> MakeVmmBackend(VmmDriver driver);
std::unique_ptr<MemoryBackend> MakePlainDeviceBackend(PlainDriver driver);

}  // namespace drover::memory
