// Containers through the CLI, the way the README runs them (docs/
// containers.md): `drover up` with a registry on loopback that the test
// fills with images it builds from busybox-static. A job in an image gets
// its output and exit code to the user, the digest it ran is on the job,
// a bad reference is refused at submit with nothing stored, a mount outside
// the tenant's roots is refused with 403, and a share of a GPU keeps its
// memory limit inside the container (the shim preloaded into a real CUDA
// program on the stand-in libcuda, with the node's /usr bound read-only),
// and an image loaded from an archive (`drover images load`) runs where no
// registry could serve it.
//
// Needs root and the packages scripts/install-deps.sh installs.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "drover/agent/oci_test_support.h"
#include "support/drover_process.h"

namespace drover::testing {
namespace {

using agent::test_support::TestRegistry;

class ContainerCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(::geteuid(), 0u) << "containers need root (runc)";
    dir_ = new TempDir();
    registry_ = new TestRegistry();
    ASSERT_TRUE(registry_->Start(dir_->path() + "/registry")) << registry_->log();
    ASSERT_TRUE(registry_->Push("tiny", "v1", {{"/etc/drover-image", "made-by-the-test\n"}},
                                {"--config.cmd=/bin/sh", "--config.cmd=-c", "--config.cmd=echo image-command-ran"}))
        << registry_->log();
    // Two simulated nodes alike (and the machine's own): placement has a
    // choice to make between equals.
    up_ = new DroverUp(dir_->path() + "/data", {"--simulate", "2", "--simulate-gpus", "2", "--insecure-registry",
                                                registry_->host()});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(3));
  }
  static void TearDownTestSuite() {
    if (up_ != nullptr && up_->jobs() != nullptr) CancelAllJobs(up_->jobs());
    delete up_;
    delete registry_;
    delete dir_;
  }
  static CommandResult Cli(std::vector<std::string> args) { return RunCli(up_->grpc_address(), std::move(args)); }
  static std::string Id(const CommandResult& r) { return r.out.substr(0, r.out.find('\n')); }
  static std::string Ref(const std::string& name) { return registry_->host() + "/" + name; }

  static inline TempDir* dir_ = nullptr;
  static inline TestRegistry* registry_ = nullptr;
  static inline DroverUp* up_ = nullptr;
};

TEST_F(ContainerCliTest, AJobInAnImageReachesTheUserWithItsOutputExitCodeAndDigest) {
  CommandResult r = Cli({"submit", "--gpus", "1", "--image", Ref("tiny:v1"), "--wait", "--", "sh", "-c",
                         "cat /etc/drover-image; exit 3"});
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  const std::string id = Id(r);
  ASSERT_TRUE(id.starts_with("j-")) << r.out << r.err;
  CommandResult logs = Cli({"logs", id});
  EXPECT_NE(logs.out.find("made-by-the-test"), std::string::npos) << logs.out << logs.err;
  v1::Job job = GetJob(up_->jobs(), id);
  EXPECT_EQ(job.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.status().exit_code(), 3);
  EXPECT_TRUE(job.status().image_digest().starts_with("sha256:")) << job.DebugString();
  CommandResult shown = Cli({"job", id});
  EXPECT_NE(shown.out.find(job.status().image_digest().substr(0, 19)), std::string::npos) << shown.out;

  // Without a command, the image's own runs.
  CommandResult own = Cli({"submit", "--gpus", "1", "--image", Ref("tiny:v1"), "--wait"});
  EXPECT_EQ(own.exit_code, 0) << own.out << own.err;
  EXPECT_NE(Cli({"logs", Id(own)}).out.find("image-command-ran"), std::string::npos);
}

