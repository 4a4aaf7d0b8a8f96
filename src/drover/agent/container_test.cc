// Container workloads end to end on one agent (docs/containers.md): a real
// agent against a fake control plane, real runc, skopeo and umoci, a real
// registry (Debian's docker-registry) on loopback with images the test
// builds from busybox-static. A job in an image runs with the image's
// files, environment and command, as its tenant's user; its output and exit
// code come back; cancel with grace reaches its process; an agent restart
// neither kills nor duplicates it; two jobs wanting a new image cause one
// pull; an unknown image fails with the reason; a small store evicts what
// no job uses and keeps what one does; a container sees its own stand-in
// GPU and no other; an archive (docker save's, or an oci-archive) loads
// into the store without a registry, and a bad one is refused saying why.
//
// Needs root and the packages scripts/install-deps.sh installs (runc,
// skopeo, umoci, docker-registry, busybox-static): it fails without them.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "drover/agent/agent.h"
#include "drover/agent/cdi.h"
#include "drover/agent/devices/device_backend.h"
#include "drover/agent/fake_agent_server.h"
#include "drover/agent/image_archive.h"
#include "drover/agent/image_store.h"
#include "drover/agent/oci_bundle.h"
#include "drover/agent/oci_test_support.h"
#include "drover/agent/seccomp_profile.h"
#include "drover/auth/token.h"
#include "drover/rpc/convert.h"

namespace drover::agent {
namespace {

using test_support::FakeServer;
using test_support::Slurp;
using test_support::TempDirTest;
using test_support::TestRegistry;

// ---- pure parts ----

TEST(ImageConfigTest, ReadsTheFieldsAContainerStartsFrom) {
  auto c = ParseImageConfig(R"({"os":"linux","config":{"Entrypoint":["/bin/sh","-c"],"Cmd":["echo hi"],)"
                            R"("Env":["A=1","PATH=/bin"],"WorkingDir":"/srv","User":"1234"}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->entrypoint, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_EQ(c->cmd, (std::vector<std::string>{"echo hi"}));
  EXPECT_EQ(c->working_dir, "/srv");
  EXPECT_EQ(c->user, "1234");
}

TEST(ImageConfigTest, MalformedOrHugeConfigsAreRefused) {
  EXPECT_FALSE(ParseImageConfig("[]").ok());
  EXPECT_FALSE(ParseImageConfig(R"({"os":"windows"})").ok());
  EXPECT_FALSE(ParseImageConfig(R"({"config":{"Cmd":"not a list"}})").ok());
  EXPECT_FALSE(ParseImageConfig(R"({"config":{"Env":[1,2]}})").ok());
  EXPECT_FALSE(ParseImageConfig(std::string(kMaxImageConfigBytes + 1, ' ')).ok());
  EXPECT_FALSE(ParseImageConfig(std::string(100, '[') + std::string(100, ']')).ok());
}

TEST(ImageUserTest, NamesAndNumbersResolveInTheImagesOwnFilesNeverThroughALink) {
  const std::string root = std::filesystem::temp_directory_path() / ("drover-user-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root + "/etc");
  test_support::Spit(root + "/etc/passwd", "root:x:0:0::/root:/bin/sh\napp:x:1234:50::/tmp:/bin/sh\n");
  test_support::Spit(root + "/etc/group", "root:x:0:\nstaff:x:77:\n");
  using P = std::pair<uint32_t, uint32_t>;
  const std::vector<std::string> layers = {root};
  EXPECT_EQ(*ResolveImageUser(layers, ""), P(0, 0));
  EXPECT_EQ(*ResolveImageUser(layers, "app"), P(1234, 50));
  EXPECT_EQ(*ResolveImageUser(layers, "1234"), P(1234, 50));
  EXPECT_EQ(*ResolveImageUser(layers, "999"), P(999, 0));
  EXPECT_EQ(*ResolveImageUser(layers, "app:staff"), P(1234, 77));
  EXPECT_EQ(*ResolveImageUser(layers, "5:6"), P(5, 6));
  EXPECT_FALSE(ResolveImageUser(layers, "nobody").ok());
  EXPECT_FALSE(ResolveImageUser(layers, "app:nogroup").ok());
  // A passwd that is a link (to the node's own) is not read.
  std::filesystem::remove(root + "/etc/passwd");
  std::filesystem::create_symlink("/etc/passwd", root + "/etc/passwd");
  EXPECT_FALSE(ResolveImageUser(layers, "root").ok());
  std::filesystem::remove_all(root);
}

// The files as the overlay of the layers shows them: the topmost layer
// that has one, a whiteout (a 0/0 character device) deleting it, an opaque
// /etc hiding every /etc below.
TEST(ImageUserTest, TheLayersAreReadAsTheirOverlayShowsThem) {
  const std::string root = std::filesystem::temp_directory_path() / ("drover-layers-" + std::to_string(::getpid()));
  const std::string base = root + "/base", mid = root + "/mid", top = root + "/top";
  for (const std::string& l : {base, mid, top}) std::filesystem::create_directories(l + "/etc");
  test_support::Spit(base + "/etc/passwd", "root:x:0:0::/root:/bin/sh\napp:x:1:1::/:/bin/sh\n");
  test_support::Spit(base + "/etc/group", "staff:x:7:\n");
  test_support::Spit(mid + "/etc/passwd", "root:x:0:0::/root:/bin/sh\napp:x:2:2::/:/bin/sh\n");
  using P = std::pair<uint32_t, uint32_t>;
  // The upper passwd wins; the group file comes from below.
  EXPECT_EQ(*ResolveImageUser({top, mid, base}, "app:staff"), P(2, 7));
  // A whiteout in the top layer deletes the group file.
  ASSERT_EQ(::mknod((top + "/etc/group").c_str(), S_IFCHR | 0600, ::makedev(0, 0)), 0) << std::strerror(errno);
  EXPECT_FALSE(ResolveImageUser({top, mid, base}, "app:staff").ok());
  EXPECT_EQ(*ResolveImageUser({top, mid, base}, "app"), P(2, 2));
  // An opaque /etc in the middle layer: nothing of base's /etc shows.
  std::filesystem::remove(top + "/etc/group");
  ASSERT_EQ(::setxattr((mid + "/etc").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0) << std::strerror(errno);
  EXPECT_FALSE(ResolveImageUser({top, mid, base}, "app:staff").ok());
  EXPECT_EQ(*ResolveImageUser({top, mid, base}, "app"), P(2, 2));
  std::filesystem::remove(mid + "/etc/passwd");
  EXPECT_FALSE(ResolveImageUser({top, mid, base}, "app").ok());
  std::filesystem::remove_all(root);
}

TEST(ManifestTest, AListIsResolvedToLinuxAmd64OrRefused) {
  const std::string d = "sha256:" + std::string(64, 'a');
  auto m = ParseManifest(R"({"manifests":[{"digest":"sha256:)" + std::string(64, 'b') +
                             R"(","platform":{"os":"linux","architecture":"arm64"}},{"digest":")" + d +
                             R"(","platform":{"os":"linux","architecture":"amd64"}}]})",
                         128);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->is_index);
  EXPECT_EQ(m->platform_digest, d);
  auto arm = ParseManifest(
      R"({"manifests":[{"digest":")" + d + R"(","platform":{"os":"linux","architecture":"arm64"}}]})", 128);
  ASSERT_FALSE(arm.ok());
  EXPECT_NE(arm.status().message().find("linux/amd64"), std::string::npos);
}

