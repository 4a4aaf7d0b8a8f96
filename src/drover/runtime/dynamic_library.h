#pragma once
// DynamicLibrary: a shared library opened at run time with dlopen, so that one
// binary runs with or without a vendor stack (NVML, ROCm SMI, OpenCL, ...).
// Callers look up each symbol they use once and keep the typed pointer.
//
// Owned by whoever opened it; the library is dlclose'd in the destructor, so
// every pointer from Symbol() dies with this object. Symbol() is safe to call
// from several threads (dlsym is), but construction and destruction are not.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "drover/common/status.h"

namespace drover::runtime {

class DynamicLibrary {
 public:
  // Tries each name in order ("libOpenCL.so.1", then "libOpenCL.so") with
  // RTLD_NOW | RTLD_LOCAL and returns the first that loads. Fails with
  // kUnavailable naming every candidate and the last dlerror().
  static Result<std::unique_ptr<DynamicLibrary>> Open(const std::vector<std::string>& candidate_names);

  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // The name that loaded, as passed to Open().
  const std::string& name() const { return name_; }

  // The address of `symbol` cast to Fn*, e.g. Symbol<double(double)>("cos").
  // Fails with kUnavailable naming the symbol and the library when missing.
  template <typename Fn>
  Result<Fn*> Symbol(const char* symbol) {
    DROVER_ASSIGN_OR_RETURN(void* address, RawSymbol(symbol));
    // POSIX guarantees that a data pointer from dlsym converts to a function
    // pointer; reinterpret_cast is the only spelling that says so.
    return reinterpret_cast<Fn*>(address);
  }

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

  Result<void*> RawSymbol(const char* symbol);

  void* handle_;
  std::string name_;
};

}  // namespace drover::runtime
