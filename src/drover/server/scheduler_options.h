#pragma once
// Turns the scheduler settings an operator gave (flags, DROVER_* variables,
// the config file's scheduler: and tenants: sections) into the control
// loop's options, checking each against the scheduler's names. An error
// names the setting both ways: "scheduler.queue (--queue-policy): ...".

#include "drover/common/config.h"
#include "drover/common/status.h"
#include "drover/server/control_loop.h"

namespace drover::server {

Result<ControlLoopOptions> MakeControlLoopOptions(const SchedulerFlags& flags);

}  // namespace drover::server
