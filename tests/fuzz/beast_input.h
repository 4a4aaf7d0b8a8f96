#pragma once
// Bytes of a connection for Beast's synchronous reads in the HTTP fuzz
// targets: a SyncReadStream over the input.

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace drover::fuzz {

// A SyncReadStream over the input: hands out at most `chunk` bytes per read
// (the fuzzer picks it, so that splits inside a header or a chunk size are
// tried), then end of stream.
class InputStream {
 public:
  InputStream(std::string_view data, size_t chunk) : data_(data), chunk_(chunk) {}

  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, boost::system::error_code& ec) {
    if (data_.empty()) {
      ec = boost::asio::error::eof;
      return 0;
    }
    ec = {};
    size_t n = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b = *it;
      size_t take = std::min({b.size(), data_.size(), chunk_ - n});
      std::memcpy(b.data(), data_.data(), take);
      data_.remove_prefix(take);
      n += take;
      if (n == chunk_ || data_.empty()) break;
    }
    return n;
  }
  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    boost::system::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::string_view data_;
  size_t chunk_;
};

}  // namespace drover::fuzz