TEST(ManifestTest, TooManyLayersOrMissingSizesAreRefused) {
  std::string layers;
  for (int i = 0; i < 3; ++i) layers += std::string(i ? "," : "") + R"({"digest":"sha256:x","size":10})";
  const std::string m = R"({"schemaVersion":2,"config":{"digest":"sha256:)" + std::string(64, 'c') +
                        R"(","size":5},"layers":[)" + layers + "]}";
  EXPECT_TRUE(ParseManifest(m, 3).ok());
  auto many = ParseManifest(m, 2);
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("3 layers"), std::string::npos) << many.status().message();
  EXPECT_FALSE(ParseManifest(R"({"schemaVersion":2,"config":{"size":5},"layers":[{"digest":"sha256:x"}]})", 9).ok());
  EXPECT_FALSE(ParseManifest(R"({"schemaVersion":2,"config":{"size":99999999},"layers":[]})", 9).ok());
}

// Tars made by Python's tarfile from `members` (name -> contents), in a
// format tarfile names ("ustar", "gnu", "pax"); the path.
std::string MakeTar(const std::string& path, const std::map<std::string, std::string>& members,
                    const std::string& format = "ustar") {
  std::string script = "import io, sys, tarfile\nm = {\n";
  for (const auto& [name, contents] : members) {
    script += "  " + nlohmann::json(name).dump() + ": " + nlohmann::json(contents).dump() + ",\n";
  }
  script += "}\nwith tarfile.open(sys.argv[1], 'w', format=tarfile." + std::string(format == "gnu"   ? "GNU_FORMAT"
                                                                                 : format == "pax" ? "PAX_FORMAT"
                                                                                                   : "USTAR_FORMAT") +
            ") as t:\n  for n, c in m.items():\n    i = tarfile.TarInfo(n); b = c.encode(); i.size = len(b)\n"
            "    t.addfile(i, io.BytesIO(b))\n";
  test_support::Spit(path + ".py", script);
  EXPECT_EQ(test_support::Sh("python3 " + path + ".py " + path), 0);
  return path;
}

class ArchiveTest : public TempDirTest {};

TEST_F(ArchiveTest, ADockerArchiveNamesItsImagesAndSaysHowEachIsSelected) {
  const std::string one = MakeTar(root_ + "/one.tar", {{"manifest.json", R"([{"Config": "c.json",
      "RepoTags": ["busybox:1.36", "127.0.0.1:5000/x/y:v2", "Not A Tag"], "Layers": []}])"}});
  auto c = ReadImageArchive(one);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->format, "docker-archive");
  ASSERT_EQ(c->images.size(), 1u);
  EXPECT_EQ(c->images[0].names,
            (std::vector<std::string>{"docker.io/library/busybox:1.36", "127.0.0.1:5000/x/y:v2"}));
  EXPECT_EQ(c->images[0].source_name, "");
  // Two images, under a name longer than ustar holds (GNU's long names).
  const std::string two = MakeTar(root_ + "/two.tar",
                                  {{"manifest.json", R"([{"RepoTags": ["a:1"]}, {"RepoTags": null}])"},
                                   {std::string(150, 'd') + "/layer.tar", "x"}},
                                  "gnu");
  c = ReadImageArchive(two);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->images.size(), 2u);
  EXPECT_EQ(c->images[1].source_name, "@1");
  EXPECT_TRUE(c->images[1].names.empty());
}

TEST_F(ArchiveTest, AnOciArchivesManifestIsReadAndCheckedAgainstItsDigest) {
  const std::string manifest = R"({"schemaVersion": 2, "config": {"digest": "sha256:00", "size": 1}, "layers": []})";
  const std::string digest = "sha256:" + auth::Sha256Hex(manifest);
  auto index = [&](const std::string& d, const std::string& ref) {
    return R"({"schemaVersion": 2, "manifests": [{"digest": ")" + d + R"(", "annotations":
        {"org.opencontainers.image.ref.name": ")" + ref + R"("}}]})";
  };
  const std::string blob = "blobs/sha256/" + digest.substr(7);
  auto c = ReadImageArchive(MakeTar(
      root_ + "/o.tar", {{"oci-layout", "{}"}, {"index.json", index(digest, "localhost/y:1")}, {blob, manifest}}, "pax"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->format, "oci-archive");
  ASSERT_EQ(c->images.size(), 1u);
  EXPECT_EQ(c->images[0].names, (std::vector<std::string>{"localhost/y:1"}));
  EXPECT_EQ(c->images[0].manifest, manifest);
  EXPECT_EQ(c->images[0].manifest_digest, digest);
  // A bare tag names no image.
  c = ReadImageArchive(
      MakeTar(root_ + "/t.tar", {{"oci-layout", "{}"}, {"index.json", index(digest, "latest")}, {blob, manifest}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->images[0].names.empty());
  // A manifest that is not what the index says it is.
  c = ReadImageArchive(MakeTar(root_ + "/m.tar", {{"oci-layout", "{}"},
                                                  {"index.json", index(digest, "localhost/y:1")},
                                                  {blob, manifest + " "}}));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("does not match its digest"), std::string::npos) << c.status().ToString();
}

TEST_F(ArchiveTest, WhatIsNoImageArchiveIsRefusedSayingWhy) {
  auto why = [&](const std::string& path) {
    auto c = ReadImageArchive(path);
    EXPECT_FALSE(c.ok()) << path;
    return c.ok() ? std::string() : c.status().message();
  };
  test_support::Spit(root_ + "/text", std::string(2048, 'x'));
  EXPECT_NE(why(root_ + "/text").find("not a tar"), std::string::npos);
  const std::string good = MakeTar(root_ + "/good.tar", {{"manifest.json", R"([{"RepoTags": ["a:1"]}])"}});
  ASSERT_EQ(test_support::Sh("gzip -k " + good), 0);
  EXPECT_NE(why(good + ".gz").find("compressed (gzip)"), std::string::npos);
  EXPECT_NE(why(MakeTar(root_ + "/none.tar", {{"README", "hi"}})).find("holds no image"), std::string::npos);
  EXPECT_NE(why(MakeTar(root_ + "/empty.tar", {{"manifest.json", "[]"}})).find("lists no image"), std::string::npos);
  EXPECT_NE(why(MakeTar(root_ + "/obj.tar", {{"manifest.json", "{}"}})).find("not a list"), std::string::npos);
  // Cut off mid-entry, or a header damaged.
  const std::string big = MakeTar(root_ + "/big.tar", {{"a", std::string(4096, 'a')}, {"manifest.json", "[]"}});
  std::filesystem::resize_file(big, 2048);
  EXPECT_NE(why(big).find("runs past the end"), std::string::npos);
  const std::string damaged = MakeTar(root_ + "/damaged.tar", {{"a", "a"}, {"manifest.json", "[]"}});
  ASSERT_EQ(test_support::Sh("printf 'Z' | dd of=" + damaged + " bs=1 seek=1030 conv=notrunc 2>/dev/null"), 0);
  EXPECT_NE(why(damaged).find("damaged"), std::string::npos);
}

TEST(ContainerSpecTest, TheJobsCommandReplacesTheImagesAfterItsEntrypoint) {
  ImageConfig image;
  image.entrypoint = {"/entry"};
  image.cmd = {"default"};
  EXPECT_EQ(*ContainerArgs(image, {}), (std::vector<std::string>{"/entry", "default"}));
  EXPECT_EQ(*ContainerArgs(image, {"mine", "x"}), (std::vector<std::string>{"/entry", "mine", "x"}));
  EXPECT_FALSE(ContainerArgs(ImageConfig{}, {}).ok());
  image.env = {"PATH=/image/bin", "A=image"};
  auto env = ContainerEnv(image, {{"A", "job"}, {"DROVER_JOB_ID", "j-1"}});
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/image/bin", "A=job", "DROVER_JOB_ID=j-1"}));
  EXPECT_EQ(ShmBytes(0, 0), int64_t{1} << 30);
  EXPECT_EQ(ShmBytes(0, 8 << 20), 4 << 20);
  EXPECT_EQ(ShmBytes(5, 8 << 20), 5);
  EXPECT_EQ(ContainerId("j-000001.2"), ContainerId("j-000001.2"));
  EXPECT_NE(ContainerId("j-1@2"), ContainerId("j-1_2"));
}

TEST(CdiTest, TheSpecIsWhatPodmanReadsAndABundleGetsOnlyItsOwnDevices) {
  CdiSpec spec;
  spec.devices.push_back({"0", {{"/dev/drover-gpu0", "/dev/null", {"", 'c', 1, 3, 0666}}}});
  spec.devices.push_back({"1", {{"/dev/drover-gpu1", "/dev/null", {"", 'c', 1, 3, 0666}}}});
  auto j = nlohmann::json::parse(CdiSpecJson(spec));
  EXPECT_EQ(j["cdiVersion"], "0.5.0");  // podman 4.3 reads 0.3.0 to 0.5.0
  EXPECT_EQ(j["kind"], "drover.dev/gpu");
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][1]["name"], "1");
  EXPECT_EQ(j["devices"][1]["containerEdits"]["deviceNodes"][0]["path"], "/dev/drover-gpu1");
  EXPECT_EQ(j["devices"][1]["containerEdits"]["deviceNodes"][0]["hostPath"], "/dev/null");
  std::vector<DeviceNode> edits = CdiEditsFor(spec, {"1"});
  ASSERT_EQ(edits.size(), 1u);
  EXPECT_EQ(edits[0].path, "/dev/drover-gpu1");
  EXPECT_EQ(edits[0].major, 1u);
  EXPECT_TRUE(CdiEditsFor(spec, {"7"}).empty());
}

