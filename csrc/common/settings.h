// What the library does with the settings beyond <hostir/settings.h>: the
// comparison across ranks of those that must be the same everywhere.
#pragma once

#include <hostir/bootstrap.h>
#include <hostir/settings.h>

namespace hir {

// Collective: every rank has the same value of each setting marked
// same_on_every_rank, or every rank throws UsageError naming the first
// setting that differs, this rank's value and the other rank's.
void agreeOnSettings(Bootstrap& bootstrap, const Settings& mine);

}  // namespace hir
