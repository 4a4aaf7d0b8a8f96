// The memory-limit shim, preloaded into real processes: shim_probe (the
// three ways a program reaches the driver, threads, bad limits) and
// cuda_limit_probe (a real CUDA program built with nvcc), on the stand-in
// libcuda.so.1 and, in the NVIDIA_GPU_ tests, on a real driver.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

constexpr long long kMiB = 1 << 20;

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
  std::map<std::string, std::string> kv;  // "key=value" lines of out

  long long Num(const std::string& key) const {
    auto it = kv.find(key);
    if (it == kv.end()) {
      ADD_FAILURE() << "no '" << key << "' in the output:\n" << out << err;
      return -999;
    }
    return std::stoll(it->second);
  }
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shim_test." + std::to_string(getpid()) + "." +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "report");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs argv with a clean environment: the stand-in driver (unless
  // real_driver), env, and the shim preloaded unless preload is false.
  Outcome Start(const std::string& argv, const std::map<std::string, std::string>& env, bool preload = true,
                bool real_driver = false) {
    std::string cmd = "env -i PATH=/usr/bin:/bin";
    if (!real_driver) cmd += std::string(" LD_LIBRARY_PATH=") + DROVER_STANDIN_CUDA_DIR;
    if (preload) cmd += std::string(" LD_PRELOAD=") + DROVER_SHIM_PATH;
    for (const auto& [k, v] : env) cmd += " " + k + "='" + v + "'";
    cmd += " " + argv + " >" + (dir_ / "out").string() + " 2>" + (dir_ / "err").string();
    Outcome r;
    int status = std::system(cmd.c_str());
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = Slurp(dir_ / "out");
    r.err = Slurp(dir_ / "err");
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      auto eq = line.find('=');
      if (eq != std::string::npos && line.find(' ') > eq) r.kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return r;
  }

  std::string Report() const { return (dir_ / "report").string(); }

  fs::path dir_;
};

