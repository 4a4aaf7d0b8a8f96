#include "drover/rpc/container.h"

#include <gtest/gtest.h>

#include "drover/rpc/convert.h"

namespace drover::rpc {
namespace {

v1::JobSpec ContainerJob() {
  v1::JobSpec s;
  s.set_gpus(1);
  v1::ContainerSpec* c = s.mutable_container();
  c->set_image("busybox");
  v1::Mount* m = c->add_mounts();
  m->set_source("/data/team-a");
  m->set_target("/data");
  m->set_read_only(true);
  return s;
}

TEST(ContainerTest, AContainerJobNeedsNoCommandAndKeepsItsImageAsWritten) {
  v1::JobSpec s = ContainerJob();
  Status st = NormalizeJobSpec(&s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.container().image(), "busybox");  // not docker.io/library/busybox:latest
  EXPECT_TRUE(s.command().empty());

  v1::JobSpec with_command = ContainerJob();
  with_command.add_command("sleep");
  with_command.add_command("1");
  EXPECT_TRUE(NormalizeJobSpec(&with_command).ok());
  with_command.set_command(0, "");
  EXPECT_EQ(NormalizeJobSpec(&with_command).code(), Code::kInvalidArgument);

  v1::JobSpec bare;
  bare.set_gpus(1);
  Status no_command = NormalizeJobSpec(&bare);
  EXPECT_EQ(no_command.code(), Code::kInvalidArgument);
  EXPECT_NE(no_command.message().find("command is empty"), std::string::npos);
}

struct BadContainer {
  const char* what;
  void (*mutate)(v1::ContainerSpec*);
  const char* message_part;
};

TEST(ContainerTest, RefusesEveryBadField) {
  const BadContainer cases[] = {
      {"empty image", [](v1::ContainerSpec* c) { c->set_image(""); }, "container image is empty"},
      {"upper case image", [](v1::ContainerSpec* c) { c->set_image("Busybox"); }, "container image"},
      {"two tags", [](v1::ContainerSpec* c) { c->set_image("x:y:z"); }, "container image"},
      {"long image", [](v1::ContainerSpec* c) { c->set_image(std::string(600, 'a')); }, "container image"},
      {"pull policy", [](v1::ContainerSpec* c) { c->set_pull_policy("never"); }, "pull_policy 'never'"},
      {"network", [](v1::ContainerSpec* c) { c->set_network("bridge"); }, "network 'bridge'"},
      {"negative shm", [](v1::ContainerSpec* c) { c->set_shm_bytes(-1); }, "shm_bytes -1"},
      {"huge shm", [](v1::ContainerSpec* c) { c->set_shm_bytes(kTiB + 1); }, "shm_bytes"},
      {"relative source", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source("data"); }, "mount 0 source"},
      {"dot-dot source", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source("/data/../etc"); },
       "not a normal absolute path"},
      {"dot source", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source("/data/./x"); }, "mount 0 source"},
      {"double slash", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source("/data//x"); }, "mount 0 source"},
      {"trailing slash", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source("/data/"); }, "mount 0 source"},
      {"empty source", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source(""); }, "source is empty"},
      {"nul source", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source(std::string("/a\0b", 4)); },
       "mount 0 source"},
      {"root source", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_source("/"); }, "whole file system"},
      {"root target", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_target("/"); }, "target is '/'"},
      {"relative target", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_target("data"); }, "mount 0 target"},
      {"proc", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_target("/proc"); }, "under /proc"},
      {"under sys", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_target("/sys/fs/cgroup"); }, "under /sys"},
      {"under dev", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_target("/dev/shm"); }, "under /dev"},
      {"long path", [](v1::ContainerSpec* c) { c->mutable_mounts(0)->set_target("/" + std::string(5000, 'a')); },
       "more than 4096"},
      {"same target twice",
       [](v1::ContainerSpec* c) {
         v1::Mount* m = c->add_mounts();
         m->set_source("/data/team-a/other");
         m->set_target("/data");
       },
       "mount 1 target '/data' is mounted twice"},
      {"too many mounts",
       [](v1::ContainerSpec* c) {
         for (int i = 0; i < kMaxMounts; ++i) {
           v1::Mount* m = c->add_mounts();
           m->set_source("/data/team-a");
           m->set_target("/m" + std::to_string(i));
         }
       },
       "33 mounts, more than 32"},
  };
  for (const BadContainer& bad : cases) {
    v1::JobSpec s = ContainerJob();
    bad.mutate(s.mutable_container());
    Status st = NormalizeJobSpec(&s);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << bad.what;
    EXPECT_NE(st.message().find(bad.message_part), std::string::npos) << bad.what << ": " << st.message();
  }
}

