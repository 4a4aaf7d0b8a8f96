// Escape sequences a tenant puts in what it controls (a job's name,
// command, working directory and message, an audit entry, a node's labels
// and names, a deployment) go through every human-readable printer of the
// CLI, and no raw control byte comes out (docs/security.md, "Terminal
// output").

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "drover/cli/client.h"
#include "drover/cli/flags.h"
#include "drover/cli/job_table.h"
#include "drover/cli/node_view.h"
#include "drover/cli/printers.h"
#include "drover/cli/table.h"
#include "drover/cli/terminal.h"
#include "drover/cli/top_view.h"
#include "drover/common/quantity.h"

namespace drover::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kNow = 1'800'000'000'000'000'000;

// ESC [2J (clear the screen), OSC 52 (write the clipboard), a CR and
// backspaces (overwrite what the row showed), C1 CSI as UTF-8, a newline
// and a row of its own (a forged entry), a right-to-left override.
const std::string kEvilUtf8 =
    "x\x1b[2J\x1b]52;c;ZXZpbA==\x07\rj-000666   Succeeded\b\b\xc2\x9b"
    "31m\nFORGED   admin   default\xe2\x80\xae";
// The same with what is not UTF-8: C1 CSI as a raw byte, 0xff. (A gRPC
// answer cannot hold these in a string field; a REST one or a file can.)
const std::string kEvil = kEvilUtf8 +
                          "\x9b"
                          "2J\xff";

// Passes when `out` holds nothing a terminal acts on: no control
// character but the newlines that end lines, no DEL, nothing past ASCII
// (the printers' own text is ASCII, and so is every escape).
::testing::AssertionResult Safe(const std::string& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const auto b = static_cast<unsigned char>(out[i]);
    if ((b < 0x20 && b != '\n') || b >= 0x7f) {
      return ::testing::AssertionFailure() << "raw byte " << static_cast<int>(b) << " at " << i << " of:\n" << out;
    }
  }
  if (out.find("\nFORGED") != std::string::npos) return ::testing::AssertionFailure() << "a forged line in:\n" << out;
  return ::testing::AssertionSuccess();
}

v1::Job EvilJob(const std::string& evil) {
  v1::Job j;
  j.set_id("j-000001");
  v1::JobSpec* spec = j.mutable_spec();
  spec->set_name(evil);
  spec->set_tenant("team-a");
  spec->set_gpus(1);
  spec->add_command("sh");
  spec->add_command("-c");
  spec->add_command(evil);
  spec->set_working_dir("/tmp/" + evil);
  spec->set_gpu_model(evil);
  (*spec->mutable_node_selector())[evil] = evil;
  spec->set_topology(evil);
  v1::JobStatus* st = j.mutable_status();
  st->set_state(v1::JOB_STATE_FAILED);
  st->set_submit_time_unix_nanos(kNow - 5'000'000'000);
  st->set_message(evil);
  st->set_failure(evil);
  st->mutable_allocation()->set_node(evil);
  st->mutable_allocation()->add_gpu_indices(0);
  v1::Attempt* a = st->add_attempts();
  a->set_number(1);
  a->add_nodes(evil);
  a->set_outcome(evil);
  return j;
}

TEST(PrintersTest, JobsTableAndWide) {
  v1::ListJobsResponse resp;
  *resp.add_jobs() = EvilJob("evil");
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(resp, &json, o).ok());
  // The answer as the CLI parsed it, with bytes no encoder would send.
  auto list = nlohmann::ordered_json::parse(json);
  auto& job = list["jobs"][0];
  job["spec"]["name"] = kEvil;
  job["spec"]["tenant"] = kEvil;
  job["spec"]["command"] = {"sh", "-c", kEvil};
  job["status"]["message"] = kEvil;
  job["status"]["allocation"]["node"] = kEvil;
  list["nextPageToken"] = kEvil;
  for (bool wide : {false, true}) {
    std::ostringstream out, err;
    PrintJobList(list, JobsArgs{}, wide, kNow, out, err);
    EXPECT_TRUE(Safe(out.str())) << "wide " << wide;
    EXPECT_TRUE(Safe(err.str())) << "wide " << wide;
    EXPECT_THAT(out.str(), HasSubstr("x\\x1b[2J\\x1b]52;c;ZXZpbA==\\a\\rj-000666"));
  }
}

TEST(PrintersTest, DescribeJob) {
  std::ostringstream out;
  DescribeJob(EvilJob(kEvil), kNow, out);
  EXPECT_TRUE(Safe(out.str()));
  EXPECT_THAT(out.str(), HasSubstr("Command:      sh -c x\\x1b[2J\\x1b]52;c;ZXZpbA==\\a\\rj-000666   Succeeded\\b\\b"
                                   "\\u009b31m\\nFORGED   admin   default\\u202e\\x9b2J\\xff\n"));
  EXPECT_THAT(out.str(), HasSubstr("Workdir:      /tmp/x\\x1b[2J"));
}

