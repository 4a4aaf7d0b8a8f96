#include "drover/common/image_ref.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace drover {
namespace {

std::string Normal(const std::string& text) {
  auto r = ParseImageRef(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? r->String() : "";
}

TEST(ImageRef, IsNormalisedAsDockerDoes) {
  const std::string sha = "sha256:" + std::string(64, 'a');
  EXPECT_EQ(Normal("busybox"), "docker.io/library/busybox:latest");
  EXPECT_EQ(Normal("busybox:1.36"), "docker.io/library/busybox:1.36");
  EXPECT_EQ(Normal("vllm/vllm-openai:v0.6.3"), "docker.io/vllm/vllm-openai:v0.6.3");
  EXPECT_EQ(Normal("index.docker.io/library/ubuntu"), "docker.io/library/ubuntu:latest");
  EXPECT_EQ(Normal("nvcr.io/nvidia/pytorch:24.01-py3"), "nvcr.io/nvidia/pytorch:24.01-py3");
  EXPECT_EQ(Normal("127.0.0.1:5000/tiny"), "127.0.0.1:5000/tiny:latest");
  EXPECT_EQ(Normal("localhost/tiny:v1"), "localhost/tiny:v1");
  EXPECT_EQ(Normal("[::1]:5000/team/model:q4_k_m"), "[::1]:5000/team/model:q4_k_m");
  EXPECT_EQ(Normal("Registry.Example.com/a/b"), "Registry.Example.com/a/b:latest");  // a host name's case is its own
  EXPECT_EQ(Normal("a/b__c/d-e.f---g"), "docker.io/a/b__c/d-e.f---g:latest");
  // A digest alone pins the bits and has no tag; with both, the digest rules.
  EXPECT_EQ(Normal("tiny@" + sha), "docker.io/library/tiny@" + sha);
  EXPECT_EQ(Normal("127.0.0.1:5000/tiny:v1@" + sha), "127.0.0.1:5000/tiny:v1@" + sha);
  // One component with a ':' is a name and a tag (as docker reads it), not a registry.
  EXPECT_EQ(Normal("localhost:5000"), "docker.io/library/localhost:5000");

  auto r = ParseImageRef("127.0.0.1:5000/team/tiny:v2");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->registry, "127.0.0.1:5000");
  EXPECT_EQ(r->repository, "team/tiny");
  EXPECT_EQ(r->tag, "v2");
  EXPECT_EQ(r->digest, "");
  EXPECT_EQ(r->Name(), "127.0.0.1:5000/team/tiny");
}

TEST(ImageRef, WhatARegistryWouldRefuseIsRefusedWithWhy) {
  struct Case {
    std::string text;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"", "empty"},
      {"Busybox", "lower-case"},
      {"a//b", "empty path component"},
      {"a/", "empty path component"},
      {"/a", "empty path component"},
      {"a/-b", "repository component '-b'"},
      {"a/b.", "repository component 'b.'"},
      {"a/b...c", "repository component 'b...c'"},
      {"a/b___c", "repository component 'b___c'"},
      {"x:y:z", "repository component 'x:y'"},
      {"tiny:", "tag ''"},
      {"tiny:.v1", "tag '.v1'"},
      {"tiny:" + std::string(129, 'v'), "tag"},
      {"tiny:v1 ", "space"},
      {"tiny\x1b[2J", "control"},
      {"caf\xc3\xa9", "non-ASCII"},
      {"tiny@sha256:abc", "64 hex digits, not 3"},
      {"tiny@md5:" + std::string(32, 'a'), "sha256:<64 hex digits>"},
      {"tiny@sha256:" + std::string(64, 'A'), "lower-case a-f"},
      {"tiny@", "sha256:<64 hex digits>"},
      {"a@sha256:" + std::string(64, 'a') + "@x", "hex digits"},
      {"bad_host.example.com/x", "registry 'bad_host.example.com'"},
      {"host:99999/x", "registry 'host:99999'"},
      {"host:/x", "registry 'host:'"},
      {"[zz]:5000/x", "registry '[zz]:5000'"},
      {":tag", "no repository name"},
      {std::string(256, 'a'), "more than 255"},
      {std::string(600, 'a'), "more than 520"},
      {std::string(250, 'a'), "more than 255"},  // docker.io/library/ makes it longer
  };
  for (const Case& c : cases) {
    auto r = ParseImageRef(c.text);
    ASSERT_FALSE(r.ok()) << "accepted: " << c.text << " as " << r->String();
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.why), std::string::npos) << c.text << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace drover