// Once a node's store holds an image (its heartbeat says so), a job of
// that image goes there among nodes as good, though the scheduler would
// pick another without it, and starts without a pull; `drover job` says
// how each attempt got its image.
TEST_F(ContainerCliTest, AJobGoesWhereItsImageIsAndSaysItWasCached) {
  ASSERT_TRUE(registry_->Push("placed", "v1", {{"/etc/placed", "p\n"}}, {"--config.cmd=true"})) << registry_->log();
  // Where a job goes on this idle cluster without an image.
  CommandResult bare = Cli({"submit", "--gpus", "2", "--wait", "--", "true"});
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  const std::string usual = GetJob(up_->jobs(), Id(bare)).status().allocation().node();
  // The image, pulled into the other node only.
  v1::ListNodesResponse nodes;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(up_->nodes()->List(ctx.get(), v1::ListNodesRequest(), &nodes).ok());
  }
  std::string other;  // a node like the usual one
  for (const v1::Node& n : nodes.nodes()) {
    if (n.name() != usual && n.gpus_size() == 2) other = n.name();
  }
  ASSERT_FALSE(other.empty());
  CommandResult pulled = Cli({"images", "pull", Ref("placed:v1"), "--node", other});
  ASSERT_EQ(pulled.exit_code, 0) << pulled.out << pulled.err;
  ASSERT_TRUE(agent::test_support::PollUntil([&] {
    v1::GetNodeRequest req;
    req.set_name(other);
    v1::Node n;
    auto ctx = Ctx();
    if (!up_->nodes()->Get(ctx.get(), req, &n).ok()) return false;
    for (const v1::NodeImage& im : n.images()) {
      for (const std::string& r : im.references()) {
        if (r == Ref("placed:v1")) return true;
      }
    }
    return false;
  }));
  for (int i = 0; i < 2; ++i) {
    CommandResult again = Cli({"submit", "--gpus", "2", "--image", Ref("placed:v1"), "--wait"});
    ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
    EXPECT_EQ(GetJob(up_->jobs(), Id(again)).status().allocation().node(), other);
    CommandResult shown = Cli({"job", Id(again)});
    EXPECT_NE(shown.out.find("image cached"), std::string::npos) << shown.out;
  }
  // A job whose image no node holds waits for its pull, and says so.
  ASSERT_TRUE(registry_->Push("unplaced", "v1", {{"/etc/unplaced", "u\n"}}, {"--config.cmd=true"}));
  CommandResult fresh = Cli({"submit", "--gpus", "2", "--image", Ref("unplaced:v1"), "--wait"});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.out << fresh.err;
  EXPECT_NE(Cli({"job", Id(fresh)}).out.find("image pulled in"), std::string::npos);
}