TEST_F(ShimTest, EveryPathIsHeldUnderTheLimitAndAccountedExactly) {
  Outcome r =
      Start(std::string(DROVER_SHIM_PROBE) + " paths", {{"DROVER_STANDIN_CUDA_MEMORY", std::to_string(1024 * kMiB)},
                                                        {"DROVER_GPU_MEMORY_LIMIT", std::to_string(64 * kMiB)},
                                                        {"DROVER_GPU_MEMORY_REPORT", Report()}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.Num("info_total"), 64 * kMiB);  // the limit, not the device's 1 GiB
  EXPECT_EQ(r.Num("info_free"), 64 * kMiB);
  EXPECT_EQ(r.Num("symbol_alloc_40"), 0);
  EXPECT_EQ(r.Num("dlsym_is_shim"), 1);
  EXPECT_EQ(r.Num("dlsym_alloc_30"), 2);  // CUDA_ERROR_OUT_OF_MEMORY: 70 MiB > 64
  EXPECT_EQ(r.Num("gpa_rc"), 0);
  EXPECT_EQ(r.Num("gpa_alloc_24"), 0);  // exactly the limit
  EXPECT_EQ(r.Num("gpa_self_is_shim"), 1);
  EXPECT_EQ(r.Num("info2_free"), 0);
  EXPECT_EQ(r.Num("over_limit"), 2);
  EXPECT_EQ(r.Num("report_full"), 64 * kMiB);
  EXPECT_EQ(r.Num("create_over"), 2);
  EXPECT_EQ(r.Num("free_a"), 0);
  EXPECT_EQ(r.Num("free_a_again"), 1);  // the driver refuses a double free; the count does not move
  EXPECT_EQ(r.Num("create_2"), 0);
  EXPECT_EQ(r.Num("pitch_rc"), 0);
  EXPECT_EQ(r.Num("pitch"), 1024);
  EXPECT_EQ(r.Num("info3_free"), 64 * kMiB - 24 * kMiB - 2 * kMiB - 1024 * 1000);
  EXPECT_EQ(r.Num("free_pitch"), 0);
  EXPECT_EQ(r.Num("release"), 0);
  EXPECT_EQ(r.Num("managed_rc"), 0);
  EXPECT_EQ(r.Num("free_managed"), 0);
  EXPECT_EQ(r.Num("free_c"), 0);
  EXPECT_EQ(r.Num("info_end_free"), 64 * kMiB);
  EXPECT_EQ(r.Num("report_end"), 0);
  // The process's report goes with it.
  EXPECT_TRUE(fs::is_empty(Report()));
}

TEST_F(ShimTest, WithoutTheShimTheSameProgramGetsTheWholeDevice) {
  Outcome r = Start(std::string(DROVER_SHIM_PROBE) + " paths",
                    {{"DROVER_STANDIN_CUDA_MEMORY", std::to_string(1024 * kMiB)},
                     {"DROVER_GPU_MEMORY_LIMIT", std::to_string(64 * kMiB)}},
                    /*preload=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.Num("info_total"), 1024 * kMiB);
  EXPECT_EQ(r.Num("dlsym_is_shim"), 0);
  EXPECT_EQ(r.Num("dlsym_alloc_30"), 0);
  EXPECT_EQ(r.Num("over_limit"), 0);
}

TEST_F(ShimTest, ThreadsNeverPassTheLimitTogether) {
  Outcome r =
      Start(std::string(DROVER_SHIM_PROBE) + " threads", {{"DROVER_STANDIN_CUDA_MEMORY", std::to_string(1024 * kMiB)},
                                                          {"DROVER_GPU_MEMORY_LIMIT", std::to_string(48 * kMiB)},
                                                          {"DROVER_GPU_MEMORY_REPORT", Report()}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.Num("limit"), 48 * kMiB);
  EXPECT_LE(r.Num("peak"), 48 * kMiB);
  EXPECT_GT(r.Num("refused"), 0);  // the limit was reached, often
  EXPECT_GT(r.Num("granted"), 0);
  EXPECT_EQ(r.Num("end_free"), 48 * kMiB);  // every byte came back
  EXPECT_EQ(r.Num("report_end"), 0);
}

TEST_F(ShimTest, ABadLimitRefusesEveryAllocationAndSaysWhyOnce) {
  for (const char* bad : {"abc", "1000", "2097151", "-5", "99999999999999999999999"}) {
    Outcome r = Start(std::string(DROVER_SHIM_PROBE) + " refused",
                      {{"DROVER_GPU_MEMORY_LIMIT", bad}, {"DROVER_GPU_MEMORY_REPORT", Report()}});
    ASSERT_EQ(r.exit_code, 0) << bad << "\n" << r.out << r.err;
    EXPECT_EQ(r.Num("alloc"), 2) << bad;  // CUDA_ERROR_OUT_OF_MEMORY
    EXPECT_EQ(r.Num("alloc_again"), 2) << bad;
    EXPECT_EQ(r.Num("info_rc"), 0) << bad;
    EXPECT_EQ(r.Num("info_total"), 0) << bad;
    std::string message = std::string("DROVER_GPU_MEMORY_LIMIT='") + bad + "' is not a byte count";
    size_t at = r.err.find(message);
    EXPECT_NE(at, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(message, at + 1), std::string::npos) << "said more than once:\n" << r.err;
  }
  // The smallest good limit: one granule.
  Outcome r = Start(std::string(DROVER_SHIM_PROBE) + " refused", {{"DROVER_GPU_MEMORY_LIMIT", "2097152"}});
  EXPECT_EQ(r.Num("alloc"), 0);
  EXPECT_EQ(r.Num("alloc_again"), 0);  // 2 MiB: exactly the limit
  EXPECT_EQ(r.err, "");
}

TEST_F(ShimTest, WithoutALimitItOnlyCounts) {
  Outcome r =
      Start(std::string(DROVER_SHIM_PROBE) + " paths",
            {{"DROVER_STANDIN_CUDA_MEMORY", std::to_string(1024 * kMiB)}, {"DROVER_GPU_MEMORY_REPORT", Report()}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.Num("info_total"), 1024 * kMiB);
  EXPECT_EQ(r.Num("dlsym_is_shim"), 1);
  EXPECT_EQ(r.Num("over_limit"), 0);
  EXPECT_EQ(r.Num("report_full"), 95 * kMiB);  // 40 + 30 + 24 + 1 MiB held
}

// The real CUDA program (nvcc, the driver API) on the stand-in: held under
// the limit, cuMemGetInfo shows the limit, the over-limit allocation fails
// cleanly.
TEST_F(ShimTest, ARealCudaProgramIsHeldUnderItsLimit) {
  std::string probe = DROVER_CUDA_PROBE;
  if (probe.empty() || !fs::exists(probe)) GTEST_SKIP() << "nvcc was not found at configure time";
  Outcome r = Start(probe + " driver 256 16", {{"DROVER_STANDIN_CUDA_MEMORY", std::to_string(8192 * kMiB)},
                                               {"DROVER_GPU_MEMORY_LIMIT", std::to_string(1024 * kMiB)}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("mem_get_info=CUDA_SUCCESS total=1073741824 free=1073741824"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alloc 3 of 268435456 bytes: CUDA_SUCCESS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first_failure=4 CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("held=4 mem_get_info=CUDA_SUCCESS total=1073741824 free=0"), std::string::npos) << r.out;
  // Without the shim the same program takes 16 chunks of the stand-in's 8 GiB.
  r = Start(probe + " driver 256 16", {{"DROVER_STANDIN_CUDA_MEMORY", std::to_string(8192 * kMiB)}}, false);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("held=16 "), std::string::npos) << r.out;
}

// A real driver and GPU: skipped without one, never faked.
bool HaveRealGpu(std::string* why) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *why = "no libcuda.so.1 on this machine";
    return false;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  bool ok = init != nullptr && count != nullptr && init(0) == 0 && count(&n) == 0 && n > 0;
  if (!ok) *why = "libcuda.so.1 finds no GPU";
  return ok;
}

TEST_F(ShimTest, NVIDIA_GPU_DriverApiProgramIsHeldUnderItsLimit) {
  std::string why;
  if (!HaveRealGpu(&why)) GTEST_SKIP() << why;
  std::string probe = DROVER_CUDA_PROBE;
  if (probe.empty() || !fs::exists(probe)) GTEST_SKIP() << "nvcc was not found at configure time";
  Outcome r = Start(probe + " driver 256 16", {{"DROVER_GPU_MEMORY_LIMIT", std::to_string(1024 * kMiB)}}, true, true);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("total=1073741824"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first_failure=4 CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << r.out;
}

TEST_F(ShimTest, NVIDIA_GPU_RuntimeProgramIsHeldUnderItsLimit) {
  std::string why;
  if (!HaveRealGpu(&why)) GTEST_SKIP() << why;
  std::string probe = DROVER_CUDA_PROBE;
  if (probe.empty() || !fs::exists(probe)) GTEST_SKIP() << "nvcc was not found at configure time";
  // The CUDA runtime reaches cuMemAlloc through cuGetProcAddress: the shim
  // must answer there. Its own context takes some memory outside cuMemAlloc
  // that the shim does not see, so the count of chunks is the check.
  Outcome r = Start(probe + " runtime 256 16", {{"DROVER_GPU_MEMORY_LIMIT", std::to_string(1024 * kMiB)}}, true, true);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("mem_get_info=cudaSuccess total=1073741824"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first_failure=4 cudaErrorMemoryAllocation"), std::string::npos) << r.out;
}

}  // namespace
