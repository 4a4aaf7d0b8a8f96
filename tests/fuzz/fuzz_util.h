#pragma once
// Helpers shared by the libFuzzer targets of tests/fuzz (README.md there).
//
// FUZZ_CHECK(cond) states a property of a parser's result; a violation
// aborts, which libFuzzer reports as a crash and saves the input.
// TempFile gives loaders that read a path (the trace loaders, the --config
// file) a file holding the input, rewritten for every input, in a folder of
// this process that is removed at exit.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)

namespace drover::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// The folder of this process's temporary files: in /dev/shm when it exists
// (no disk writes per input), else $TMPDIR or /tmp.
class TempDir {
 public:
  static const std::filesystem::path& Get() {
    static TempDir dir;
    return dir.path_;
  }

 private:
  TempDir() {
    std::string base = "/tmp";
    if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') base = t;
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    std::string templ = base + "/drover-fuzz-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path path_;
};

// Writes `data` to <temp dir>/<name> and returns the path.
inline std::string WriteTempFile(const std::string& name, std::string_view data) {
  std::filesystem::path p = TempDir::Get() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", p.c_str());
    std::abort();
  }
  return p.string();
}

}  // namespace drover::fuzz