TEST(RuntimeSpecTest, AnOrdinaryTenantGetsNoCapabilitiesItsFilterAndItsLimits) {
  ContainerInputs in;
  in.args = {"true"};
  in.uid = in.gid = 2000000123;
  in.seccomp_json = SeccompOciJson(false);
  in.shm_bytes = 1 << 30;
  in.memory_bytes = int64_t{2} << 30;
  in.cpu_millis = 1500;
  in.cpus = {0, 1};
  in.cgroups_path = "/drover-n-1/j-1";
  in.binds.push_back({"/data/x", "/x", true});
  auto j = nlohmann::json::parse(RuntimeSpecJson(in));
  EXPECT_EQ(j["process"]["user"]["uid"], 2000000123u);
  EXPECT_TRUE(j["process"]["noNewPrivileges"].get<bool>());
  EXPECT_TRUE(j["process"]["capabilities"]["bounding"].empty());
  EXPECT_EQ(j["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW");
  EXPECT_FALSE(j["linux"]["seccomp"]["syscalls"].empty());
  EXPECT_EQ(j["linux"]["resources"]["memory"]["limit"], int64_t{2} << 30);
  EXPECT_EQ(j["linux"]["resources"]["cpu"]["quota"], 150000);
  EXPECT_EQ(j["linux"]["resources"]["cpu"]["cpus"], "0-1");
  EXPECT_EQ(j["linux"]["cgroupsPath"], "/drover-n-1/j-1");
  bool shm = false, bind = false, network_ns = false;
  for (const auto& m : j["mounts"]) {
    if (m["destination"] == "/dev/shm")
      shm = std::find(m["options"].begin(), m["options"].end(), "size=1073741824") != m["options"].end();
    if (m["destination"] == "/x")
      bind = std::find(m["options"].begin(), m["options"].end(), "ro") != m["options"].end();
  }
  for (const auto& n : j["linux"]["namespaces"]) network_ns |= n["type"] == "network";
  EXPECT_TRUE(shm);
  EXPECT_TRUE(bind);
  EXPECT_FALSE(network_ns);  // the host's network by default
  in.network_none = true;
  in.as_root = true;
  j = nlohmann::json::parse(RuntimeSpecJson(in));
  network_ns = false;
  for (const auto& n : j["linux"]["namespaces"]) network_ns |= n["type"] == "network";
  EXPECT_TRUE(network_ns);
  EXPECT_FALSE(j["process"]["capabilities"]["bounding"].empty());
}

// ---- an agent running containers ----

class ContainerAgentTest : public TempDirTest {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(::geteuid(), 0u) << "the container tests need root (runc)";
    for (const char* tool : {"runc", "skopeo", "umoci", "docker-registry", "curl", "podman"}) {
      ASSERT_EQ(test_support::Sh(std::string("command -v ") + tool + " >/dev/null"), 0)
          << tool << " is missing: scripts/install-deps.sh installs it";
    }
    registry_dir_ =
        new std::string(std::filesystem::temp_directory_path() / ("drover-registry-" + std::to_string(::getpid())));
    registry_ = new TestRegistry();
    ASSERT_TRUE(registry_->Start(*registry_dir_)) << registry_->log();
    ASSERT_TRUE(registry_->Push("tiny", "v1", {{"/etc/drover-image", "made-by-the-test\n"}},
                                {"--config.env=FOO=from-the-image", "--config.cmd=/bin/sh", "--config.cmd=-c",
                                 "--config.cmd=echo hello from the image", "--config.workingdir=/tmp"},
                                &tiny_layer_))
        << registry_->log();
  }
  static void TearDownTestSuite() {
    delete registry_;
    std::error_code ec;
    if (registry_dir_ != nullptr) std::filesystem::remove_all(*registry_dir_, ec);
    delete registry_dir_;
  }

  void SetUp() override {
    TempDirTest::SetUp();
    server_port_ = server_.Start();
    ASSERT_GT(server_port_, 0);
    data_dir_ = MakeDir("data");
    StartTheAgent();
  }
  void StartTheAgent() {
    AgentOptions o;
    o.node_name = "oci-node";
    o.server_address = "127.0.0.1:" + std::to_string(server_port_);
    o.token = "a-node-token";
    o.data_dir = data_dir_;
    o.supervisor_exe = DROVER_SUPERVISE_BINARY;
    o.discover_host_topology = false;
    o.fencing = false;
    o.containers.store.insecure_registries = {registry_->host()};
    if (!extra_insecure_.empty()) o.containers.store.insecure_registries.push_back(extra_insecure_);
    o.containers.store.auth_file = auth_file_;
    o.containers.store.limit_bytes = store_limit_;
    o.containers.store.stall_timeout = std::chrono::milliseconds(1500);
    o.containers.disk_check_every = std::chrono::milliseconds(100);
    auto sim = MakeSimulatedBackend({2, "H100 80GB", "oci-node"});
    ASSERT_TRUE(sim.ok());
    o.backends.push_back(std::move(*sim));
    auto agent = StartAgent(std::move(o));
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    agent_ = std::move(*agent);
  }
  void TearDown() override {
    if (agent_) {
      (void)server_.SendDesired({});
      for (const std::string& id : launched_) EXPECT_TRUE(server_.WaitEnded(id)) << id << " did not end";
      agent_->Stop();
      agent_.reset();
    }
    server_.Stop();
    TempDirTest::TearDown();
  }

  v1::Workload Job(const std::string& job_id, const std::string& image, std::vector<std::string> command,
                   const std::string& tenant = "team-a") {
    v1::Workload w;
    w.set_job_id(job_id);
    w.set_workload_id(rpc::WorkloadId(job_id, 0, 1, 1));
    w.set_tenant(tenant);
    for (std::string& c : command) w.add_command(std::move(c));
    w.set_termination_grace_seconds(5);
    w.mutable_container()->set_image(image);
    launched_.push_back(w.workload_id());
    return w;
  }
  std::string Ref(const std::string& name) const { return registry_->host() + "/" + name; }
  std::string Log(const v1::Workload& w) const { return Slurp(data_dir_ + "/jobs/" + w.workload_id() + "/output.log"); }

  static bool Ended(const v1::WorkloadStatus& ws) {
    return ws.state() == v1::WORKLOAD_STATE_EXITED || ws.state() == v1::WORKLOAD_STATE_FAILED_TO_START;
  }
  static bool Running(const v1::WorkloadStatus& ws) { return ws.state() == v1::WORKLOAD_STATE_RUNNING; }

  static inline std::string* registry_dir_ = nullptr;
  static inline TestRegistry* registry_ = nullptr;
  static inline std::string tiny_layer_;
  int64_t store_limit_ = 0;
  std::string extra_insecure_;
  std::string auth_file_;
  FakeServer server_;
  int server_port_ = 0;
  std::string data_dir_;
  std::unique_ptr<Agent> agent_;
  std::vector<std::string> launched_;
};

