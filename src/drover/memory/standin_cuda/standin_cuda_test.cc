// The stand-in libcuda.so.1: its device memory is exact, the VMM calls map
// real memfd-backed memory into reserved ranges, and cuGetProcAddress finds
// what it implements by base name and version.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "drover/memory/standin_cuda/cu_subset.h"

extern "C" {
CUresult cuInit(unsigned int);
CUresult cuDeviceGetCount(int*);
CUresult cuDeviceGet(CUdevice*, int);
CUresult cuDeviceTotalMem_v2(size_t*, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxGetCurrent(CUcontext*);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t*, size_t*);
CUresult cuMemGetAllocationGranularity(size_t*, const CUmemAllocationProp*, int);
CUresult cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, int*);
CUresult cuGetErrorName(CUresult, const char**);
}

namespace {

constexpr size_t kMiB = 1u << 20;
constexpr size_t kDeviceBytes = 64 * kMiB;

class StandinCudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("DROVER_STANDIN_CUDA_MEMORY", std::to_string(kDeviceBytes).c_str(), 1);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
  void SetUp() override {
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override {
    // Every test returns what it took: the device is whole again.
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
    EXPECT_EQ(free_bytes, kDeviceBytes);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  }
  static CUmemAllocationProp Prop() {
    CUmemAllocationProp p;
    std::memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
  }
  CUcontext ctx_ = nullptr;
};

TEST_F(StandinCudaTest, DevicesAndMemoryFromTheEnvironment) {
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  CUdevice dev = -1;
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, dev), CUDA_SUCCESS);
  EXPECT_EQ(total, kDeviceBytes);
  CUcontext current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx_);
}

TEST_F(StandinCudaTest, AllocationsAreChargedExactlyAndFailPastTheDevice) {
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 40 * kMiB), CUDA_SUCCESS);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, kDeviceBytes);
  EXPECT_EQ(free_bytes, kDeviceBytes - 40 * kMiB);
  EXPECT_EQ(cuMemAlloc_v2(&b, 25 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAllocManaged(&b, 24 * kMiB, 1), CUDA_SUCCESS);
  // Memory is real: what is written reads back.
  std::memset(reinterpret_cast<void*>(a), 0x5a, 40 * kMiB);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(a)[40 * kMiB - 1], 0x5a);
  size_t pitch = 0;
  EXPECT_EQ(cuMemAllocPitch_v2(&c, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch_v2(&c, &pitch, 100, 10, 4), CUDA_ERROR_OUT_OF_MEMORY);  // 512 * 10 > 0 left
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocPitch_v2(&c, &pitch, 100, 10, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 512u);
  EXPECT_EQ(cuMemFree_v2(c), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);  // double free is refused, not a crash
}

TEST_F(StandinCudaTest, VmmMapsOnePhysicalChunkAtTwoAddresses) {
  CUmemAllocationProp prop = Prop();
  size_t granule = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  ASSERT_EQ(granule, 2 * kMiB);
  CUdeviceptr range = 0;
  ASSERT_EQ(cuMemAddressReserve(&range, 4 * granule, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(range % granule, 0u);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, granule + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemCreate(&h, granule, &prop, 0), CUDA_SUCCESS);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, kDeviceBytes - granule);  // physical memory is charged at create

  ASSERT_EQ(cuMemMap(range, granule, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(range + 2 * granule, granule, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(range, granule, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
  CUmemAccessDesc access;
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(cuMemSetAccess(range, 2 * granule, &access, 1), CUDA_ERROR_INVALID_VALUE);  // a hole
  ASSERT_EQ(cuMemSetAccess(range, granule, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(range + 2 * granule, granule, &access, 1), CUDA_SUCCESS);
  reinterpret_cast<volatile int*>(range)[7] = 1234;
  EXPECT_EQ(reinterpret_cast<volatile int*>(range + 2 * granule)[7], 1234);

  // Released while mapped: the memory stays until the last unmap.
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, kDeviceBytes - granule);
  EXPECT_EQ(cuMemAddressFree(range, 4 * granule), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(cuMemUnmap(range, granule), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(range, granule), CUDA_ERROR_NOT_MAPPED);
  EXPECT_EQ(reinterpret_cast<volatile int*>(range + 2 * granule)[7], 1234);
  ASSERT_EQ(cuMemUnmap(range + 2 * granule, granule), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(range, 4 * granule), CUDA_SUCCESS);
}

TEST_F(StandinCudaTest, PhysicalMemoryIsBoundedByTheDevice) {
  CUmemAllocationProp prop = Prop();
  CUmemGenericAllocationHandle h = 0, g = 0;
  ASSERT_EQ(cuMemCreate(&h, kDeviceBytes, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemCreate(&g, 2 * kMiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  prop.location.id = 3;
  EXPECT_EQ(cuMemCreate(&g, 2 * kMiB, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(StandinCudaTest, ProcAddressByBaseNameAndVersion) {
  void* fn = nullptr;
  int status = -1;
  ASSERT_EQ(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemAlloc_v2));
  ASSERT_EQ(cuGetProcAddress_v2("cuMemCreate", &fn, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemCreate));
  EXPECT_EQ(cuGetProcAddress_v2("cuMemCreate", &fn, 10000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(cuGetProcAddress_v2("cuLaunchKernel", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  const char* name = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name), CUDA_SUCCESS);
  EXPECT_STREQ(name, "CUDA_ERROR_OUT_OF_MEMORY");
}

}  // namespace