// An air-gapped cluster's way in: an image saved to an archive (docker
// save's format, and a gzip'd oci-archive) and loaded onto nodes through
// the CLI runs though no registry could serve it; a load that cannot work
// is refused, saying why.
TEST_F(ContainerCliTest, AnImageLoadedFromAnArchiveRunsWithoutARegistry) {
  using agent::test_support::Sh;
  ASSERT_TRUE(registry_->Push("saved", "v1", {{"/etc/saved", "from-the-archive\n"}}, {"--config.cmd=true"}));
  // Named for a registry that does not exist: only the load can bring it.
  const std::string offline = "127.0.0.1:1/offline:v1";
  const std::string tar = dir_->path() + "/saved.tar";
  ASSERT_EQ(Sh("skopeo copy --quiet --src-tls-verify=false docker://" + Ref("saved:v1") + " docker-archive:" + tar +
               ":" + offline),
            0);
  v1::ListNodesResponse nodes;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(up_->nodes()->List(ctx.get(), v1::ListNodesRequest(), &nodes).ok());
  }
  std::vector<std::string> two;  // the nodes a 2-GPU job may go to
  for (const v1::Node& n : nodes.nodes()) {
    if (n.gpus_size() == 2) two.push_back(n.name());
  }
  ASSERT_EQ(two.size(), 2u);
  CommandResult loaded = Cli({"images", "load", tar, "--node", two[0], "--node", two[1]});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.out << loaded.err;
  for (const std::string& n : two) {
    EXPECT_NE(loaded.out.find(n + ": loaded " + offline + " (sha256:"), std::string::npos) << loaded.out;
  }
  CommandResult run = Cli({"submit", "--gpus", "2", "--image", offline, "--wait", "--", "cat", "/etc/saved"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(Cli({"logs", Id(run)}).out.find("from-the-archive"), std::string::npos);
  EXPECT_NE(Cli({"job", Id(run)}).out.find("image cached"), std::string::npos);

  // A gzip'd oci-archive, which names no image of its own, under --name.
  const std::string oci = dir_->path() + "/saved-oci.tar";
  ASSERT_EQ(Sh("skopeo copy --quiet --src-tls-verify=false docker://" + Ref("saved:v1") + " oci-archive:" + oci +
               ":v1 && gzip " + oci),
            0);
  CommandResult nameless = Cli({"images", "load", oci + ".gz", "--node", two[0]});
  EXPECT_NE(nameless.exit_code, 0);
  EXPECT_NE(nameless.out.find("--name"), std::string::npos) << nameless.out << nameless.err;
  CommandResult gz = Cli({"images", "load", oci + ".gz", "--node", two[0], "--name", "localhost/gz:1"});
  ASSERT_EQ(gz.exit_code, 0) << gz.out << gz.err;
  EXPECT_TRUE(agent::test_support::PollUntil(
      [&] { return Cli({"images"}).out.find("localhost/gz:1") != std::string::npos; }));

  // Refused, saying why, and nothing else changes.
  agent::test_support::Spit(dir_->path() + "/junk.tar", std::string(4096, 'j'));
  CommandResult junk = Cli({"images", "load", dir_->path() + "/junk.tar", "--node", two[0]});
  EXPECT_NE(junk.exit_code, 0);
  EXPECT_NE(junk.out.find("not a tar"), std::string::npos) << junk.out << junk.err;
  CommandResult unknown = Cli({"images", "load", tar, "--node", "no-such-node"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no-such-node"), std::string::npos) << unknown.err;
  CommandResult nowhere = Cli({"images", "load", tar});
  EXPECT_NE(nowhere.exit_code, 0);
  EXPECT_NE(nowhere.err.find("--node"), std::string::npos) << nowhere.err;
  CommandResult missing = Cli({"images", "load", dir_->path() + "/no-such.tar", "--node", two[0]});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;
}

TEST_F(ContainerCliTest, ABadReferenceIsRefusedAtSubmitAndNothingIsStored) {
  const size_t before = ListJobs(up_->jobs()).size();
  for (const char* bad : {"Busybox", "a//b", "x:y:z", "tiny@sha256:123"}) {
    CommandResult r = Cli({"submit", "--gpus", "1", "--image", bad, "--", "true"});
    EXPECT_NE(r.exit_code, 0) << bad << ": " << r.out;
    EXPECT_NE(r.err.find("image"), std::string::npos) << bad << ": " << r.err;
  }
  EXPECT_EQ(ListJobs(up_->jobs()).size(), before);
}

TEST_F(ContainerCliTest, AMountOutsideTheTenantsRootsIsRefused) {
  CommandResult r = Cli({"submit", "--gpus", "1", "--image", Ref("tiny:v1"), "--mount", "/var/lib:/data:ro", "--",
                         "true"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("/var/lib"), std::string::npos) << r.err;
}

TEST_F(ContainerCliTest, AShareOfAGpuKeepsItsMemoryLimitInsideTheContainer) {
  const std::string probe = DROVER_CUDA_PROBE;
  if (probe.empty() || !std::filesystem::exists(probe)) GTEST_SKIP() << "nvcc was not found at configure time";
  // The probe and the stand-in libcuda are the node's: bound in read-only
  // with the node's /usr (glibc), from roots the admin gives the tenant.
  const std::string build = std::filesystem::path(probe).parent_path().string();
  const std::string standin = DROVER_STANDIN_CUDA_DIR;
  CommandResult roots = Cli({"tenants", "create", "shim-team", "--mount-root", "/usr", "--mount-root", build,
                             "--mount-root", standin});
  ASSERT_EQ(roots.exit_code, 0) << roots.out << roots.err;
  // A `set` of something else keeps them; `drover tenants` shows them.
  ASSERT_EQ(Cli({"tenants", "set", "shim-team", "--weight", "2"}).exit_code, 0);
  CommandResult shown = Cli({"tenants", "list", "-o", "json"});
  EXPECT_NE(shown.out.find(standin), std::string::npos) << shown.out << shown.err;
  CommandResult r = Cli({"submit", "--tenant", "shim-team", "--gpus", "0.5", "--gpu-memory", "1GiB", "--gpu-vendor",
                         "nvidia", "--image",
                         Ref("tiny:v1"), "--mount", "/usr:/usr:ro", "--mount", "/usr/lib64:/lib64:ro", "--mount",
                         "/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:ro", "--mount",
                         build + ":" + build + ":ro", "--mount", standin + ":" + standin + ":ro", "--env",
                         "LD_LIBRARY_PATH=" + standin, "--wait", "--", "/bin/sh", "-c",
                         "echo limit=$DROVER_GPU_MEMORY_LIMIT; exec " + probe + " driver 256 16"});
  CommandResult logs = Cli({"logs", Id(r)});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << logs.out;
  EXPECT_NE(logs.out.find("mem_get_info=CUDA_SUCCESS total=1073741824"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("first_failure=4 CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << logs.out;
}

}  // namespace
}  // namespace drover::testing