TEST_F(ContainerAgentTest, AJobRunsInItsImageAsItsTenantsUserWithItsExitCode) {
  v1::Workload w = Job("j-000001", Ref("tiny:v1"),
                       {"sh", "-c",
                        "cat /etc/drover-image; echo FOO=$FOO; echo uid=$(id -u); pwd; "
                        "grep -c . /proc/self/mounts >/dev/null && echo CapEff=$(grep CapEff /proc/self/status); "
                        "ls /usr/bin/apt 2>/dev/null || echo no-host-files; exit 7"});
  ASSERT_TRUE(server_.SendDesired({w}));
  auto end = server_.WaitFor(w.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state(), v1::WORKLOAD_STATE_EXITED) << end->message();
  EXPECT_EQ(end->exit_code(), 7) << end->message() << "\n" << Log(w);
  EXPECT_TRUE(end->image_digest().starts_with("sha256:")) << end->image_digest();
  const std::string log = Log(w);
  EXPECT_NE(log.find("made-by-the-test"), std::string::npos) << log;
  EXPECT_NE(log.find("FOO=from-the-image"), std::string::npos) << log;
  EXPECT_EQ(log.find("uid=0"), std::string::npos) << log;
  EXPECT_NE(log.find("uid="), std::string::npos) << log;
  EXPECT_NE(log.find("/tmp"), std::string::npos) << "the image's working directory:\n" << log;
  EXPECT_NE(log.find("CapEff: 0000000000000000"), std::string::npos) << log;
  EXPECT_NE(log.find("no-host-files"), std::string::npos) << log;
}

TEST_F(ContainerAgentTest, WithoutACommandTheImagesOwnRuns) {
  v1::Workload w = Job("j-000002", Ref("tiny:v1"), {});
  ASSERT_TRUE(server_.SendDesired({w}));
  auto end = server_.WaitFor(w.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->exit_code(), 0) << end->message();
  EXPECT_NE(Log(w).find("hello from the image"), std::string::npos) << Log(w);
}

TEST_F(ContainerAgentTest, CancelWithGraceReachesTheProcessInside) {
  v1::Workload w = Job("j-000003", Ref("tiny:v1"),
                       {"sh", "-c",
                        "trap 'echo got TERM > /out/term; exit 3' TERM; echo started; while true; do sleep 0.1; done"});
  // What the trap writes goes to a directory of the test's: the job's own
  // output goes once the server has heard of its end.
  std::filesystem::create_directories(root_ + "/out");
  std::filesystem::permissions(root_ + "/out", std::filesystem::perms::all);
  v1::Mount* m = w.mutable_container()->add_mounts();
  m->set_source(root_ + "/out");
  m->set_target("/out");
  ASSERT_TRUE(server_.SendDesired({w}));
  ASSERT_TRUE(test_support::PollUntil([&] { return Log(w).find("started") != std::string::npos; })) << Log(w);
  ASSERT_TRUE(server_.SendDesired({}));
  auto end = server_.WaitFor(w.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->exit_code(), 3) << end->message();
  EXPECT_NE(Slurp(root_ + "/out/term").find("got TERM"), std::string::npos);
}

TEST_F(ContainerAgentTest, AnAgentRestartNeitherKillsNorDuplicatesTheContainer) {
  const std::string flag = root_ + "/go";
  v1::Workload w = Job("j-000004", Ref("tiny:v1"),
                       {"sh", "-c", "echo started-once; while [ ! -e /ckpt/go ]; do sleep 0.1; done; exit 5"});
  // The job waits for a file the test makes in a directory bound into it.
  std::filesystem::create_directories(root_ + "/shared");
  v1::Mount* m = w.mutable_container()->add_mounts();
  m->set_source(root_ + "/shared");
  m->set_target("/ckpt");
  ASSERT_TRUE(server_.SendDesired({w}));
  ASSERT_TRUE(server_.WaitFor(w.workload_id(), Running).has_value());
  ASSERT_TRUE(test_support::PollUntil([&] { return Log(w).find("started-once") != std::string::npos; })) << Log(w);
  agent_->Stop();
  agent_.reset();
  StartTheAgent();
  ASSERT_TRUE(server_.WaitSessions(2));
  ASSERT_TRUE(server_.SendDesired({w}));
  test_support::Spit(root_ + "/shared/go", "");
  auto end = server_.WaitFor(w.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->exit_code(), 5) << end->message() << "\n" << Log(w);
  const std::string log = Log(w);
  EXPECT_EQ(log.find("started-once"), log.rfind("started-once")) << "started twice:\n" << log;
}

