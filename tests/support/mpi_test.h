// For tests run under mpirun (tests/*/*_mpitest.cc, *_gputest.cc): the
// harness's world accessor and world-size macros, <hostir/testing.h>.
#pragma once

#include <gtest/gtest.h>

#include <hostir/testing.h>
