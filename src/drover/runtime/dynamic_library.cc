#include "drover/runtime/dynamic_library.h"

#include <dlfcn.h>

#include <utility>

namespace drover::runtime {

namespace {

// dlerror() is per-thread and cleared by reading it; a null result means the
// failure left no message (e.g. dlsym found a symbol whose value is null).
std::string TakeDlError() {
  const char* error = dlerror();
  return error != nullptr ? std::string(error) : std::string("no error message");
}

}  // namespace

Result<std::unique_ptr<DynamicLibrary>> DynamicLibrary::Open(const std::vector<std::string>& candidate_names) {
  if (candidate_names.empty()) {
    return InvalidArgument("no shared library names to try");
  }
  std::string tried;
  std::string last_error;
  for (const std::string& name : candidate_names) {
    if (!tried.empty()) tried += ", ";
    tried += "'" + name + "'";
    if (name.empty()) {
      last_error = "empty library name";
      continue;
    }
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      return std::unique_ptr<DynamicLibrary>(new DynamicLibrary(handle, name));
    }
    last_error = TakeDlError();
  }
  return Unavailable("cannot load shared library (tried " + tried + "): " + last_error);
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

Result<void*> DynamicLibrary::RawSymbol(const char* symbol) {
  if (symbol == nullptr || *symbol == '\0') {
    return InvalidArgument("empty symbol name for '" + name_ + "'");
  }
  dlerror();  // clear a stale error so that the one below is ours
  void* address = dlsym(handle_, symbol);
  if (address == nullptr) {
    return Unavailable("symbol '" + std::string(symbol) + "' not found in '" + name_ + "': " + TakeDlError());
  }
  return address;
}

}  // namespace drover::runtime
