#pragma once
// Where the sim tests find the public traces: $DROVER_TRACES at run time
// (like scripts/evaluate.sh), else DROVER_TRACES_DIR, which CMake sets to
// ../shared/traces beside the source tree. Without them a trace test skips,
// saying where the traces come from. Tests only.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace drover::sim {

inline const std::string& TracesDir() {
  static const std::string dir = [] {
    const char* env = std::getenv("DROVER_TRACES");
    return env != nullptr && *env != '\0' ? std::string(env) : std::string(DROVER_TRACES_DIR);
  }();
  return dir;
}

inline bool HaveTraces() { return std::filesystem::exists(TracesDir() + "/README.md"); }

// The reason a test gives when the traces are absent.
inline std::string NoTracesMessage() {
  return "no public traces at " + TracesDir() +
         " (set DROVER_TRACES to the folder). They are copied unchanged from public repositories: "
         "microsoft/elasticflow-traces (ITP), alibaba/clusterdata cluster-trace-gpu-v2023 (PAI 2023), "
         "qzweng/clusterdata-cluster-trace-gpu-v2020-data (PAI 2020), abdullahfsm/PCS (Philly-derived), "
         "S-Lab-System-Group/HeliosArtifact (reference stats); docs/simulator-inputs.md lists the files";
}

}  // namespace drover::sim

// Skips the current test when the traces are absent.
#define DROVER_REQUIRE_TRACES()                         \
  do {                                                  \
    if (!::drover::sim::HaveTraces()) {                 \
      GTEST_SKIP() << ::drover::sim::NoTracesMessage(); \
    }                                                   \
  } while (0)
