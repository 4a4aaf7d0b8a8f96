#pragma once
// Terminal-safe text: what the CLI prints is mostly what tenants wrote (a
// job's command, working directory and name, a token's name, a node's
// labels, a failure message quoting them), and a terminal acts on the
// control characters in it: ESC [2J clears the screen, ESC ] 52 writes the
// clipboard, a CR or backspaces overwrite a row already printed (a forged
// audit entry), C1 CSI (U+009B) starts a sequence without an ESC. Every
// human-readable printer of the CLI escapes them (docs/security.md,
// "Terminal output"), as kubectl does since its issue 101695 (kubectl
// escapes only ESC and CR; this escapes every control character).
//
// The escapes are those of Go's strconv.Quote, without its quotes:
//   \a \b \t \n \v \f \r          the C0 characters that have a letter
//   \x00 .. \x1f, \x7f            the other C0 characters and DEL (ESC: \x1b)
//   \u0080 .. \u009f              the C1 controls (as UTF-8 code points)
//   \u061c \u200e \u200f \u2028 .. \u202e \u2066 .. \u2069
//                                 bidirectional overrides and line or
//                                 paragraph separators (they reorder or
//                                 break what a row shows)
//   \xNN                          each byte that is not part of valid UTF-8
// Everything else, other UTF-8 and the backslash included, is printed as it
// is: the escaping is for reading, not reversible (as kubectl's).
//
// Needs neither gRPC nor protobuf: the small front program uses it too.

#include <cstddef>
#include <string>
#include <string_view>

namespace drover::cli {

// One line: a table cell, a field of `drover job`, a name in a message,
// an error message. Newlines and tabs are escaped too (a newline would
// forge a row or an error line).
std::string EscapeTerminal(std::string_view s);

// `drover logs` on a terminal, a chunk at a time: keeps '\n', '\t' and '\r'
// (progress bars redraw their line with it) and escapes the rest as above.
// A UTF-8 sequence cut between two chunks is held back until the next one;
// Finish() returns what is still held, escaped.
class LogEscaper {
 public:
  std::string Feed(std::string_view chunk);
  std::string Finish();

 private:
  std::string held_;  // the start of a UTF-8 sequence the last chunk cut, at most 3 bytes
};

// JSON text (what an encoder wrote) with the code points above that JSON
// allows raw (DEL, C1, the bidirectional ones) written as \u escapes; the
// encoders escape C0 themselves. Every other byte is left as it is, so the
// document means the same. nlohmann's dump() leaves them raw (the front
// program's -o json); protobuf's printer (3.21) escapes them itself.
std::string EscapeJsonForTerminal(std::string_view json);

// `s` cut to `max` bytes with "..." at the end, never inside a UTF-8
// sequence; 0 means no limit.
std::string Cut(const std::string& s, size_t max);

}  // namespace drover::cli