TEST(PrintersTest, DescribeJobShowsItsImageDigestAndPull) {
  v1::Job job;
  job.set_id("j-000001");
  job.mutable_spec()->set_gpus(1);
  v1::ContainerSpec* c = job.mutable_spec()->mutable_container();
  c->set_image("busybox");
  c->set_pull_policy("always");
  c->set_network("none");
  c->set_shm_bytes(kGiB);
  v1::Mount* m = c->add_mounts();
  m->set_source("/data/a");
  m->set_target("/data");
  m->set_read_only(true);
  job.mutable_status()->set_state(v1::JOB_STATE_BOUND);
  job.mutable_status()->set_image_digest("sha256:abc");
  job.mutable_status()->set_image_pull("pulling docker.io/library/busybox:latest: 1 MB of 2 MB");
  std::ostringstream out;
  DescribeJob(job, kNow, out);
  EXPECT_THAT(out.str(), HasSubstr("Image:        busybox (pull always)\n"));
  EXPECT_THAT(out.str(), HasSubstr("Digest:       sha256:abc\n"));
  EXPECT_THAT(out.str(), HasSubstr("Pull:         pulling docker.io/library/busybox:latest: 1 MB of 2 MB\n"));
  EXPECT_THAT(out.str(), HasSubstr("Container:    network none, /dev/shm 1GiB\n"));
  EXPECT_THAT(out.str(), HasSubstr("Mount:        /data/a -> /data (ro)\n"));
  EXPECT_THAT(out.str(), HasSubstr("Command:      (the image's)\n"));
}

TEST(PrintersTest, AuditTable) {
  v1::ListAuditResponse resp;
  v1::AuditEntry* e = resp.add_entries();
  e->set_seq(7);
  e->set_who(kEvil);
  e->set_tenant("team-a");
  e->set_role("user");
  e->set_action("SubmitJob");
  e->set_target(kEvil);
  e->set_result(kEvil);
  e->set_source(kEvil);
  std::ostringstream out;
  PrintAuditTable(resp, out);
  const std::string text = out.str();
  EXPECT_TRUE(Safe(text));
  // One header and one row: the entry's newline forged none.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

v1::ListNodesResponse EvilNodes(const std::string& evil) {
  v1::ListNodesResponse resp;
  v1::Node* n = resp.add_nodes();
  n->set_name(evil);
  n->set_state(v1::NODE_STATE_READY);
  n->set_agent_version(evil);
  (*n->mutable_labels())["rack"] = evil;
  (*n->mutable_labels())[evil] = "1";
  v1::NodeCondition* c = n->add_conditions();
  c->set_type("GpusHealthy");
  c->set_status(false);
  c->set_message(evil);
  v1::Gpu* g = n->add_gpus();
  g->set_index(0);
  g->set_vendor(evil);
  g->set_model(evil);
  g->set_uuid(evil);
  g->set_job_id(evil);
  g->set_tenant(evil);
  g->set_pci_bus_id(evil);
  g->set_health(v1::GPU_HEALTH_UNHEALTHY);
  g->set_health_reason(evil);
  g->mutable_telemetry()->add_throttle_reasons(evil);
  return resp;
}

TEST(PrintersTest, NodesGpusAndTop) {
  v1::ListNodesResponse nodes = EvilNodes(kEvil);
  for (bool wide : {false, true}) {
    std::ostringstream n, g;
    PrintNodeTable(nodes, wide, kNow, n);
    PrintGpuTable(nodes, wide, g);
    EXPECT_TRUE(Safe(n.str())) << "wide " << wide;
    EXPECT_TRUE(Safe(g.str())) << "wide " << wide;
  }
  std::ostringstream wide_nodes;
  PrintNodeTable(nodes, true, kNow, wide_nodes);
  EXPECT_THAT(wide_nodes.str(), HasSubstr("rack=x\\x1b[2J"));  // the label, escaped

  TopSnapshot s;
  s.nodes = nodes;
  s.error = kEvil;
  TopFrameOptions o;
  o.addr = "127.0.0.1:7070";
  EXPECT_TRUE(Safe(RenderTop(s, o)));
}

TEST(PrintersTest, DescribeDeployment) {
  v1::Deployment d;
  d.mutable_spec()->set_name(kEvil);
  d.mutable_spec()->set_tenant(kEvil);
  d.mutable_spec()->set_model(kEvil);
  d.mutable_spec()->set_engine(kEvil);
  d.mutable_status()->set_message(kEvil);
  v1::DeploymentReplica* r = d.mutable_status()->add_replicas();
  r->set_job_id(kEvil);
  r->set_node(kEvil);
  r->set_endpoint(kEvil);
  r->set_reason(kEvil);
  std::ostringstream out;
  DescribeDeployment(d, out);
  EXPECT_TRUE(Safe(out.str()));
}

TEST(PrintersTest, AnyTable) {
  Table t({"NAME", kEvil});
  t.AddRow({kEvil, kEvil});
  std::ostringstream out;
  t.Print(out);
  EXPECT_TRUE(Safe(out.str()));
}

// -o json: the encoder escapes C0; C1 and the bidirectional controls,
// which JSON allows raw, are escaped too; the document parses the same.
TEST(PrintersTest, JsonOutput) {
  v1::Job job = EvilJob(kEvilUtf8);
  std::string json = Json(job);
  EXPECT_TRUE(Safe(json));
  v1::Job back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.spec().command(2), kEvilUtf8);
}

// What `error:` prints: the server's message quotes what tenants wrote.
TEST(PrintersTest, ErrorMessages) {
  std::ostringstream err;
  std::streambuf* saved = std::cerr.rdbuf(err.rdbuf());
  Common c;
  int code = Fail(Code::kNotFound, "job '" + kEvil + "' not found", c);
  int usage = Usage("bad value '" + kEvil + "'");
  std::cerr.rdbuf(saved);
  EXPECT_EQ(code, kExitNotFound);
  EXPECT_EQ(usage, kExitUsage);
  EXPECT_TRUE(Safe(err.str()));
  EXPECT_THAT(err.str(), HasSubstr("error: job 'x\\x1b[2J"));
  EXPECT_THAT(err.str(), Not(HasSubstr("\x1b")));
}

}  // namespace
}  // namespace drover::cli
