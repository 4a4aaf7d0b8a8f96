#pragma once
// Plain-text tables in the style of kubectl: upper-case headers, columns
// padded to their widest cell and separated by three spaces. Every cell is
// escaped for the terminal (terminal.h): a control character a tenant put
// in a name or a command shows as an escape, and cannot forge a row or
// move the cursor.

#include <ostream>
#include <string>
#include <vector>

namespace drover::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> row);
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// "3s", "5m", "2h", "4d" since `unix_nanos`, as of `now_nanos`; "<none>" for 0.
std::string Age(int64_t unix_nanos, int64_t now_nanos);

}  // namespace drover::cli
