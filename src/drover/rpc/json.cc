#include "drover/rpc/json.h"

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <cstdlib>
#include <type_traits>

namespace drover::rpc {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void AppendString(std::string_view s, std::string* out) {
  out->push_back('"');
  size_t plain = 0;  // start of the run of characters that need no escape
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default: out->append(fmt::format("\\u{:04x}", c));
    }
  }
  out->append(s.data() + plain, s.size() - plain);
  out->push_back('"');
}

template <typename T>
void AppendInt(T v, std::string* out, bool quoted) {
  fmt::format_int text(v);
  if (quoted) out->push_back('"');
  out->append(text.data(), text.size());
  if (quoted) out->push_back('"');
}

void AppendBase64(std::string_view s, std::string* out) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out->push_back('"');
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(s[i])) << 16) | (uint32_t(uint8_t(s[i + 1])) << 8) | uint8_t(s[i + 2]);
    for (int shift : {18, 12, 6, 0}) out->push_back(kAlphabet[(v >> shift) & 63]);
  }
  if (i + 1 == s.size()) {
    uint32_t v = uint32_t(uint8_t(s[i])) << 16;
    out->append({kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], '=', '='});
  } else if (i + 2 == s.size()) {
    uint32_t v = (uint32_t(uint8_t(s[i])) << 16) | (uint32_t(uint8_t(s[i + 1])) << 8);
    out->append({kAlphabet[(v >> 18) & 63], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='});
  }
  out->push_back('"');
}

// As protobuf writes them (DoubleToBuffer, FloatToBuffer): the type's
// guaranteed digits (15, 6), or as many as a round trip needs (17, 9).
template <typename T>
void AppendFloating(T v, std::string* out) {
  if (std::isnan(v)) {
    out->append("\"NaN\"");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  } else {
    constexpr bool kFloat = std::is_same_v<T, float>;
    std::string text = fmt::format("{:.{}g}", v, kFloat ? 6 : 15);
    T back = kFloat ? std::strtof(text.c_str(), nullptr) : static_cast<T>(std::strtod(text.c_str(), nullptr));
    if (back != v) text = fmt::format("{:.{}g}", v, kFloat ? 9 : 17);
    out->append(text);
  }
}

void AppendMessage(const Message& m, std::string* out);

// One value of `f`: the field's only value (index -1) or element `index`.
void AppendValue(const Message& m, const Reflection* r, const FieldDescriptor* f, int index, std::string* out) {
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      AppendInt(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f), out, false);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      AppendInt(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f), out, false);
      break;
    case FieldDescriptor::CPPTYPE_INT64:  // 64-bit integers are strings in proto3 JSON
      AppendInt(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f), out, true);
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      AppendInt(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f), out, true);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      AppendFloating(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      AppendFloating(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->append((rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false");
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      int number = rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f);
      const auto* value = f->enum_type()->FindValueByNumber(number);
      if (value != nullptr) {
        AppendString(value->name(), out);
      } else {
        fmt::format_to(std::back_inserter(*out), "{}", number);  // unknown values stay numbers
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string scratch;
      const std::string& s =
          rep ? r->GetRepeatedStringReference(m, f, index, &scratch) : r->GetStringReference(m, f, &scratch);
      if (f->type() == FieldDescriptor::TYPE_BYTES) {
        AppendBase64(s, out);
      } else {
        AppendString(s, out);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      AppendMessage(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), out);
      break;
  }
}

// A map entry's key as a JSON object key (always a string).
void AppendMapKey(const Message& entry, std::string* out) {
  const Reflection* r = entry.GetReflection();
  const FieldDescriptor* key = entry.GetDescriptor()->map_key();
  if (key->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    std::string scratch;
    AppendString(r->GetStringReference(entry, key, &scratch), out);
    return;
  }
  std::string text;
  AppendValue(entry, r, key, -1, &text);
  if (text.front() != '"') text = "\"" + text + "\"";
  out->append(text);
}

void AppendMessage(const Message& m, std::string* out) {
  const auto* d = m.GetDescriptor();
  if (d->file()->package() == "google.protobuf") {
    // A well-known type has a JSON form of its own (a timestamp is a string).
    std::string wkt;
    google::protobuf::util::JsonPrintOptions opts;
    opts.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(m, &wkt, opts);
    out->append(wkt);
    return;
  }
  const Reflection* r = m.GetReflection();
  out->push_back('{');
  bool first = true;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      // Lists and maps are printed empty too.
    } else if (f->has_presence()) {
      if (!r->HasField(m, f)) continue;  // messages, oneof members, `optional`: only when set
    }
    if (!first) out->push_back(',');
    first = false;
    AppendString(f->json_name(), out);
    out->push_back(':');
    if (f->is_map()) {
      out->push_back('{');
      const int n = r->FieldSize(m, f);
      const FieldDescriptor* value = f->message_type()->map_value();
      for (int k = 0; k < n; ++k) {
        if (k > 0) out->push_back(',');
        const Message& entry = r->GetRepeatedMessage(m, f, k);
        AppendMapKey(entry, out);
        out->push_back(':');
        AppendValue(entry, entry.GetReflection(), value, -1, out);
      }
      out->push_back('}');
    } else if (f->is_repeated()) {
      out->push_back('[');
      const int n = r->FieldSize(m, f);
      for (int k = 0; k < n; ++k) {
        if (k > 0) out->push_back(',');
        AppendValue(m, r, f, k, out);
      }
      out->push_back(']');
    } else {
      AppendValue(m, r, f, -1, out);
    }
  }
  out->push_back('}');
}

}  // namespace

void AppendJson(const Message& m, std::string* out) { AppendMessage(m, out); }

std::string ToJson(const Message& m) {
  std::string out;
  out.reserve(static_cast<size_t>(m.ByteSizeLong()) * 3 + 64);  // JSON runs ~2-3x the wire size
  AppendMessage(m, &out);
  return out;
}

}  // namespace drover::rpc
