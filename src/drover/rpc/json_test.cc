#include "drover/rpc/json.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "drover/common/json_depth.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"

namespace drover::rpc {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

std::string Reference(const Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &out, opts).ok());
  return out;
}

// Every message of the API, nested ones included.
void Collect(const Descriptor* d, std::vector<const Descriptor*>* out) {
  if (d->options().map_entry()) return;
  out->push_back(d);
  for (int i = 0; i < d->nested_type_count(); ++i) Collect(d->nested_type(i), out);
}

std::vector<const Descriptor*> AllMessages() {
  std::vector<const Descriptor*> out;
  for (const auto* file : {v1::Job::descriptor()->file(), v1::SubmitJobRequest::descriptor()->file(),
                           v1::AgentMessage::descriptor()->file()}) {
    for (int i = 0; i < file->message_type_count(); ++i) Collect(file->message_type(i), &out);
  }
  return out;
}

// Fills `m` with values that exercise the JSON mapping: extreme integers,
// awkward strings, bytes of every length mod 3, unknown enum numbers,
// non-finite doubles; each field set or left unset at random.
class Filler {
 public:
  explicit Filler(uint32_t seed) : rng_(seed) {}

  void Fill(Message* m, int depth) {
    const auto* d = m->GetDescriptor();
    const auto* r = m->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      if (Coin(3)) continue;  // left unset
      if (f->is_map()) {
        int n = static_cast<int>(rng_() % 3);
        for (int k = 0; k < n; ++k) {
          Message* entry = r->AddMessage(m, f);
          SetOne(entry, entry->GetDescriptor()->map_key(), depth);
          SetOne(entry, entry->GetDescriptor()->map_value(), depth);
        }
      } else if (f->is_repeated()) {
        int n = static_cast<int>(rng_() % 3);
        for (int k = 0; k < n; ++k) Add(m, f, depth);
      } else {
        SetOne(m, f, depth);
      }
    }
  }

 private:
  bool Coin(int one_in) { return rng_() % static_cast<uint32_t>(one_in) == 0; }

  std::string Text() {
    static const std::vector<std::string> kTexts = {
        "", "plain", "quote \" and \\ back", "tab\tnew\nline\r", "\x01\x1f ctl", "ünïcødé ✓", "</script>", "a\0b"};
    return kTexts[rng_() % kTexts.size()];
  }
  int64_t Int64() {
    static const std::vector<int64_t> kInts = {0,
                                               1,
                                               -1,
                                               42,
                                               std::numeric_limits<int64_t>::max(),
                                               std::numeric_limits<int64_t>::min(),
                                               1'795'624'155'451'532'826};
    return kInts[rng_() % kInts.size()];
  }
  double Double() {
    static const std::vector<double> kDoubles = {0.0,
                                                 1.0,
                                                 -2.5,
                                                 0.1,
                                                 1e20,
                                                 1e-7,
                                                 123456.789,
                                                 3.0e300,
                                                 std::numeric_limits<double>::quiet_NaN(),
                                                 std::numeric_limits<double>::infinity(),
                                                 -std::numeric_limits<double>::infinity()};
    return kDoubles[rng_() % kDoubles.size()];
  }
  int EnumNumber(const FieldDescriptor* f) {
    if (Coin(5)) return 77;  // no such value: printed as a number
    const auto* e = f->enum_type();
    return e->value(static_cast<int>(rng_() % static_cast<uint32_t>(e->value_count())))->number();
  }

  void SetOne(Message* m, const FieldDescriptor* f, int depth) {
    const auto* r = m->GetReflection();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: r->SetInt32(m, f, static_cast<int32_t>(Int64())); break;
      case FieldDescriptor::CPPTYPE_UINT32: r->SetUInt32(m, f, static_cast<uint32_t>(Int64())); break;
      case FieldDescriptor::CPPTYPE_INT64: r->SetInt64(m, f, Int64()); break;
      case FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(m, f, static_cast<uint64_t>(Int64())); break;
      case FieldDescriptor::CPPTYPE_DOUBLE: r->SetDouble(m, f, Double()); break;
      case FieldDescriptor::CPPTYPE_FLOAT: r->SetFloat(m, f, static_cast<float>(Double())); break;
      case FieldDescriptor::CPPTYPE_BOOL: r->SetBool(m, f, Coin(2)); break;
      case FieldDescriptor::CPPTYPE_ENUM: r->SetEnumValue(m, f, EnumNumber(f)); break;
      case FieldDescriptor::CPPTYPE_STRING:
        r->SetString(m, f, f->type() == FieldDescriptor::TYPE_BYTES ? std::string(rng_() % 7, '\xfe') : Text());
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (depth < 4) Fill(r->MutableMessage(m, f), depth + 1);
        break;
    }
  }
  void Add(Message* m, const FieldDescriptor* f, int depth) {
    const auto* r = m->GetReflection();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: r->AddInt32(m, f, static_cast<int32_t>(Int64())); break;
      case FieldDescriptor::CPPTYPE_UINT32: r->AddUInt32(m, f, static_cast<uint32_t>(Int64())); break;
      case FieldDescriptor::CPPTYPE_INT64: r->AddInt64(m, f, Int64()); break;
      case FieldDescriptor::CPPTYPE_UINT64: r->AddUInt64(m, f, static_cast<uint64_t>(Int64())); break;
      case FieldDescriptor::CPPTYPE_DOUBLE: r->AddDouble(m, f, Double()); break;
      case FieldDescriptor::CPPTYPE_FLOAT: r->AddFloat(m, f, static_cast<float>(Double())); break;
      case FieldDescriptor::CPPTYPE_BOOL: r->AddBool(m, f, Coin(2)); break;
      case FieldDescriptor::CPPTYPE_ENUM: r->AddEnumValue(m, f, EnumNumber(f)); break;
      case FieldDescriptor::CPPTYPE_STRING:
        r->AddString(m, f, f->type() == FieldDescriptor::TYPE_BYTES ? std::string(rng_() % 7, '\x03') : Text());
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        Message* child = r->AddMessage(m, f);
        if (depth < 4) Fill(child, depth + 1);
        break;
      }
    }
  }

  std::mt19937 rng_;
};

