// cuda_limit_probe: a real CUDA program (built with nvcc when the machine has
// it) that allocates GPU memory in chunks until the driver refuses, for the
// memory-limit shim's tests and the end-to-end test of
// `drover submit --gpus 0.5 --gpu-memory 1GiB`.
//
//   cuda_limit_probe driver  <chunk MiB> <chunks> [hold]
//                                                   the driver API (cuMemAlloc); with
//                                                   "hold", keeps the memory until SIGTERM
//   cuda_limit_probe runtime <chunk MiB> <chunks>   the CUDA runtime (cudaMalloc) and
//                                                   a kernel that writes each chunk
//
// The driver mode runs on Drover's stand-in libcuda.so.1 as well as on a real
// driver; the runtime mode needs a real one (the CUDA runtime does not start
// on the stand-in: docs/memory.md). Prints the total and free memory the
// driver reports, one line per allocation, and "first_failure=<i> <error>"
// when an allocation is refused; exits 0 when every refusal was a clean
// CUDA_ERROR_OUT_OF_MEMORY (cudaErrorMemoryAllocation), 1 otherwise.

#include <cuda.h>
#include <cuda_runtime.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

__global__ void Fill(unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}

static const char* Name(CUresult r) {
  const char* s = nullptr;
  return cuGetErrorName(r, &s) == CUDA_SUCCESS && s != nullptr ? s : "unknown";
}

static int Driver(size_t chunk, int count, bool hold) {
  CUcontext ctx = nullptr;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, 0);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    std::printf("init failed: %s\n", Name(r));
    return 1;
  }
  size_t free_bytes = 0, total = 0;
  r = cuMemGetInfo(&free_bytes, &total);
  std::printf("mem_get_info=%s total=%zu free=%zu\n", Name(r), total, free_bytes);
  std::vector<CUdeviceptr> held;
  int status = 0;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    r = cuMemAlloc(&p, chunk);
    std::printf("alloc %d of %zu bytes: %s\n", i, chunk, Name(r));
    if (r != CUDA_SUCCESS) {
      std::printf("first_failure=%d %s\n", i, Name(r));
      if (r != CUDA_ERROR_OUT_OF_MEMORY) status = 1;
      break;
    }
    // The memory is real and usable (its first page: a stand-in's device
    // memory is the host's).
    cuMemsetD8(p, static_cast<unsigned char>(i), chunk < 4096 ? chunk : 4096);
    held.push_back(p);
  }
  r = cuMemGetInfo(&free_bytes, &total);
  std::printf("held=%zu mem_get_info=%s total=%zu free=%zu\n", held.size(), Name(r), total, free_bytes);
  if (hold) {
    std::printf("holding\n");
    pause();  // until a signal (drover cancel) ends the process
  }
  for (CUdeviceptr p : held) {
    if (cuMemFree(p) != CUDA_SUCCESS) status = 1;
  }
  std::printf("done status=%d\n", status);
  return status;
}

static int Runtime(size_t chunk, int count) {
  size_t free_bytes = 0, total = 0;
  cudaError_t e = cudaMemGetInfo(&free_bytes, &total);
  std::printf("mem_get_info=%s total=%zu free=%zu\n", cudaGetErrorName(e), total, free_bytes);
  if (e != cudaSuccess) return 1;
  std::vector<void*> held;
  int status = 0;
  for (int i = 0; i < count; ++i) {
    void* p = nullptr;
    e = cudaMalloc(&p, chunk);
    std::printf("alloc %d of %zu bytes: %s\n", i, chunk, cudaGetErrorName(e));
    if (e != cudaSuccess) {
      std::printf("first_failure=%d %s\n", i, cudaGetErrorName(e));
      if (e != cudaErrorMemoryAllocation) status = 1;
      cudaGetLastError();
      break;
    }
    Fill<<<64, 256>>>(static_cast<unsigned char*>(p), chunk, static_cast<unsigned char>(i));
    held.push_back(p);
  }
  if (cudaDeviceSynchronize() != cudaSuccess) status = 1;
  e = cudaMemGetInfo(&free_bytes, &total);
  std::printf("held=%zu mem_get_info=%s total=%zu free=%zu\n", held.size(), cudaGetErrorName(e), total, free_bytes);
  for (void* p : held) {
    if (cudaFree(p) != cudaSuccess) status = 1;
  }
  std::printf("done status=%d\n", status);
  return status;
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  bool hold = argc == 5 && std::strcmp(argv[4], "hold") == 0;
  if ((argc != 4 && !hold) || (std::strcmp(argv[1], "driver") != 0 && std::strcmp(argv[1], "runtime") != 0)) {
    std::fprintf(stderr, "usage: cuda_limit_probe driver|runtime <chunk MiB> <chunks> [hold]\n");
    return 2;
  }
  size_t chunk = std::strtoull(argv[2], nullptr, 10) << 20;
  int count = std::atoi(argv[3]);
  return std::strcmp(argv[1], "driver") == 0 ? Driver(chunk, count, hold) : Runtime(chunk, count);
}
