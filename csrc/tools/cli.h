// The `hir` command line (docs/cli.md, "Command line"). Every flag is one
// row of flagTable(): its names, the commands that take it, its value,
// default, check, help, and whether the ranks that `run --np` and
// `sweep --np` start receive it. Parsing, the checks, the help and the
// command line passed on to the ranks are all made from that table.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <hostir/evaluator.h>

#include "tools/sweep.h"

namespace hir {

// The commands, as bits of a set.
enum Command : unsigned { kRun = 1, kSweep = 2, kCheck = 4, kPrint = 8 };

// The command line, parsed and checked. Defaults come from the table.
struct Args {
  std::string command;   // run, sweep, check or print
  std::string program;   // a path, or "-": standard input
  std::optional<int> np;
  std::optional<int> world;
  std::string device;
  std::vector<std::pair<std::string, int64_t>> params;
  int iters = 0;
  int warmup = 0;
  int64_t timeout_ms = 0;
  bool schedule_check = true;
  std::string trace;         // --trace FILE
  std::string json;          // --json FILE ("-": standard output)
  bool progress = true;      // --no-progress: false
  bool graph = false;        // --graph
  EvaluatorOptions::Symmetric symmetric = EvaluatorOptions::Symmetric::Auto;
  SweepOptions sweep;        // `hir sweep` (its iters, warmup, json, progress, graph too)
  std::vector<std::string> plugins;      // --plugin LIB, in order
  std::vector<std::string> mpirun_args;  // --mpirun-args, split into words (launcher only)
  std::string hostfile;                  // --hostfile FILE (launcher only)
  // What each rank started by --np gets after the command, as --flag=value
  // (or --flag), in the table's order: every flag given whose row says the
  // ranks receive it. launchRanks adds `-- PROG`.
  std::vector<std::string> forwarded;
};

// How a flag takes its value: none (a switch, on when given), one (given
// at most once), or one per occurrence (any number of times).
enum class Arity : uint8_t { kSwitch, kOne, kMany };

struct Flag {
  // CLI11's form, short names first: "-n,--np". The last is the flag's
  // name, the one messages and the forwarded command line use.
  const char* names;
  unsigned commands;        // the Command bits of those that take it
  Arity arity = Arity::kOne;
  const char* type = "";    // the value's name in the help: N, FILE
  // The value when the flag is not given, checked and stored by `apply`
  // like a given one; null: none. The help shows it.
  const char* fallback = nullptr;
  bool required = false;    // the command needs it
  // The ranks that `run --np` and `sweep --np` start receive it, as
  // --name=value (or --name); false: the launcher's alone (or a flag of
  // check or print, which start no ranks).
  bool to_ranks = true;
  // What it does, for --help. {capturable} and {symmetric} stand for the
  // registered backends whose caps say so.
  const char* help = "";
  // Checks `value` (empty for a switch) and stores it into `a`; throws
  // UsageError naming `flag` (the flag's name). Called once per value
  // given, in the table's order.
  void (*apply)(Args& a, const std::string& flag, const std::string& value) = nullptr;
};

// Every flag of every command, in the order of the help.
std::span<const Flag> flagTable();
// The flag's name: the last of its names ("--np" of "-n,--np").
std::string flagName(const Flag& flag);
// Its help text as --help shows it: the backends filled in, the default
// added.
std::string flagHelp(const Flag& flag);

// The commands' names, in the order of the help: the one at index i is
// the Command bit 1 << i.
std::span<const char* const> commandNames();

// Parses the command line into `a`. Returns -1 to go on, or the exit code
// when there is nothing more to do (help, version: 0). Bad usage throws a
// UsageError that names the flag or value.
int parseArgs(int argc, char** argv, Args& a);

}  // namespace hir
