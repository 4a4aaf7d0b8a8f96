// End to end, the GPU memory-limit shim (issue 19 item 5): `drover submit
// --gpus 0.5 --gpu-memory 1GiB` on a simulated node runs a real CUDA program
// (cuda_limit_probe, built with nvcc) on Drover's stand-in libcuda.so.1; the
// agent preloads the shim, so the program sees 1 GiB and its allocation past
// it fails cleanly with CUDA_ERROR_OUT_OF_MEMORY (the stand-in's device has
// its default 8 GiB: a DROVER_ variable cannot be passed to a job). Skipped
// where nvcc was not found at configure time.

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "drover/http/client.h"
#include "support/drover_process.h"

namespace drover::testing {
namespace {

class GpuMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    up_ = std::make_unique<DroverUp>(dir_.path() + "/data",
                                     std::vector<std::string>{"--simulate", "1", "--simulate-gpus", "2"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));  // this machine + sim-1
  }
  CommandResult Cli(std::vector<std::string> args) {
    return RunCli(up_->grpc_address(), std::move(args), {"DROVER_HTTP_ADDR=" + up_->http_address()});
  }
  static std::string Id(const CommandResult& r) { return r.out.substr(0, r.out.find('\n')); }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(GpuMemoryTest, AHalfGpuJobIsHeldToItsGigabyte) {
  std::string probe = DROVER_CUDA_PROBE;
  if (probe.empty() || !std::filesystem::exists(probe)) GTEST_SKIP() << "nvcc was not found at configure time";
  // The job's own LD_PRELOAD (a harmless library) stays, after the shim.
  CommandResult r =
      Cli({"submit", "--gpus", "0.5", "--gpu-memory", "1GiB", "--gpu-vendor", "nvidia", "--env",
           std::string("LD_LIBRARY_PATH=") + DROVER_STANDIN_CUDA_DIR, "--env", "LD_PRELOAD=libm.so.6", "--wait", "--",
           "sh", "-c", "echo preload=$LD_PRELOAD limit=$DROVER_GPU_MEMORY_LIMIT; exec " + probe + " driver 256 16"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  CommandResult logs = Cli({"logs", Id(r)});
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_TRUE(
      std::regex_search(logs.out, std::regex("preload=/\\S*/libdrover_cuda_shim.so:libm.so.6 limit=1073741824")))
      << logs.out;
  EXPECT_NE(logs.out.find("mem_get_info=CUDA_SUCCESS total=1073741824 free=1073741824"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("alloc 3 of 268435456 bytes: CUDA_SUCCESS"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("first_failure=4 CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("done status=0"), std::string::npos) << logs.out;
}

// The shim's reports reach the server's drover_gpu_job_memory_used_bytes
// (simulated GPUs name no processes of their own).
TEST_F(GpuMemoryTest, TheJobsUsageReachesTheMetric) {
  std::string probe = DROVER_CUDA_PROBE;
  if (probe.empty() || !std::filesystem::exists(probe)) GTEST_SKIP() << "nvcc was not found at configure time";
  CommandResult r =
      Cli({"submit", "--gpus", "0.5", "--gpu-memory", "1GiB", "--gpu-vendor", "nvidia", "--env",
           std::string("LD_LIBRARY_PATH=") + DROVER_STANDIN_CUDA_DIR, "--", probe, "driver", "256", "2", "hold"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string id = Id(r);
  std::regex series("drover_gpu_job_memory_used_bytes\\{[^}]*job_id=\"" + id + "\"[^}]*\\} (\\S+)");
  double value = -1;
  std::string text;
  EXPECT_TRUE(WaitUntil([&] {
    auto res = http::HttpRequest(up_->http_address(), "GET", "/metrics", "", "application/json",
                                 {{"Authorization", "Bearer " + up_->token()}});
    text = res.ok() && res->status == 200 ? res->body : "";
    std::smatch m;
    if (!std::regex_search(text, m, series)) return false;
    value = std::stod(m[1].str());
    return value == 512.0 * 1024 * 1024;
  })) << "last value "
      << value << "\n"
      << text.substr(0, 2000);
  EXPECT_EQ(Cli({"cancel", id}).exit_code, 0);
}

TEST_F(GpuMemoryTest, AWholeGpuJobRunsWithoutTheShim) {
  CommandResult r = Cli({"submit", "--gpus", "1", "--gpu-vendor", "nvidia", "--env", "LD_PRELOAD=libm.so.6", "--wait",
                         "--", "sh", "-c", "echo preload=$LD_PRELOAD limit=${DROVER_GPU_MEMORY_LIMIT:-none}"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Cli({"logs", Id(r)}).out, "preload=libm.so.6 limit=none\n");
}

TEST_F(GpuMemoryTest, ALimitSmallerThanOneGranuleFailsTheJobWithAClearMessage) {
  // A job may ask for the shim itself; a limit that could never grant an
  // allocation is refused before the job starts.
  CommandResult r = Cli({"submit", "--env", "DROVER_GPU_MEMORY_LIMIT=1000", "--wait", "--", "true"});
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  CommandResult shown = Cli({"job", Id(r)});
  EXPECT_NE(shown.out.find("smaller than one allocation granule"), std::string::npos) << shown.out;
}

}  // namespace
}  // namespace drover::testing
