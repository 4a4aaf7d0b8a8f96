#pragma once
// The data directories of the roles are their owner's only. What a server
// keeps (drover.db and its WAL, archive.db, every job's log, admin.token,
// the cluster CA's key) and what an agent keeps (job specs with their whole
// environment, node credentials) hold every tenant's secrets: directories
// 0700, files 0600 (docs/security.md, "Files"). A role makes its umask 077
// before it creates anything, and checks what an earlier run (or an older
// version, or an operator's cp) left: each directory or file found looser
// is fixed, with a warning naming it, as PostgreSQL checks its data
// directory at start.
//
// Free functions, run on the role's thread before it starts anything.

#include <string>
#include <vector>

#include "drover/common/status.h"

namespace drover::app {

// umask(077): every directory and file the process makes from here on is
// its owner's only, whatever mode the code that makes it asks for (SQLite's
// WAL, log files, spdlog, etcd's). Jobs get the usual 022 back when the
// supervisor starts them (agent/supervisor.cc).
void UsePrivateUmask();

// Makes `dir` (0700) when it does not exist, then clears the group's and
// others' bits of `dir` and of everything in it (owner bits are kept: a
// 0400 key stays 0400), with one warning per path it changed (the first
// 20 by name, then how many more). Symbolic links inside are neither
// followed nor changed; `dir` itself may be one. Left as they are, and not
// descended into: the entries whose path relative to `dir` matches one of
// `job_owned` ("jobs/*": '*' is one whole path component), a job's own
// output and checkpoint directories, which the job writes (the agent's
// umask made them private when it made them; their parents are).
//
// Refused (an error) when `dir` is not a directory, belongs to another
// user, or an entry cannot be fixed (it belongs to another user).
Status SecureDataDir(const std::string& dir, const std::vector<std::string>& job_owned = {});

// What `drover server` and `drover up` leave to jobs in their data
// directory: the outputs and checkpoints of the agents `up` runs in it.
const std::vector<std::string>& ServerJobOwned();
// The same for `drover agent --data-dir`.
const std::vector<std::string>& AgentJobOwned();

}  // namespace drover::app
