// A library's run-time options (TdOptions; td_get_options / td_set_options in tiledispatch.h):
// one value per library, shared by every thread. The kernels' host code reads it each time it
// plans or launches a kernel, so a change applies to the next call; device code never sees it.
#pragma once

#include "tiledispatch/tiledispatch.h"

namespace td {

// The current options (a consistent copy: the three fields are stored together).
TdOptions options();

}  // namespace td
