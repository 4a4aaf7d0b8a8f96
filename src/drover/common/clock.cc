#include "drover/common/clock.h"

namespace drover {

SystemClock* SystemClock::Get() {
  static SystemClock clock;
  return &clock;
}

SteadyClock* SteadyClock::Get() {
  static SteadyClock clock;
  return &clock;
}

}  // namespace drover