TEST_F(ContainerAgentTest, TwoJobsWantingANewImageAtOnceCauseOnePull) {
  std::string layer;
  ASSERT_TRUE(registry_->Push("fresh", "v1", {{"/etc/fresh", "fresh\n"}}, {"--config.cmd=true"}, &layer));
  ASSERT_TRUE(layer.starts_with("sha256:")) << layer;
  v1::Workload a = Job("j-000005", Ref("fresh:v1"), {"cat", "/etc/fresh"});
  v1::Workload b = Job("j-000006", Ref("fresh:v1"), {"cat", "/etc/fresh"});
  ASSERT_TRUE(server_.SendDesired({a, b}));
  for (const v1::Workload& w : {a, b}) {
    // Either may end first: each is looked for in every report.
    ASSERT_TRUE(server_.WaitEnded(w.workload_id()));
    v1::WorkloadStatus end = server_.Reports(w.workload_id()).back();
    EXPECT_EQ(end.exit_code(), 0) << end.message();
    EXPECT_NE(Log(w).find("fresh"), std::string::npos);
  }
  EXPECT_EQ(registry_->BlobGets(layer), 1) << registry_->log();
  // The node's heartbeats list it (what `drover images` and placement see).
  EXPECT_TRUE(server_.WaitImages([&](const std::vector<v1::NodeImage>& images) {
    for (const v1::NodeImage& im : images) {
      for (const std::string& r : im.references()) {
        if (r == Ref("fresh:v1") && im.digest().starts_with("sha256:") && im.size_bytes() > 0) return true;
      }
    }
    return false;
  }));
  // While it was pulled, the jobs said so; once started, that they waited
  // for the pull; a later start, that the node held the image.
  bool said = false;
  for (const v1::WorkloadStatus& ws : server_.Reports(a.workload_id())) said |= !ws.image_pull().empty();
  EXPECT_TRUE(said);
  for (const v1::Workload& w : {a, b}) {
    v1::WorkloadStatus end = server_.Reports(w.workload_id()).back();
    EXPECT_FALSE(end.image_cached());
    EXPECT_GT(end.image_pull_millis(), 0);
  }
  v1::Workload c = Job("j-000021", Ref("fresh:v1"), {"true"});
  ASSERT_TRUE(server_.SendDesired({a, b, c}));
  ASSERT_TRUE(server_.WaitEnded(c.workload_id()));
  v1::WorkloadStatus end = server_.Reports(c.workload_id()).back();
  EXPECT_TRUE(end.image_cached());
  EXPECT_EQ(end.image_pull_millis(), 0);
}

// A container that writes more than its limit outside its mounts is stopped
// with the reason; one within its limit is not.
TEST_F(ContainerAgentTest, AContainerThatOutgrowsItsDiskLimitIsStoppedWithTheReason) {
  v1::Workload big =
      Job("j-000022", Ref("tiny:v1"), {"sh", "-c", "head -c 8000000 /dev/zero > /tmp/big && echo wrote && sleep 60"});
  big.mutable_container()->set_disk_bytes(4 << 20);
  v1::Workload small = Job("j-000023", Ref("tiny:v1"), {"sh", "-c", "head -c 1000000 /dev/zero > /tmp/small"});
  small.mutable_container()->set_disk_bytes(4 << 20);
  ASSERT_TRUE(server_.SendDesired({big, small}));
  auto end = server_.WaitFor(big.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state(), v1::WORKLOAD_STATE_EXITED);
  EXPECT_TRUE(end->exit_code() != 0 || end->signal() != 0);
  EXPECT_NE(end->message().find("more than its limit of 4MiB"), std::string::npos) << end->message();
  // (It may have ended first: looked for in every report.)
  ASSERT_TRUE(server_.WaitEnded(small.workload_id()));
  v1::WorkloadStatus small_end = server_.Reports(small.workload_id()).back();
  EXPECT_EQ(small_end.exit_code(), 0) << small_end.message();
}

// A tag moved on the registry: a workload pinned to the digest an earlier
// attempt ran gets those bits; `always` without a pin gets the new ones; a
// node holding the tag runs it as it is under if-not-present.
TEST_F(ContainerAgentTest, APinnedDigestRunsTheSameBitsAfterTheTagMoved) {
  ASSERT_TRUE(registry_->Push("pin", "v1", {{"/etc/version", "first\n"}}, {"--config.cmd=true"}));
  v1::Workload first = Job("j-000017", Ref("pin:v1"), {"cat", "/etc/version"});
  ASSERT_TRUE(server_.SendDesired({first}));
  ASSERT_TRUE(server_.WaitEnded(first.workload_id()));
  const std::string digest = server_.Reports(first.workload_id()).back().image_digest();
  ASSERT_TRUE(digest.starts_with("sha256:")) << digest;
  ASSERT_TRUE(registry_->Push("pin", "v1", {{"/etc/version", "second\n"}}, {"--config.cmd=true"}));

  v1::Workload cached = Job("j-000018", Ref("pin:v1"), {"cat", "/etc/version"});
  v1::Workload pinned = Job("j-000019", Ref("pin:v1"), {"cat", "/etc/version"});
  pinned.set_image_digest(digest);
  pinned.mutable_container()->set_pull_policy("always");
  v1::Workload fresh = Job("j-000020", Ref("pin:v1"), {"cat", "/etc/version"});
  fresh.mutable_container()->set_pull_policy("always");
  ASSERT_TRUE(server_.SendDesired({cached, pinned, fresh}));
  for (const v1::Workload& w : {cached, pinned, fresh}) ASSERT_TRUE(server_.WaitEnded(w.workload_id()));
  EXPECT_NE(Log(cached).find("first"), std::string::npos) << Log(cached);
  EXPECT_EQ(server_.Reports(cached.workload_id()).back().image_digest(), digest);
  EXPECT_NE(Log(pinned).find("first"), std::string::npos) << Log(pinned);
  EXPECT_EQ(server_.Reports(pinned.workload_id()).back().image_digest(), digest);
  EXPECT_NE(Log(fresh).find("second"), std::string::npos) << Log(fresh);
  EXPECT_NE(server_.Reports(fresh.workload_id()).back().image_digest(), digest);
}

TEST_F(ContainerAgentTest, AnUnknownImageFailsWithTheReason) {
  v1::Workload w = Job("j-000007", Ref("no-such-image:v1"), {"true"});
  ASSERT_TRUE(server_.SendDesired({w}));
  auto end = server_.WaitFor(w.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state(), v1::WORKLOAD_STATE_FAILED_TO_START);
  EXPECT_NE(end->message().find("no-such-image"), std::string::npos) << end->message();
}

TEST_F(ContainerAgentTest, AContainerSeesItsOwnStandInGpuAndNoOther) {
  v1::Workload w = Job("j-000008", Ref("tiny:v1"), {"sh", "-c", "ls /dev | grep drover-gpu"});
  w.add_gpu_indices(1);
  ASSERT_TRUE(server_.SendDesired({w}));
  auto end = server_.WaitFor(w.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->exit_code(), 0) << end->message();
  EXPECT_NE(Log(w).find("drover-gpu1"), std::string::npos) << Log(w);
  EXPECT_EQ(Log(w).find("drover-gpu0"), std::string::npos) << Log(w);
}

