#include "drover/cli/table.h"

#include <fmt/format.h>

#include <algorithm>

#include "drover/cli/terminal.h"

namespace drover::cli {

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {
  for (std::string& h : headers_) h = EscapeTerminal(h);
}

void Table::AddRow(std::vector<std::string> row) {
  for (std::string& cell : row) cell = EscapeTerminal(cell);
  rows_.push_back(std::move(row));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(headers_.size(), 0);
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < headers_.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      line += cell;
      if (c + 1 < headers_.size()) line += std::string(width[c] - cell.size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print(headers_);
  for (const auto& row : rows_) print(row);
}

std::string Age(int64_t unix_nanos, int64_t now_nanos) {
  if (unix_nanos <= 0) return "<none>";
  int64_t s = std::max<int64_t>(0, (now_nanos - unix_nanos) / 1'000'000'000);
  if (s < 120) return fmt::format("{}s", s);
  if (s < 2 * 3600) return fmt::format("{}m", s / 60);
  if (s < 2 * 86400) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

}  // namespace drover::cli
