// The OpenCL backend on a real device (PoCL's CPU device here): pool memory
// is shared virtual memory the device fills and copies, the pool says it does
// not remap and falls back to plain sub-allocation, bad input gets codes.
// Skips itself by name where no OpenCL 2.0 device with SVM exists.

#define CL_TARGET_OPENCL_VERSION 200
#include <CL/cl.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drover/memory/backend.h"
#include "drover/memory/drover_mem.h"

namespace drover::memory {
namespace {

constexpr size_t kKiB = size_t{1} << 10;

// The first device with coarse-grained SVM, or null.
cl_device_id SvmDevice() {
  cl_uint n = 0;
  if (clGetPlatformIDs(0, nullptr, &n) != CL_SUCCESS || n == 0) return nullptr;
  std::vector<cl_platform_id> platforms(n);
  if (clGetPlatformIDs(n, platforms.data(), nullptr) != CL_SUCCESS) return nullptr;
  for (cl_platform_id p : platforms) {
    cl_uint m = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &m) != CL_SUCCESS || m == 0) continue;
    std::vector<cl_device_id> devices(m);
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, m, devices.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id d : devices) {
      cl_device_svm_capabilities caps = 0;
      if (clGetDeviceInfo(d, CL_DEVICE_SVM_CAPABILITIES, sizeof(caps), &caps, nullptr) == CL_SUCCESS &&
          (caps & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) != 0) {
        return d;
      }
    }
  }
  return nullptr;
}

drover_mem_options_t Options(size_t reserve) {
  drover_mem_options_t o;
  drover_mem_options_init(&o);
  o.reserve_bytes = reserve;
  return o;
}