TEST(ContainerTest, TargetsNextToReservedOnesAndBothPoliciesPass) {
  v1::JobSpec s = ContainerJob();
  s.mutable_container()->mutable_mounts(0)->set_target("/devices");  // not /dev
  s.mutable_container()->set_pull_policy("always");
  s.mutable_container()->set_network("none");
  s.mutable_container()->set_shm_bytes(16 * kGiB);
  Status st = NormalizeJobSpec(&s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  s.mutable_container()->set_pull_policy("if-not-present");
  s.mutable_container()->set_network("host");
  EXPECT_TRUE(NormalizeJobSpec(&s).ok());
}

TEST(ContainerTest, PathsAreComparedLexically) {
  EXPECT_TRUE(IsNormalAbsolutePath("/"));
  EXPECT_TRUE(IsNormalAbsolutePath("/a/b.c/..d"));
  EXPECT_FALSE(IsNormalAbsolutePath(""));
  EXPECT_FALSE(IsNormalAbsolutePath("a"));
  EXPECT_FALSE(IsNormalAbsolutePath("//a"));
  EXPECT_FALSE(IsNormalAbsolutePath("/a/.."));
  EXPECT_FALSE(IsNormalAbsolutePath("/a/"));
  EXPECT_TRUE(PathUnder("/data", "/data"));
  EXPECT_TRUE(PathUnder("/data/x", "/data"));
  EXPECT_FALSE(PathUnder("/database", "/data"));
  EXPECT_FALSE(PathUnder("/dat", "/data"));
}

TEST(ContainerTest, MountRootsAreNormalAbsoluteAndNotTheRoot) {
  EXPECT_TRUE(ValidateMountRoot("team-a", "/data/team-a").ok());
  Status root = ValidateMountRoot("team-a", "/");
  EXPECT_EQ(root.code(), Code::kInvalidArgument);
  EXPECT_NE(root.message().find("tenant 'team-a'"), std::string::npos) << root.message();
  EXPECT_EQ(ValidateMountRoot("team-a", "data").code(), Code::kInvalidArgument);
  EXPECT_EQ(ValidateMountRoot("team-a", "/data/../etc").code(), Code::kInvalidArgument);
  EXPECT_EQ(ValidateMountRoot("team-a", "").code(), Code::kInvalidArgument);
}

TEST(ContainerTest, ImageDigests) {
  EXPECT_TRUE(IsImageDigest("sha256:" + std::string(64, 'a')));
  EXPECT_TRUE(IsImageDigest("sha512:" + std::string(128, '0')));
  EXPECT_FALSE(IsImageDigest("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(IsImageDigest("sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(IsImageDigest("md5:" + std::string(32, 'a')));
  EXPECT_FALSE(IsImageDigest(""));
}

TEST(ContainerTest, PullPolicies) {
  EXPECT_TRUE(ValidatePullPolicy("pull_policy", "").ok());
  EXPECT_TRUE(ValidatePullPolicy("pull_policy", "always").ok());
  EXPECT_TRUE(ValidatePullPolicy("pull_policy", "if-not-present").ok());
  EXPECT_EQ(ValidatePullPolicy("pull_policy", "Always").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace drover::rpc
