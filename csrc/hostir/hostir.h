// hostir: the umbrella header for embedding the evaluator. It pulls in no
// CUDA, NCCL or MPI header.
#pragma once

#include <hostir/types.h>
#include <hostir/error.h>
#include <hostir/builder.h>
#include <hostir/json.h>
#include <hostir/program.h>
#include <hostir/printer.h>
#include <hostir/bootstrap.h>
#include <hostir/evaluator.h>
#include <hostir/session.h>
#include <hostir/version.h>
