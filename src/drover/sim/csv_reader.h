#pragma once
// The strict CSV reader behind the trace loaders (loaders.cc), and the file
// name helpers they share. Internal to the simulator: nothing outside
// src/drover/sim includes this.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"

namespace drover::sim::detail {

// "traces/itp/cluster01.csv" -> "cluster01.csv".
std::string BaseName(std::string_view path);
// "traces/itp/cluster01.csv" -> "cluster01" (a leading dot is kept).
std::string Stem(std::string_view path);

// The whole file; NotFound naming the path if it cannot be opened.
Result<std::string> ReadFile(const std::string& path);

// A whole CSV file held in memory (the largest trace is 19,000 rows), read
// strictly: RFC 4180 quoting ("a,b" and "" for a quote, newlines allowed
// inside quotes), LF or CRLF line ends, every row as wide as the header,
// blank lines only at the end. Lines are 1-based physical lines; a row's
// line is where it starts.
//
// A value: immutable once read, safe to share between threads for reading.
class Csv {
 public:
  // `headerless`: the file has no header row and these name its columns.
  static Result<Csv> Read(const std::string& path, std::vector<std::string> headerless = {});

  const std::string& file() const { return file_; }
  const std::vector<std::string>& header() const { return header_; }
  size_t size() const { return rows_.size(); }
  int Col(std::string_view name) const;
  bool Has(std::string_view name) const { return Col(name) >= 0; }
  std::string_view Get(size_t row, int col) const { return rows_[row].fields[static_cast<size_t>(col)]; }

  // The header holds every required column, nothing unknown, and there are rows.
  Status Expect(const std::vector<std::string_view>& required, const std::vector<std::string_view>& optional) const;

  // "cluster01.csv:17: column 'num_gpu': 'abc' is not an integer"
  Status Bad(size_t row, int col, std::string_view what) const;
  Result<int64_t> Int(size_t row, int col, int64_t lo, int64_t hi) const;
  Result<double> Real(size_t row, int col, double lo, double hi) const;

 private:
  struct Row {
    int line = 0;
    std::vector<std::string> fields;
  };
  Status At(int line, int col, std::string_view what) const;
  Status SetHeader(const Row& row);

  std::string file_;
  std::vector<std::string> header_;
  std::vector<Row> rows_;
};

}  // namespace drover::sim::detail
