#pragma once
// `drover certs init`: the cluster CA (once) and the server certificate in
// <data-dir>/tls (drover/auth/cluster_ca.h), then what to do next.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace drover::app {

struct CertsFlags {
  std::string data_dir = ".drover";
  std::vector<std::string> sans;  // beyond 127.0.0.1, ::1, localhost and the host name
};

// Returns the exit code.
int RunCertsInit(const CertsFlags& f);
// `drover certs` and its one verb, init.
CLI::App* AddCertsCommand(CLI::App& app, CertsFlags* f, int* exit_code);

}  // namespace drover::app