// The same JSON value as protobuf's own printer, for every message of the
// API: empty, and filled at random (many seeds).
TEST(JsonTest, AgreesWithProtobufOnEveryMessageOfTheApi) {
  auto messages = AllMessages();
  ASSERT_GT(messages.size(), 50u);
  int compared = 0;
  for (const Descriptor* d : messages) {
    std::unique_ptr<Message> m(google::protobuf::MessageFactory::generated_factory()->GetPrototype(d)->New());
    for (uint32_t seed = 0; seed < 40; ++seed) {
      if (seed > 0) {
        m->Clear();
        Filler(seed * 7919 + static_cast<uint32_t>(d->index())).Fill(m.get(), 0);
      }
      std::string ours = ToJson(*m);
      auto parsed = nlohmann::json::parse(ours, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(parsed.is_discarded()) << d->full_name() << ": not JSON: " << ours;
      ASSERT_EQ(parsed, nlohmann::json::parse(Reference(*m)))
          << d->full_name() << " seed " << seed << "\nours:   " << ours << "\nproto:  " << Reference(*m);
      ++compared;
    }
  }
  EXPECT_EQ(compared, static_cast<int>(messages.size()) * 40);
}

TEST(JsonTest, ReadsBackIntoTheSameMessage) {
  v1::Job job;
  job.set_id("j-000001");
  job.mutable_spec()->add_command("sh");
  job.mutable_spec()->add_command("-c");
  job.mutable_spec()->add_command("echo \"hi\"\n");
  (*job.mutable_spec()->mutable_env())["A"] = "1=2";
  job.mutable_status()->set_state(v1::JOB_STATE_FAILED);
  job.mutable_status()->set_submit_time_unix_nanos(1'795'624'155'451'532'826);
  v1::Job back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ToJson(job), &back).ok());
  EXPECT_EQ(back.SerializeAsString(), job.SerializeAsString());
  EXPECT_NE(ToJson(job).find(R"("submitTimeUnixNanos":"1795624155451532826")"), std::string::npos) << ToJson(job);
  EXPECT_NE(ToJson(job).find(R"("exitCode":0)"), std::string::npos) << ToJson(job);  // defaults are printed
}

TEST(JsonDepthTest, RefusesNestingDeeperThanTheLimitAndCountsNothingInStrings) {
  EXPECT_TRUE(CheckJsonDepth(R"({"spec": {"command": ["sleep", "1"], "env": {"A": "B"}}})").ok());
  EXPECT_TRUE(CheckJsonDepth("").ok());
  EXPECT_TRUE(CheckJsonDepth(std::string(64, '[') + std::string(64, ']')).ok());
  Status deep = CheckJsonDepth(std::string(65, '[') + std::string(65, ']'));
  EXPECT_EQ(deep.code(), Code::kInvalidArgument);
  EXPECT_NE(deep.message().find("deeper than 64 levels"), std::string::npos) << deep.message();
  // A million unbalanced brackets: refused at the 65th, never counted further.
  EXPECT_EQ(CheckJsonDepth(std::string(1 << 20, '[')).code(), Code::kInvalidArgument);
  EXPECT_EQ(CheckJsonDepth(std::string(1 << 20, '{'), 3).code(), Code::kInvalidArgument);
  // Brackets inside strings are text, escaped quotes do not end a string.
  std::string in_string = "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  EXPECT_TRUE(CheckJsonDepth(in_string).ok());
  EXPECT_TRUE(CheckJsonDepth(R"(["\\", [[]]])", 3).ok());
  EXPECT_EQ(CheckJsonDepth(R"(["\\", [[[]]]])", 3).code(), Code::kInvalidArgument);
  // Closers beyond the openers (invalid JSON, the parser's to refuse) do not
  // buy depth for later.
  EXPECT_EQ(CheckJsonDepth("]]]]" + std::string(5, '['), 4).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace drover::rpc