// The agent's CDI spec is one podman reads: a container given
// drover.dev/gpu=1 sees that GPU's stand-in and not GPU 0's.
TEST_F(ContainerAgentTest, PodmanReadsTheAgentsCdiSpec) {
  const std::string spec = data_dir_ + "/cdi/drover-oci-node.json";
  ASSERT_TRUE(std::filesystem::exists(spec));
  const std::string podman = root_ + "/podman";
  std::filesystem::create_directories("/var/run/cdi");
  const std::string installed = "/var/run/cdi/drover-test-" + std::to_string(::getpid()) + ".json";
  std::filesystem::copy_file(spec, installed, std::filesystem::copy_options::overwrite_existing);
  test_support::Spit(root_ + "/containers.conf",
                     "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n"
                     "[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n");
  const std::string p =
      fmt::format("CONTAINERS_CONF={0}/containers.conf podman --root {1}/storage --runroot {1}/run", root_, podman);
  int rc = test_support::Sh(fmt::format(
      "{0} run --rm --network host --tls-verify=false --device drover.dev/gpu=1 {1} ls /dev > {2}/ls.txt 2>&1; "
      "rc=$?; {0} rmi -af >/dev/null 2>&1; exit $rc",
      p, Ref("tiny:v1"), root_));
  std::filesystem::remove(installed);
  const std::string out = Slurp(root_ + "/ls.txt");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("drover-gpu1"), std::string::npos) << out;
  EXPECT_EQ(out.find("drover-gpu0"), std::string::npos) << out;
}

TEST_F(ContainerAgentTest, AMountOfTheAgentsOwnDirectoriesIsRefused) {
  v1::Workload w = Job("j-000009", Ref("tiny:v1"), {"true"});
  v1::Mount* m = w.mutable_container()->add_mounts();
  m->set_source(data_dir_);
  m->set_target("/data");
  ASSERT_TRUE(server_.SendDesired({w}));
  auto end = server_.WaitFor(w.workload_id(), Ended);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->state(), v1::WORKLOAD_STATE_FAILED_TO_START);
  EXPECT_NE(end->message().find("not allowed"), std::string::npos) << end->message();
}

// Layers are untrusted input: paths that climb out of the root, a symlink
// to the node's /tmp written through, a setuid-root program and a device
// node. Nothing lands outside the image's root, and inside the container
// the setuid bit and the device do nothing (the root is nodev, nosuid).
TEST_F(ContainerAgentTest, AHostileLayerCannotEscapeItsRootOrRaiseItsUser) {
  const std::string mark = "drover-escape-" + std::to_string(::getpid());
  const std::string tar = root_ + "/hostile.tar";
  ASSERT_EQ(test_support::Sh(fmt::format(R"(python3 - <<'PY'
import io, tarfile
t = tarfile.open("{0}", "w", format=tarfile.GNU_FORMAT)
def add(name, data=b"x", **kw):
    i = tarfile.TarInfo(name); i.size = len(data)
    for k, v in kw.items(): setattr(i, k, v)
    t.addfile(i, io.BytesIO(data) if i.isreg() else None)
add("../../../../../../tmp/{1}-dotdot")
s = tarfile.TarInfo("etc/evil"); s.type = tarfile.SYMTYPE; s.linkname = "/tmp"; t.addfile(s)
add("etc/evil/{1}-symlink")
add("bin/suid", open("/usr/bin/busybox", "rb").read(), mode=0o4755, uid=0, gid=0)
d = tarfile.TarInfo("etc/kmsg"); d.type = tarfile.CHRTYPE; d.devmajor = 1; d.devminor = 11; d.mode = 0o666
t.addfile(d)
add("../../../../tmp/.wh.{1}-whiteout")
t.close()
PY)",
                                         tar, mark)),
            0);
  test_support::Spit("/tmp/" + mark + "-whiteout", "must survive\n");
  ASSERT_TRUE(registry_->Push("hostile", "v1", {}, {"--config.cmd=true"}, nullptr, tar)) << registry_->log();
  v1::Workload w =
      Job("j-000013", Ref("hostile:v1"),
          {"sh", "-c", "echo uid=$(/bin/suid id -u); head -c 1 /etc/kmsg >/dev/null 2>&1 || echo no-device"});
  ASSERT_TRUE(server_.SendDesired({w}));
  ASSERT_TRUE(server_.WaitEnded(w.workload_id()));
  v1::WorkloadStatus end = server_.Reports(w.workload_id()).back();
  EXPECT_FALSE(std::filesystem::exists("/tmp/" + mark + "-dotdot"));
  EXPECT_FALSE(std::filesystem::exists("/tmp/" + mark + "-symlink"));
  EXPECT_TRUE(std::filesystem::exists("/tmp/" + mark + "-whiteout"));
  std::filesystem::remove("/tmp/" + mark + "-whiteout");
  // Refused with a reason, or run neutralised: never as root, never the device.
  if (end.state() == v1::WORKLOAD_STATE_FAILED_TO_START) {
    EXPECT_FALSE(end.message().empty());
  } else {
    const std::string log = Log(w);
    EXPECT_EQ(end.exit_code(), 0) << end.message() << log;
    EXPECT_EQ(log.find("uid=0"), std::string::npos) << log;
    EXPECT_NE(log.find("uid="), std::string::npos) << log;
    EXPECT_NE(log.find("no-device"), std::string::npos) << log;
  }
}

// A layer of zeros packs to almost nothing and unpacks to 300 MiB: stopped
// while it grows, the job fails with why.
TEST_F(ContainerAgentTest, ALayerThatUnpacksToFarMoreThanItsSizeIsRefused) {
  const std::string tar = root_ + "/bomb.tar";
  ASSERT_EQ(test_support::Sh(fmt::format("mkdir -p {0}/bomb && head -c 300M /dev/zero > {0}/bomb/zeros && "
                                         "tar -C {0}/bomb -cf {1} zeros && rm -rf {0}/bomb",
                                         root_, tar)),
            0);
  ASSERT_TRUE(registry_->Push("bomb", "v1", {}, {"--config.cmd=true"}, nullptr, tar)) << registry_->log();
  v1::Workload w = Job("j-000014", Ref("bomb:v1"), {"true"});
  ASSERT_TRUE(server_.SendDesired({w}));
  ASSERT_TRUE(server_.WaitEnded(w.workload_id()));
  v1::WorkloadStatus end = server_.Reports(w.workload_id()).back();
  EXPECT_EQ(end.state(), v1::WORKLOAD_STATE_FAILED_TO_START);
  EXPECT_NE(end.message().find("unpacks to more than"), std::string::npos) << end.message();
  // Nothing of it is left: no download, no layer half unpacked.
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_empty(data_dir_ + "/images/tmp", ec));
  // Nothing of the copy is kept: not the bomb's bytes, though its layer may
  // have completed between two looks, nor the busybox layer below it.
  uintmax_t stored = 0;
  std::set<ino_t> seen;  // busybox's names are links to one file
  for (const auto& e : std::filesystem::recursive_directory_iterator(data_dir_ + "/images/storage", ec)) {
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && seen.insert(st.st_ino).second) {
      stored += static_cast<uintmax_t>(st.st_size);
    }
  }
  EXPECT_LT(stored, uintmax_t{16} << 20);
  // containers-storage removes the layers flagged for it at its next write,
  // and the store goes on pulling.
  v1::Workload next = Job("j-000015", Ref("tiny:v1"), {"true"});
  ASSERT_TRUE(server_.SendDesired({next}));
  ASSERT_TRUE(server_.WaitEnded(next.workload_id()));
  EXPECT_EQ(server_.Reports(next.workload_id()).back().exit_code(), 0) << server_.Reports(next.workload_id()).back().message();
  auto layers = nlohmann::json::parse(Slurp(data_dir_ + "/images/storage/overlay-layers/layers.json"), nullptr, false);
  ASSERT_TRUE(layers.is_array());
  for (const auto& l : layers) EXPECT_FALSE(l.contains("flags") && l["flags"].value("incomplete", false)) << l.dump();
}

