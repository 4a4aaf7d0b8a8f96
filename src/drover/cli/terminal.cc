#include "drover/cli/terminal.h"

#include <fmt/format.h>

namespace drover::cli {
namespace {

enum class Keep {
  kNothing,  // one line
  kLog,      // '\n', '\t' and '\r'
};

// The UTF-8 sequence at s[i]: its length, with its code point in `cp`; 0
// when the bytes there are not valid UTF-8 (a stray continuation byte, a
// lead that cannot start one, a bad continuation, an overlong form, a
// surrogate, past U+10FFFF); -1 when valid so far but cut by the end of `s`.
int Decode(std::string_view s, size_t i, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len = 0;
  char32_t c = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // what the second byte may be
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + static_cast<size_t>(k) >= s.size()) return -1;
    const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if (b < lo || b > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

// The code points beyond C0 that change what a terminal shows rather than
// showing something: C1 controls, bidirectional marks, embeddings,
// overrides and isolates, line and paragraph separators.
bool IsControl(char32_t c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0x061C || c == 0x200E || c == 0x200F || (c >= 0x2028 && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069);
}

void AppendC0(unsigned char b, std::string* out) {
  switch (b) {
    case '\a': *out += "\\a"; break;
    case '\b': *out += "\\b"; break;
    case '\t': *out += "\\t"; break;
    case '\n': *out += "\\n"; break;
    case '\v': *out += "\\v"; break;
    case '\f': *out += "\\f"; break;
    case '\r': *out += "\\r"; break;
    default: *out += fmt::format("\\x{:02x}", b);
  }
}

// Appends `s` escaped to `out`. With `hold`, a UTF-8 sequence that the end
// of `s` cuts goes there instead (the next chunk completes it).
void Escape(std::string_view s, Keep keep, std::string* out, std::string* hold = nullptr) {
  out->reserve(out->size() + s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      bool kept = (b >= 0x20 && b != 0x7f) || (keep == Keep::kLog && (b == '\n' || b == '\t' || b == '\r'));
      if (kept) {
        out->push_back(static_cast<char>(b));
      } else {
        AppendC0(b, out);
      }
      ++i;
      continue;
    }
    char32_t cp = 0;
    const int n = Decode(s, i, &cp);
    if (n < 0 && hold != nullptr) {
      hold->assign(s.substr(i));
      return;
    }
    if (n <= 0) {
      *out += fmt::format("\\x{:02x}", b);
      ++i;
      continue;
    }
    if (IsControl(cp)) {
      *out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      out->append(s.substr(i, static_cast<size_t>(n)));
    }
    i += static_cast<size_t>(n);
  }
}

}  // namespace

std::string EscapeTerminal(std::string_view s) {
  std::string out;
  Escape(s, Keep::kNothing, &out);
  return out;
}

std::string LogEscaper::Feed(std::string_view chunk) {
  std::string data = std::move(held_);
  held_.clear();
  data.append(chunk);
  std::string out;
  Escape(data, Keep::kLog, &out, &held_);
  return out;
}

std::string LogEscaper::Finish() {
  std::string out;
  Escape(held_, Keep::kLog, &out);
  held_.clear();
  return out;
}

std::string EscapeJsonForTerminal(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size();) {
    const auto b = static_cast<unsigned char>(json[i]);
    if (b < 0x80) {
      if (b == 0x7f) {
        out += "\\u007f";
      } else {
        out.push_back(static_cast<char>(b));
      }
      ++i;
      continue;
    }
    // Past ASCII only inside strings (JSON's own syntax is ASCII): a \u
    // escape there means the same character; a byte that is not UTF-8
    // becomes U+FFFD, as a decoder would read it.
    char32_t cp = 0;
    const int n = Decode(json, i, &cp);
    if (n <= 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (IsControl(cp)) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      out.append(json.substr(i, static_cast<size_t>(n)));
    }
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string Cut(const std::string& s, size_t max) {
  if (max == 0 || s.size() <= max) return s;
  const bool dots = max > 3;
  size_t end = dots ? max - 3 : max;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;  // not inside a sequence
  return s.substr(0, end) + (dots ? "..." : "");
}

}  // namespace drover::cli
