#include "drover/sim/csv_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace drover::sim::detail {

std::string BaseName(std::string_view path) {
  size_t slash = path.find_last_of('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}
std::string Stem(std::string_view path) {
  std::string base = BaseName(path);
  size_t dot = base.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- CSV ----

Result<Csv> Csv::Read(const std::string& path, std::vector<std::string> headerless) {
  DROVER_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  Csv csv;
  csv.file_ = BaseName(path);
  csv.header_ = std::move(headerless);
  bool want_header = csv.header_.empty();
  int line = 1;
  int blank_line = 0;  // the first blank line seen, 0 = none
  size_t i = 0;
  while (i < text.size()) {
    Row row{line, {}};
    std::string field;
    bool quoted = false;
    for (;;) {
      auto col = static_cast<int>(row.fields.size());
      field.clear();
      quoted = i < text.size() && text[i] == '"';
      if (quoted) {
        ++i;
        while (true) {
          if (i >= text.size()) return csv.At(row.line, col, "a quoted field is not closed");
          char c = text[i++];
          if (c == '"') {
            if (i < text.size() && text[i] == '"') {
              field += '"';
              ++i;
              continue;
            }
            break;
          }
          if (c == '\n') ++line;
          field += c;
        }
      } else {
        while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
          if (text[i] == '"') return csv.At(line, col, "a quote inside an unquoted field");
          field += text[i++];
        }
      }
      row.fields.push_back(field);
      if (i >= text.size()) break;
      if (text[i] == ',') {
        ++i;
        continue;
      }
      if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (text[i] != '\n') {
        return csv.At(line, col, quoted ? "text after a closing quote" : "a stray carriage return");
      }
      ++i;
      ++line;
      break;
    }
    if (row.fields.size() == 1 && row.fields[0].empty() && !quoted) {
      if (blank_line == 0) blank_line = row.line;
      continue;
    }
    if (blank_line != 0) {
      return InvalidArgument(fmt::format("{}:{}: blank line inside the file", csv.file_, blank_line));
    }
    if (want_header) {
      DROVER_RETURN_IF_ERROR(csv.SetHeader(row));
      want_header = false;
      continue;
    }
    if (row.fields.size() != csv.header_.size()) {
      return InvalidArgument(fmt::format("{}:{}: row has {} fields, the header has {} ({})", csv.file_, row.line,
                                         row.fields.size(), csv.header_.size(), fmt::join(csv.header_, ",")));
    }
    csv.rows_.push_back(std::move(row));
  }
  if (want_header) return InvalidArgument(fmt::format("{}: the file is empty (no header line)", csv.file_));
  return csv;
}

int Csv::Col(std::string_view name) const {
  auto it = std::find(header_.begin(), header_.end(), name);
  return it == header_.end() ? -1 : static_cast<int>(it - header_.begin());
}

Status Csv::Expect(const std::vector<std::string_view>& required, const std::vector<std::string_view>& optional) const {
  for (const auto& name : header_) {
    if (std::find(required.begin(), required.end(), name) == required.end() &&
        std::find(optional.begin(), optional.end(), name) == optional.end()) {
      return InvalidArgument(fmt::format("{}:1: unknown column '{}' (expected {}{}{})", file_, name,
                                         fmt::join(required, ","), optional.empty() ? "" : ", optional ",
                                         fmt::join(optional, ",")));
    }
  }
  for (auto name : required) {
    if (!Has(name)) {
      return InvalidArgument(
          fmt::format("{}:1: missing column '{}' (expected {})", file_, name, fmt::join(required, ",")));
    }
  }
  if (rows_.empty()) return InvalidArgument(fmt::format("{}: no rows after the header", file_));
  return Status::Ok();
}

Status Csv::Bad(size_t row, int col, std::string_view what) const {
  return InvalidArgument(fmt::format("{}:{}: column '{}': '{}' {}", file_, rows_[row].line,
                                     header_[static_cast<size_t>(col)], Get(row, col), what));
}

Result<int64_t> Csv::Int(size_t row, int col, int64_t lo, int64_t hi) const {
  std::string_view s = Get(row, col);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return Bad(row, col, "is not an integer");
  if (v < lo || v > hi) return Bad(row, col, fmt::format("is outside {}..{}", lo, hi));
  return v;
}

Result<double> Csv::Real(size_t row, int col, double lo, double hi) const {
  std::string_view s = Get(row, col);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    return Bad(row, col, "is not a number");
  }
  if (v < lo || v > hi) return Bad(row, col, fmt::format("is outside {}..{}", lo, hi));
  return v;
}

Status Csv::At(int line, int col, std::string_view what) const {
  const auto c = static_cast<size_t>(col);
  std::string name = c < header_.size() ? fmt::format("'{}'", header_[c]) : std::to_string(col + 1);
  return InvalidArgument(fmt::format("{}:{}: column {}: {}", file_, line, name, what));
}

Status Csv::SetHeader(const Row& row) {
  std::set<std::string> seen;
  for (const auto& name : row.fields) {
    if (name.empty()) return InvalidArgument(fmt::format("{}:{}: empty column name in the header", file_, row.line));
    if (!seen.insert(name).second) {
      return InvalidArgument(fmt::format("{}:{}: column '{}' appears twice in the header", file_, row.line, name));
    }
  }
  header_ = row.fields;
  return Status::Ok();
}

}  // namespace drover::sim::detail
