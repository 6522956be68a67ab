// Answers of a backend's caps (hostir/backend.h): whether it handles a
// communication, and the choice of "auto". Pure functions of the data the
// backends declare; lowering and validation get the catalog as an input.
#include <algorithm>

#include <hostir/backend.h>

#include "common/check.h"

namespace hir {
namespace {

template <class E, std::size_t N>
std::string listed(const std::pair<E, std::string_view> (&table)[N], EnumSet<E> set) {
  std::string out;
  for (const auto& [v, name] : table)
    if (set.has(v)) out += fmt::format("{}{}", out.empty() ? "" : ", ", name);
  return out.empty() ? std::string("none") : out;
}

std::string listDevices(const std::vector<std::string>& devices) {
  std::string out;
  for (const std::string& d : devices) out += fmt::format("{}'{}'", out.empty() ? "" : ", ", d);
  return out.empty() ? std::string("no device") : out;
}

std::string describeQuery(const SupportQuery& q) {
  return fmt::format("{} of {} on device '{}'", toString(q.type), toString(q.dtype), q.device);
}

std::string prefix(std::string_view path) {
  return path.empty() ? std::string() : fmt::format("{}: ", path);
}

}  // namespace

Support supports(const BackendCaps& caps, const SupportQuery& q) {
  const std::string& b = caps.name;
  if (!caps.unavailable.empty()) return {false, caps.unavailable};
  if (std::find(caps.devices.begin(), caps.devices.end(), q.device) == caps.devices.end())
    return {false, fmt::format("backend '{}' runs on device {}, not on '{}'", b,
                               listDevices(caps.devices), q.device)};
  if (!caps.types.has(q.type))
    return {false, fmt::format("backend '{}' runs {}, not {}", b,
                               listed(kCommTypeNames, caps.types), toString(q.type))};
  if (!caps.dtypes.has(q.dtype))
    return {false, fmt::format("backend '{}' moves {}, not {}", b,
                               listed(kDTypeNames, caps.dtypes), toString(q.dtype))};
  if (hasReduceOp(q.type) && !caps.reduce_ops.has(q.reduce))
    return {false, fmt::format("backend '{}' reduces with {}, not {}", b,
                               listed(kReduceOpNames, caps.reduce_ops), toString(q.reduce))};
  if (q.protocol != Protocol::Auto && !(isPointToPoint(q.type) && caps.protocols.has(q.protocol)))
    return {false, caps.protocols.empty()
                       ? fmt::format("backend '{}' takes no protocol, yet protocol '{}' is given",
                                     b, toString(q.protocol))
                       : fmt::format("backend '{}' takes protocol {} for send/recv, not '{}' for {}",
                                     b, listed(kProtocolNames, caps.protocols),
                                     toString(q.protocol), toString(q.type))};
  if (q.peer_on_other_node && caps.same_node_only)
    return {false, fmt::format("backend '{}' reaches peers on its own node only, so both ranks "
                               "must be on one node; use backend \"auto\" for a peer on another "
                               "node",
                               b)};
  return {true, {}};
}

const BackendCaps* findCaps(std::span<const BackendCaps> catalog, std::string_view name) {
  for (const BackendCaps& c : catalog)
    if (c.name == name) return &c;
  return nullptr;
}

const BackendCaps& selectBackend(std::span<const BackendCaps> catalog, std::string_view requested,
                                 const SupportQuery& q, std::string_view path) {
  if (requested != "auto") {
    const BackendCaps* b = findCaps(catalog, requested);
    if (b == nullptr) {
      std::string names;
      for (const BackendCaps& c : catalog)
        names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", c.name);
      throw ProgramError(fmt::format("{}unknown backend '{}'; expected \"auto\" or a registered "
                                     "backend: {}",
                                     prefix(path), requested, names));
    }
    Support s = supports(*b, q);
    HIR_CHECK(s.ok, "{}backend '{}' cannot run {}: {}", prefix(path), b->name, describeQuery(q),
              s.why);
    return *b;
  }
  const BackendCaps* best = nullptr;
  std::string reasons;
  for (const BackendCaps& c : catalog) {
    Support s = supports(c, q);
    if (!s.ok) {
      reasons += fmt::format("; {}", s.why);
      continue;
    }
    if (c.auto_priority < 1) {
      reasons += fmt::format("; backend '{}' could, but \"auto\" never picks it: name it", c.name);
      continue;
    }
    // Ties keep the first registered.
    if (best == nullptr || c.auto_priority > best->auto_priority) best = &c;
  }
  HIR_CHECK(best != nullptr, "{}no backend can run {}{}", prefix(path), describeQuery(q),
            catalog.empty() ? std::string("; no backend is registered") : reasons);
  return *best;
}

}  // namespace hir
