// hostir: the umbrella header for embedding the evaluator. It pulls in no
// CUDA, NCCL or MPI header.
#pragma once

#include "common/enums.h"
#include "common/error.h"
#include "ir/builder.h"
#include "ir/json.h"
#include "ir/nodes.h"
#include "ir/printer.h"
#include "runtime/bootstrap.h"
#include "runtime/evaluator.h"
#include "runtime/session.h"