TEST(OpenClBackendTest, DeviceFillsAndCopiesPoolMemory) {
  cl_device_id device = SvmDevice();
  if (device == nullptr) GTEST_SKIP() << "no OpenCL device with shared virtual memory";
  cl_int err = CL_SUCCESS;
  cl_context context = clCreateContext(nullptr, 1, &device, nullptr, nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  cl_command_queue queue = clCreateCommandQueueWithProperties(context, device, nullptr, &err);
  ASSERT_EQ(err, CL_SUCCESS);

  int rc = DROVER_MEM_OK;
  std::string detail;
  std::unique_ptr<MemoryBackend> backend = MakeOpenClBackend(context, device, &rc, &detail);
  ASSERT_NE(backend, nullptr) << detail;
  EXPECT_STREQ(backend->Name(), "opencl");
  EXPECT_FALSE(backend->SupportsRemap());
  drover_mem_pool_t pool{0};
  ASSERT_EQ(CreatePool(std::move(backend), Options(1 << 20), &pool), DROVER_MEM_OK);
  drover_mem_remap_stats_t r{};
  ASSERT_EQ(drover_mem_remap_stats(pool, &r), DROVER_MEM_OK);
  EXPECT_EQ(r.remaps, 0);

  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 4 * kKiB, 0, 1, &a), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_alloc(pool, 64 * kKiB + 100, 0, 2, &b), DROVER_MEM_OK);
  const uint32_t pattern = 0xC0FFEE01u;
  ASSERT_EQ(clEnqueueSVMMemFill(queue, a, &pattern, sizeof(pattern), 4 * kKiB, 0, nullptr, nullptr), CL_SUCCESS);
  const uint32_t zero = 0;
  ASSERT_EQ(clEnqueueSVMMemFill(queue, b, &zero, sizeof(zero), 64 * kKiB, 0, nullptr, nullptr), CL_SUCCESS);
  ASSERT_EQ(clEnqueueSVMMemcpy(queue, CL_TRUE, static_cast<char*>(b) + 256, a, 4 * kKiB, 0, nullptr, nullptr),
            CL_SUCCESS);
  ASSERT_EQ(clEnqueueSVMMap(queue, CL_TRUE, CL_MAP_READ, b, 64 * kKiB, 0, nullptr, nullptr), CL_SUCCESS);
  const auto* words = static_cast<const uint32_t*>(b);
  EXPECT_EQ(words[0], 0u);
  EXPECT_EQ(words[63], 0u);
  EXPECT_EQ(words[64], pattern);
  EXPECT_EQ(words[64 + 1023], pattern);
  EXPECT_EQ(words[64 + 1024], 0u);
  ASSERT_EQ(clEnqueueSVMUnmap(queue, b, 0, nullptr, nullptr), CL_SUCCESS);
  ASSERT_EQ(clFinish(queue), CL_SUCCESS);

  // Bad input: codes, accounting unchanged.
  drover_mem_stats_t before{};
  ASSERT_EQ(drover_mem_stats(pool, &before), DROVER_MEM_OK);
  void* foreign = clSVMAlloc(context, CL_MEM_READ_WRITE, 4096, 0);
  ASSERT_NE(foreign, nullptr);
  EXPECT_EQ(drover_mem_free(pool, foreign), DROVER_MEM_ERR_FOREIGN_POINTER);
  clSVMFree(context, foreign);
  void* p = nullptr;
  EXPECT_EQ(drover_mem_alloc(pool, 0, 0, 0, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(pool, SIZE_MAX, 0, 0, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(pool, 64, 48, 0, &p), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(drover_mem_free(pool, static_cast<char*>(a) + 16), DROVER_MEM_ERR_INTERIOR_POINTER);
  ASSERT_EQ(drover_mem_free(pool, a), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(pool, a), DROVER_MEM_ERR_DOUBLE_FREE);
  drover_mem_stats_t after{};
  ASSERT_EQ(drover_mem_stats(pool, &after), DROVER_MEM_OK);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use - 4 * kKiB);
  EXPECT_EQ(after.allocations, 1u);
  ASSERT_EQ(drover_mem_free(pool, b), DROVER_MEM_OK);

  // No VMM: what is free only in scattered holes cannot be served.
  std::vector<void*> quarters(4);
  for (void*& q : quarters) ASSERT_EQ(drover_mem_alloc(pool, 256 * kKiB, 0, 0, &q), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_free(pool, quarters[0]), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_free(pool, quarters[2]), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_alloc(pool, 512 * kKiB, 0, 0, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);
  ASSERT_EQ(drover_mem_remap_stats(pool, &r), DROVER_MEM_OK);
  EXPECT_EQ(r.largest_allocation, 256 * kKiB);
  EXPECT_NEAR(r.fragmentation, 0.5, 1e-9);

  // The pool holds its own reference to the context: the caller's may go first.
  ASSERT_EQ(clReleaseCommandQueue(queue), CL_SUCCESS);
  ASSERT_EQ(clReleaseContext(context), CL_SUCCESS);
  ASSERT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(pool, quarters[1]), DROVER_MEM_ERR_INVALID_POOL);
}

TEST(OpenClBackendTest, CApiMakesItsOwnContext) {
  if (SvmDevice() == nullptr) GTEST_SKIP() << "no OpenCL device with shared virtual memory";
  drover_mem_options_t o = Options(1 << 20);
  o.backend = DROVER_MEM_BACKEND_OPENCL;
  drover_mem_pool_t pool{0};
  ASSERT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_OK);
  void* p = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 1000, 0, 0, &p), DROVER_MEM_OK);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  drover_mem_stats_t s{};
  ASSERT_EQ(drover_mem_stats(pool, &s), DROVER_MEM_OK);
  EXPECT_EQ(s.granule, 4096u);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  o.device = 99;
  EXPECT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_ERR_INVALID_ARGUMENT);
  int rc = DROVER_MEM_OK;
  std::string detail;
  EXPECT_EQ(MakeOpenClBackend(nullptr, nullptr, &rc, &detail), nullptr);
  EXPECT_EQ(rc, DROVER_MEM_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace drover::memory
