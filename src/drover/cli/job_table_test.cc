#include "drover/cli/job_table.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <sstream>

#include "drover/v1/api.pb.h"

namespace drover::cli {
namespace {

constexpr int64_t kNow = 1'800'000'000'000'000'000;

// A ListJobsResponse as the server's JSON (the REST body, and what the gRPC
// verb converts its answer to): built as a proto, so the field names and
// encodings are the real ones.
nlohmann::ordered_json ListJson(const v1::ListJobsResponse& resp) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(resp, &out, o).ok());
  return nlohmann::ordered_json::parse(out);
}

v1::Job* AddJob(v1::ListJobsResponse* resp, const std::string& id, v1::JobState state, int64_t age_s) {
  v1::Job* j = resp->add_jobs();
  j->set_id(id);
  j->mutable_spec()->set_tenant("team-a");
  j->mutable_spec()->set_gpus(1);
  j->mutable_spec()->add_command("sleep");
  j->mutable_spec()->add_command("5");
  j->mutable_status()->set_state(state);
  j->mutable_status()->set_submit_time_unix_nanos(kNow - age_s * 1'000'000'000);
  return j;
}

std::pair<std::string, std::string> Print(const v1::ListJobsResponse& resp, const JobsArgs& a, bool wide) {
  std::ostringstream out, err;
  PrintJobList(ListJson(resp), a, wide, kNow, out, err);
  return {out.str(), err.str()};
}

// The table's state order is the enum's: a new state in the proto must be
// added to JobStateNames too.
TEST(JobTableTest, StateNamesFollowTheEnum) {
  const auto* e = v1::JobState_descriptor();
  ASSERT_EQ(JobStateNames().size(), static_cast<size_t>(e->value_count()));
  for (int i = 0; i < e->value_count(); ++i) {
    EXPECT_EQ(JobStateNames()[static_cast<size_t>(e->value(i)->number())], e->value(i)->name());
  }
  EXPECT_EQ(StateDisplay("JOB_STATE_CANCELLING"), "Cancelling");
  EXPECT_EQ(StateDisplay(""), "Unknown");
}

TEST(JobTableTest, ArraysAreOneRowAndOtherJobsFollow) {
  v1::ListJobsResponse resp;
  for (int i = 0; i < 3; ++i) {
    v1::Job* t =
        AddJob(&resp, "j-00001" + std::to_string(i), i == 0 ? v1::JOB_STATE_FAILED : v1::JOB_STATE_RUNNING, 30);
    t->mutable_array()->set_array_id("a-000010");
    t->mutable_array()->set_index(i + 1);
    t->mutable_array()->set_tasks(3);
    t->mutable_array()->set_max_running(2);
  }
  v1::Job* share = AddJob(&resp, "j-000020", v1::JOB_STATE_PENDING, 7200);
  share->mutable_spec()->set_gpu_milli(250);
  share->mutable_spec()->set_name("tiny");
  v1::Job* gang = AddJob(&resp, "j-000021", v1::JOB_STATE_SUCCEEDED, 5);
  gang->mutable_spec()->set_replicas(4);
  gang->mutable_spec()->set_gpus(8);
  gang->mutable_status()->mutable_allocation()->set_node("n1");
  resp.set_next_page_token("21");

  auto [out, err] = Print(resp, JobsArgs{}, false);
  EXPECT_EQ(out,
            "ARRAY      NAME     TENANT   TASKS    GPUS   STATES                AGE\n"
            "a-000010   <none>   team-a   3 (%2)   1      2 Running, 1 Failed   30s\n"
            "\n"
            "ID         NAME     TENANT   STATE       GPUS   NODE     AGE\n"
            "j-000020   tiny     team-a   Pending     0.25   <none>   2h\n"
            "j-000021   <none>   team-a   Succeeded   4x8    n1       5s\n");
  EXPECT_EQ(err, "More jobs: add --page-token 21 for the next page, or --all for every page.\n");

  JobsArgs expand;
  expand.expand = true;
  auto [all, _] = Print(resp, expand, false);
  EXPECT_NE(all.find("j-000011   <none>   team-a   Running"), std::string::npos) << all;
  EXPECT_EQ(all.find("ARRAY"), std::string::npos) << all;
}

TEST(JobTableTest, WideAddsWhereHowItEndedAndWhatItRan) {
  v1::ListJobsResponse resp;
  v1::Job* j = AddJob(&resp, "j-000001", v1::JOB_STATE_FAILED, 1);
  j->mutable_status()->set_signal(9);
  j->mutable_status()->mutable_allocation()->add_gpu_indices(2);
  j->mutable_status()->mutable_allocation()->add_gpu_indices(3);
  j->mutable_status()->set_message(std::string(100, 'm'));
  AddJob(&resp, "j-000002", v1::JOB_STATE_RUNNING, 1);
  auto [out, err] = Print(resp, JobsArgs{}, true);
  EXPECT_NE(out.find("2,3       signal 9   sleep 5   " + std::string(77, 'm') + "...\n"), std::string::npos) << out;
  EXPECT_NE(out.find("<none>    <none>     sleep 5\n"), std::string::npos) << out;
  EXPECT_TRUE(err.empty()) << err;
}

TEST(JobTableTest, NothingToListAndDocumentsOfAnotherShape) {
  std::ostringstream out, err;
  PrintJobList(ListJson(v1::ListJobsResponse()), JobsArgs{}, false, kNow, out, err);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(), "No jobs found.\n");
  EXPECT_THROW(PrintJobList(nlohmann::ordered_json::parse(R"({"jobs": 7})"), JobsArgs{}, false, kNow, out, err),
               nlohmann::json::exception);
  EXPECT_THROW(PrintJobList(nlohmann::ordered_json::parse(R"({"jobs": [{"status": {"submitTimeUnixNanos": "x"}}]})"),
                            JobsArgs{}, false, kNow, out, err),
               nlohmann::json::exception);
}

TEST(JobTableTest, EndedWithinIsAnEarliestEndTime) {
  JobsArgs a;
  EXPECT_EQ(EndedAfter(a, kNow).value(), 0);
  a.ended_within = "2h";
  EXPECT_EQ(EndedAfter(a, kNow).value(), kNow - 7200LL * 1'000'000'000);
  a.ended_within = "soon";
  EXPECT_EQ(EndedAfter(a, kNow).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace drover::cli
