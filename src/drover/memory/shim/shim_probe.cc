// shim_probe: a CUDA driver API program for shim_test. It reaches the
// allocation calls the three ways programs do (a symbol linked to
// libcuda.so.1, dlsym from a dlopen'd libcuda.so.1, cuGetProcAddress) and
// prints what it saw as "key=value" lines. Run under LD_PRELOAD of the shim
// or without it.
//
//   shim_probe paths     allocations through each path, cuMemGetInfo, the report
//   shim_probe threads   8 threads allocate and free at random under the limit
//   shim_probe refused   one allocation, to see a bad limit refuse it

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "drover/memory/standin_cuda/cu_subset.h"

extern "C" {
CUresult cuInit(unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int);
CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, int*);
}

namespace {

constexpr size_t kMiB = 1u << 20;

using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
using FreeFn = CUresult (*)(CUdeviceptr);
using InfoFn = CUresult (*)(size_t*, size_t*);

void Print(const char* key, long long v) { std::printf("%s=%lld\n", key, v); }

std::string ReportFile() {
  const char* dir = std::getenv("DROVER_GPU_MEMORY_REPORT");
  if (dir == nullptr) return "";
  std::ifstream in(std::string(dir) + "/" + std::to_string(getpid()));
  std::string s;
  std::getline(in, s);
  return s.empty() ? "none" : s;
}

void Setup() {
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::printf("setup=failed\n");
    std::exit(2);
  }
}

int Paths() {
  Setup();
  size_t free_bytes = 0, total = 0;
  Print("info_rc", cuMemGetInfo_v2(&free_bytes, &total));
  Print("info_total", static_cast<long long>(total));
  Print("info_free", static_cast<long long>(free_bytes));

  // By symbol.
  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  Print("symbol_alloc_40", cuMemAlloc_v2(&a, 40 * kMiB));

  // By dlsym from the driver's handle (what the CUDA runtime and PyTorch do).
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto dl_alloc = reinterpret_cast<AllocFn>(dlsym(lib, "cuMemAlloc_v2"));
  auto dl_info = reinterpret_cast<InfoFn>(dlsym(lib, "cuMemGetInfo_v2"));
  Dl_info where;
  bool in_shim = dladdr(reinterpret_cast<void*>(dl_alloc), &where) != 0 &&
                 std::strstr(where.dli_fname, "drover_cuda_shim") != nullptr;
  Print("dlsym_is_shim", in_shim ? 1 : 0);
  Print("dlsym_alloc_30", dl_alloc(&b, 30 * kMiB));

  // By cuGetProcAddress, itself found by dlsym, as the runtime finds it.
  using GpaFn = CUresult (*)(const char*, void**, int, cuuint64_t, int*);
  auto gpa = reinterpret_cast<GpaFn>(dlsym(lib, "cuGetProcAddress_v2"));
  void* fn = nullptr;
  int status = -1;
  Print("gpa_rc", gpa("cuMemAlloc", &fn, 12000, 0, &status));
  auto gpa_alloc = reinterpret_cast<AllocFn>(fn);
  Print("gpa_alloc_24", gpa_alloc(&c, 24 * kMiB));
  void* again = nullptr;
  gpa("cuGetProcAddress", &again, 12000, 0, &status);
  Print("gpa_self_is_shim", again == reinterpret_cast<void*>(gpa) ? 1 : 0);
  gpa("cuMemFree", &fn, 12000, 0, &status);
  auto gpa_free = reinterpret_cast<FreeFn>(fn);

  Print("info2_rc", dl_info(&free_bytes, &total));
  Print("info2_free", static_cast<long long>(free_bytes));
  Print("over_limit", cuMemAlloc_v2(&d, 1 * kMiB));
  std::printf("report_full=%s\n", ReportFile().c_str());

  // VMM: physical memory counts once, at create.
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  Print("create_over", cuMemCreate(&h, 2 * kMiB, &prop, 0));
  Print("free_a", gpa_free(a));
  Print("free_a_again", cuMemFree_v2(a));  // the driver's answer; the count does not move
  Print("create_2", cuMemCreate(&h, 2 * kMiB, &prop, 0));
  size_t pitch = 0;
  Print("pitch_rc", cuMemAllocPitch_v2(&a, &pitch, 1000, 1000, 4));
  Print("pitch", static_cast<long long>(pitch));
  cuMemGetInfo_v2(&free_bytes, &total);
  Print("info3_free", static_cast<long long>(free_bytes));
  Print("free_pitch", cuMemFree_v2(a));
  Print("release", cuMemRelease(h));
  Print("managed_rc", cuMemAllocManaged(&a, 4 * kMiB, 1));
  Print("free_managed", cuMemFree_v2(a));
  Print("free_b", cuMemFree_v2(b));
  Print("free_c", cuMemFree_v2(c));
  cuMemGetInfo_v2(&free_bytes, &total);
  Print("info_end_free", static_cast<long long>(free_bytes));
  std::printf("report_end=%s\n", ReportFile().c_str());
  return 0;
}

// Eight threads allocate and free 1..8 MiB at random; the probe's own count
// of what it holds must never pass the limit, and everything ends freed.
int Threads() {
  Setup();
  size_t free_bytes = 0, limit = 0;
  cuMemGetInfo_v2(&free_bytes, &limit);
  std::atomic<long long> held{0}, peak{0}, refused{0}, granted{0};
  std::vector<std::thread> threads;
  CUcontext ctx = nullptr;
  cuDevicePrimaryCtxRetain(&ctx, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(ctx);
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      std::vector<std::pair<CUdeviceptr, size_t>> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.empty() || rng() % 2 == 0) {
          size_t size = (1 + rng() % 8) * kMiB;
          CUdeviceptr p = 0;
          CUresult r = cuMemAlloc_v2(&p, size);
          if (r == CUDA_SUCCESS) {
            long long now = held.fetch_add(static_cast<long long>(size)) + static_cast<long long>(size);
            long long prev = peak.load();
            while (now > prev && !peak.compare_exchange_weak(prev, now)) {
            }
            mine.emplace_back(p, size);
            ++granted;
          } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            ++refused;
          }
        } else {
          size_t k = rng() % mine.size();
          held.fetch_sub(static_cast<long long>(mine[k].second));
          cuMemFree_v2(mine[k].first);
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      for (auto& [p, size] : mine) {
        held.fetch_sub(static_cast<long long>(size));
        cuMemFree_v2(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  Print("limit", static_cast<long long>(limit));
  Print("peak", peak.load());
  Print("granted", granted.load());
  Print("refused", refused.load());
  cuMemGetInfo_v2(&free_bytes, &limit);
  Print("end_free", static_cast<long long>(free_bytes));
  std::printf("report_end=%s\n", ReportFile().c_str());
  return 0;
}

int Refused() {
  Setup();
  CUdeviceptr p = 0;
  Print("alloc", cuMemAlloc_v2(&p, 1 * kMiB));
  Print("alloc_again", cuMemAlloc_v2(&p, 1 * kMiB));
  size_t free_bytes = 0, total = 0;
  Print("info_rc", cuMemGetInfo_v2(&free_bytes, &total));
  Print("info_total", static_cast<long long>(total));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "paths") return Paths();
  if (mode == "threads") return Threads();
  if (mode == "refused") return Refused();
  std::fprintf(stderr, "usage: shim_probe paths|threads|refused\n");
  return 2;
}
