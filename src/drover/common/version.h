#pragma once
// The version of this build, set by CMake.

namespace drover {

extern const char* const kVersion;
extern const char* const kGitCommit;

}  // namespace drover
