#include "tools/files.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <hostir/error.h>

namespace hir {
namespace {

namespace fs = std::filesystem;

// What stat says a file is, for messages: "a FIFO", "a directory".
std::string_view kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// The folder a file is created in ("." for a bare name).
std::string folderOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A file as the same-file test sees it.
struct Identity {
  std::optional<std::pair<dev_t, ino_t>> inode;  // where it exists
  std::string normal;                            // its absolute normal path
};

Identity identify(const std::string& path) {
  Identity id;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) id.inode = std::make_pair(st.st_dev, st.st_ino);
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  id.normal = p.string();
  return id;
}

bool sameFile(const Identity& a, const Identity& b) {
  if (a.inode && b.inode) return *a.inode == *b.inode;
  return a.normal == b.normal;
}

}  // namespace

void checkOutputFile(const std::string& flag, const std::string& path, bool stdout_ok) {
  if (path.empty())
    throw UsageError(fmt::format("{} expects a file name{}", flag,
                                 stdout_ok ? " (or - for standard output)" : ""));
  if (path == "-") {
    if (stdout_ok) return;
    throw UsageError(fmt::format("{} writes a file, not standard output: give a file name",
                                 flag));
  }
  if (path.find('\0') != std::string::npos)
    throw UsageError(fmt::format("{}: a file name cannot hold a NUL character", flag));
  if (path.size() >= PATH_MAX)
    throw UsageError(fmt::format("{}: the file name is {} characters long; the system takes "
                                 "at most {}", flag, path.size(), PATH_MAX - 1));
  for (const fs::path& part : fs::path(path))
    if (part.string().size() > NAME_MAX)
      throw UsageError(fmt::format("{}: '{}...' is a name of {} characters in the path; the "
                                   "system takes at most {}", flag, part.string().substr(0, 32),
                                   part.string().size(), NAME_MAX));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw UsageError(fmt::format("{}: cannot write '{}': it is {}{}", flag, path,
                                 kindOf(st.st_mode),
                                 S_ISFIFO(st.st_mode)
                                     ? " (writing it would wait for a reader for ever)"
                                     : ""));
  const std::string dir = folderOf(path);
  if (access(dir.c_str(), W_OK) != 0)
    throw UsageError(fmt::format("{}: cannot write '{}': {}: {}", flag, path, dir,
                                 std::strerror(errno)));
}

void checkRegularInput(const std::string& flag, const std::string& path) {
  if (path.empty()) throw UsageError(fmt::format("{} expects a file name", flag));
  if (path.find('/') == std::string::npos) return;  // the loader's search path
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw UsageError(fmt::format("{}: cannot load '{}': it is {}", flag, path,
                                 kindOf(st.st_mode)));
}

void checkOutputsApart(const std::vector<NamedFile>& inputs,
                       const std::vector<NamedFile>& outputs) {
  std::vector<Identity> out_ids, in_ids;
  for (const NamedFile& o : outputs) out_ids.push_back(identify(o.path));
  for (const NamedFile& in : inputs) in_ids.push_back(identify(in.path));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path == "-") continue;
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const NamedFile& in = inputs[k];
      if (in.path == "-" || in.path.empty()) continue;
      if (sameFile(out_ids[i], in_ids[k]))
        throw UsageError(fmt::format(
            "{} '{}' is {} '{}': writing it would destroy {}; choose another file",
            outputs[i].flag, outputs[i].path, in.flag == "PROG" ? "the program" : in.flag,
            in.path, in.flag == "PROG" ? "the program" : "that input"));
    }
    for (std::size_t j = 0; j < i; ++j)
      if (outputs[j].path != "-" && sameFile(out_ids[i], out_ids[j]))
        throw UsageError(fmt::format("{} '{}' and {} '{}' are the same file: one would "
                                     "overwrite the other; give each its own",
                                     outputs[j].flag, outputs[j].path, outputs[i].flag,
                                     outputs[i].path));
  }
}

void writeTextFile(const std::string& path, const std::string& text, const char* what) {
  if (path == "-") {
    std::cout << text << std::flush;
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out << text;
  if (out) out.close();
  if (!out)
    throw RuntimeError(fmt::format("cannot write the {} to '{}': {}", what, path,
                                   std::strerror(errno)));
}

}  // namespace hir
