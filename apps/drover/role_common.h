#pragma once
// What every role of apps/drover needs: how it ends on an error, and where
// this program is. Free functions, no state.

#include <string>

#include "drover/common/status.h"

namespace drover::app {

// A failure once the role runs: logged, exit 1.
int Fatal(const Status& s);
// A bad setting is a usage error (exit 2), reported before anything starts.
int BadConfig(const Status& s);

// This program, for children and supervisors ("drover" when unknown).
std::string SelfExe();

}  // namespace drover::app