// A registry that sends a blob's first bytes and then nothing: the pull ends
// after the stall timeout, the job fails with why, and the agent goes on.
TEST_F(ContainerAgentTest, ARegistryThatStallsMidLayerFailsThePullNotTheAgent) {
  ASSERT_TRUE(registry_->Push("stall", "v1", {{"/etc/stall", "s\n"}}, {"--config.cmd=true"}));
  // A proxy in front of the registry that stalls every blob after 1 KiB.
  const int port = test_support::FreePort();
  const std::string script = root_ + "/stall.py";
  test_support::Spit(script, test_support::RegistryProxyScript(registry_->host(), fmt::format(R"(
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self): self.go(True)
    def do_HEAD(self): self.go(False)
    def go(self, body):
        data = relay(self)
        if not body: return
        if "/blobs/" in self.path and len(data) > 4096:
            self.wfile.write(data[:1024]); self.wfile.flush(); time.sleep(120)
        self.wfile.write(data)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", {}), H).serve_forever()
)",
                                                                                          port)));
  pid_t proxy = test_support::RunPython(script);
  ASSERT_TRUE(test_support::PollUntil(
      [&] { return test_support::Sh(fmt::format("curl -sf -o /dev/null http://127.0.0.1:{}/v2/", port)) == 0; }));
  // The agent trusts this registry too (a new agent: its options name it).
  agent_->Stop();
  agent_.reset();
  extra_insecure_ = fmt::format("127.0.0.1:{}", port);
  StartTheAgent();
  v1::Workload w = Job("j-000015", extra_insecure_ + "/stall:v1", {"true"});
  ASSERT_TRUE(server_.SendDesired({w}));
  ASSERT_TRUE(server_.WaitEnded(w.workload_id()));
  v1::WorkloadStatus end = server_.Reports(w.workload_id()).back();
  EXPECT_EQ(end.state(), v1::WORKLOAD_STATE_FAILED_TO_START);
  EXPECT_NE(end.message().find("sent nothing"), std::string::npos) << end.message();
  ::kill(proxy, SIGKILL);
  ::waitpid(proxy, nullptr, 0);
  // The same node still runs the next job.
  v1::Workload next = Job("j-000016", Ref("tiny:v1"), {"true"});
  ASSERT_TRUE(server_.SendDesired({next}));
  ASSERT_TRUE(server_.WaitEnded(next.workload_id()));
  EXPECT_EQ(server_.Reports(next.workload_id()).back().exit_code(), 0);
}

