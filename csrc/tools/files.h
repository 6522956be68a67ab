// The files a command line names, checked before anything runs (docs/cli.md,
// "Files"): an output never replaces an input or another output, and never
// blocks (a FIFO with no reader) or fails after the run (a name too long).
#pragma once

#include <string>
#include <vector>

namespace hir {

// One file the command line names, with the flag (or argument) that names it.
struct NamedFile {
  std::string flag;  // "--json", or "PROG" for the program
  std::string path;
};

// An output FILE of `flag`: not empty; "-" (standard output) only when
// `stdout_ok`; a regular file where it exists (not a directory, FIFO,
// socket or device); its folder writable; its name within the system's
// limits. Throws UsageError naming the flag.
void checkOutputFile(const std::string& flag, const std::string& path, bool stdout_ok);

// An input that must not block when opened (--plugin): where it names a
// path (it has a '/'), a regular file. Throws UsageError naming the flag.
void checkRegularInput(const std::string& flag, const std::string& path);

// No output is one of the inputs or another output: the same file by device
// and inode where both exist, by their absolute normal paths otherwise ("-"
// is standard input or output and is skipped). Throws UsageError naming
// both.
void checkOutputsApart(const std::vector<NamedFile>& inputs,
                       const std::vector<NamedFile>& outputs);

// Writes `text` to `path` ("-": standard output). Throws RuntimeError when
// the file cannot be written.
void writeTextFile(const std::string& path, const std::string& text, const char* what);

}  // namespace hir