// A registry that asks for credentials and redirects every blob to another
// host (as registries in front of object stores do): the pull follows the
// redirect, and the credentials go to the registry only, never to the
// other host.
TEST_F(ContainerAgentTest, ABlobRedirectToAnotherHostIsFollowedWithoutTheCredentials) {
  ASSERT_TRUE(registry_->Push("moved", "v1", {{"/etc/moved", "m\n"}}, {"--config.cmd=true"}));
  const int front = test_support::FreePort(), back = test_support::FreePort();
  const std::string script = root_ + "/redirect.py", seen = root_ + "/back.log";
  test_support::Spit(script, test_support::RegistryProxyScript(registry_->host(), fmt::format(R"(
EXPECT = "Basic " + base64.b64encode(b"puller:s3cret").decode()
class Front(http.server.BaseHTTPRequestHandler):
    def do_GET(self): self.go(True)
    def do_HEAD(self): self.go(False)
    def go(self, body):
        if self.headers.get("Authorization") != EXPECT:
            self.send_response(401); self.send_header("WWW-Authenticate", 'Basic realm="drover-test"')
            self.send_header("Content-Length", "0"); self.end_headers(); return
        if "/blobs/" in self.path and self.command == "GET":
            self.send_response(307); self.send_header("Location", "http://127.0.0.2:{1}" + self.path)
            self.send_header("Content-Length", "0"); self.end_headers(); return
        data = relay(self)
        if body: self.wfile.write(data)
    def log_message(self, *a): pass
class Back(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("{2}", "a") as f: f.write("%s auth=%s\n" % (self.path, self.headers.get("Authorization") is not None))
        self.wfile.write(relay(self))
    def log_message(self, *a): pass
b = http.server.ThreadingHTTPServer(("127.0.0.2", {1}), Back)
threading.Thread(target=b.serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(("127.0.0.1", {0}), Front).serve_forever()
)",
                                                                                          front, back, seen)));
  pid_t proxy = test_support::RunPython(script);
  ASSERT_TRUE(test_support::PollUntil([&] {
    return test_support::Sh(fmt::format("curl -sf -o /dev/null -u puller:s3cret http://127.0.0.1:{}/v2/", front)) == 0;
  }));
  agent_->Stop();
  agent_.reset();
  extra_insecure_ = fmt::format("127.0.0.1:{}", front);
  auth_file_ = root_ + "/auth.json";
  test_support::Spit(auth_file_, fmt::format(R"({{"auths":{{"{}":{{"auth":"cHVsbGVyOnMzY3JldA=="}}}}}})", extra_insecure_));
  StartTheAgent();
  v1::Workload w = Job("j-000024", extra_insecure_ + "/moved:v1", {"cat", "/etc/moved"});
  ASSERT_TRUE(server_.SendDesired({w}));
  ASSERT_TRUE(server_.WaitEnded(w.workload_id()));
  v1::WorkloadStatus end = server_.Reports(w.workload_id()).back();
  ::kill(proxy, SIGKILL);
  ::waitpid(proxy, nullptr, 0);
  EXPECT_EQ(end.exit_code(), 0) << end.message();
  EXPECT_NE(Log(w).find("m"), std::string::npos);
  const std::string log = Slurp(seen);
  EXPECT_NE(log.find("/blobs/"), std::string::npos) << "no blob came through the other host:\n" << log;
  EXPECT_EQ(log.find("auth=True"), std::string::npos) << "the credentials reached the other host:\n" << log;
}

class SmallStoreTest : public ContainerAgentTest {
 protected:
  void SetUp() override {
    store_limit_ = 3 << 20;  // one image of busybox (about 2 MiB unpacked), not two
    ContainerAgentTest::SetUp();
  }
};

TEST_F(SmallStoreTest, EvictionKeepsTheImageAJobUses) {
  ASSERT_TRUE(registry_->Push("evict-a", "v1", {{"/etc/name", "a\n"}}, {"--config.cmd=true"}));
  ASSERT_TRUE(registry_->Push("evict-b", "v1", {{"/etc/name", "b\n"}}, {"--config.cmd=true"}));
  v1::Workload a =
      Job("j-000010", Ref("evict-a:v1"), {"sh", "-c", "echo up; while [ ! -e /ckpt/go ]; do sleep 0.1; done"});
  std::filesystem::create_directories(root_ + "/shared");
  v1::Mount* m = a.mutable_container()->add_mounts();
  m->set_source(root_ + "/shared");
  m->set_target("/ckpt");
  ASSERT_TRUE(server_.SendDesired({a}));
  ASSERT_TRUE(test_support::PollUntil([&] { return Log(a).find("up") != std::string::npos; })) << Log(a);
  // A second image while the first is in use: both stay.
  v1::Workload b = Job("j-000011", Ref("evict-b:v1"), {"true"});
  ASSERT_TRUE(server_.SendDesired({a, b}));
  auto b_end = server_.WaitFor(b.workload_id(), Ended);
  ASSERT_TRUE(b_end.has_value());
  EXPECT_EQ(b_end->exit_code(), 0) << b_end->message();
  // The images containers-storage holds (what the store's list names is
  // what its files are).
  auto count = [&] {
    auto j = nlohmann::json::parse(test_support::Slurp(data_dir_ + "/images/storage/overlay-images/images.json"),
                                   nullptr, false);
    return j.is_array() ? j.size() : size_t{0};
  };
  EXPECT_EQ(count(), 2u);
  // Once nothing uses them, the next pull evicts both older ones.
  test_support::Spit(root_ + "/shared/go", "");
  ASSERT_TRUE(server_.WaitFor(a.workload_id(), Ended).has_value());
  ASSERT_TRUE(server_.SendDesired({}));
  ASSERT_TRUE(
      test_support::PollUntil([&] { return !std::filesystem::exists(data_dir_ + "/jobs/" + a.workload_id()); }));
  v1::Workload c = Job("j-000012", Ref("tiny:v1"), {"true"});
  ASSERT_TRUE(server_.SendDesired({c}));
  ASSERT_TRUE(server_.WaitFor(c.workload_id(), Ended).has_value());
  EXPECT_EQ(count(), 1u);
}

// ---- images load: archives into a store of its own, no registry asked ----

class LoadTest : public ContainerAgentTest {
 protected:
  // The store, opened beside the agent's (its own root).
  std::unique_ptr<ImageStore> OpenStore() {
    ImageStoreOptions o;
    o.root = root_ + "/store";
    auto store = ImageStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  // Loads `archive` (a copy: the store removes what it loads) as `name`.
  Result<StoredImage> Load(ImageStore* store, const std::string& archive, const std::string& name = "",
                           std::string sha256 = "") {
    static int n = 0;
    auto path = store->PrepareArchive("load-" + std::to_string(++n), std::filesystem::file_size(archive));
    if (!path.ok()) return path.status();
    std::filesystem::copy_file(archive, *path);
    if (sha256.empty()) sha256 = *auth::Sha256FileHex(archive);
    std::promise<Result<StoredImage>> done;
    store->Load({*path, name, static_cast<int64_t>(std::filesystem::file_size(archive)), sha256},
                [&](Result<StoredImage> r) { done.set_value(std::move(r)); });
    Result<StoredImage> r = done.get_future().get();
    EXPECT_FALSE(std::filesystem::exists(*path)) << "the store keeps no archive it loaded";
    return r;
  }
  // `image` from the registry into an archive of `transport` ("docker-archive:F:NAME", ...).
  std::string Save(const std::string& image, const std::string& dest) {
    EXPECT_EQ(test_support::Sh(fmt::format("skopeo copy --quiet --src-tls-verify=false docker://{} {}", Ref(image), dest)),
              0);
    return dest.substr(dest.find(':') + 1, dest.find(':', dest.find(':') + 1) - dest.find(':') - 1);
  }
};

TEST_F(LoadTest, ADockerArchiveLoadsUnderItsOwnNameAndJobsFindItWithoutAPull) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const std::string archive = Save("tiny:v1", "docker-archive:" + root_ + "/tiny.tar:127.0.0.1:1/offline:v1");
  auto im = Load(store.get(), archive);
  ASSERT_TRUE(im.ok()) << im.status().ToString();
  EXPECT_EQ(im->references, (std::vector<std::string>{"127.0.0.1:1/offline:v1"}));
  EXPECT_EQ(im->config.cmd, (std::vector<std::string>{"/bin/sh", "-c", "echo hello from the image"}));
  // Its digest is its manifest's, as skopeo reads the archive.
  std::string raw = root_ + "/raw";
  ASSERT_EQ(test_support::Sh(fmt::format("skopeo inspect --raw docker-archive:{} > {}", archive, raw)), 0);
  EXPECT_EQ(im->digest, "sha256:" + auth::Sha256Hex(Slurp(raw)));
  EXPECT_TRUE(std::filesystem::exists(root_ + "/store/storage/overlay/" + im->lowers[0] + "/bin/busybox"));
  // A job of that name is served from the store: no registry listens at 127.0.0.1:1.
  auto held = store->Ensure({"127.0.0.1:1/offline:v1", "", false}, [](Result<StoredImage>) {});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_TRUE(held->has_value());
  EXPECT_EQ((*held)->digest, im->digest);
  // Loaded again under another name: one image, two names; and it survives a reopen.
  auto again = Load(store.get(), archive, "localhost/renamed:1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->digest, im->digest);
  EXPECT_EQ(again->references, (std::vector<std::string>{"127.0.0.1:1/offline:v1", "localhost/renamed:1"}));
  store.reset();
  store = OpenStore();
  ASSERT_EQ(store->Snapshot().size(), 1u);
  EXPECT_EQ(store->Snapshot()[0].references.size(), 2u);
}

TEST_F(LoadTest, AnOciArchiveThatNamesNoImageNeedsAName) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const std::string archive = Save("tiny:v1", "oci-archive:" + root_ + "/tiny-oci.tar:v1");
  auto nameless = Load(store.get(), archive);
  ASSERT_FALSE(nameless.ok());
  EXPECT_NE(nameless.status().message().find("--name"), std::string::npos) << nameless.status().ToString();
  auto named = Load(store.get(), archive, "localhost/from-oci:7");
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->references, (std::vector<std::string>{"localhost/from-oci:7"}));
  EXPECT_TRUE(std::filesystem::exists(root_ + "/store/storage/overlay/" + named->lowers[0] + "/etc/drover-image"));
}

TEST_F(LoadTest, AnArchiveThatIsNotWhatWasSentOrNoImageIsRefusedAndNothingIsKept) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const std::string archive = Save("tiny:v1", "docker-archive:" + root_ + "/t.tar:localhost/t:1");
  auto wrong = Load(store.get(), archive, "", std::string(64, '0'));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("does not match"), std::string::npos) << wrong.status().ToString();
  test_support::Spit(root_ + "/junk.tar", std::string(4096, 'j'));
  auto junk = Load(store.get(), root_ + "/junk.tar");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("not a tar"), std::string::npos) << junk.status().ToString();
  auto badname = Load(store.get(), archive, "localhost/t@sha256:" + std::string(64, 'a'));
  EXPECT_FALSE(badname.ok());
  EXPECT_TRUE(store->Snapshot().empty());
  // Ids that would name a path elsewhere, and archives larger than the node has room for.
  EXPECT_EQ(store->PrepareArchive("../x", 10).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store->PrepareArchive("ok", int64_t{1} << 60).status().code(), Code::kResourceExhausted);
}

}  // namespace
}  // namespace drover::agent
