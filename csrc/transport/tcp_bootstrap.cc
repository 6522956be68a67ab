// The TCP bootstrap (createTcpBootstrap) and the choice of a bootstrap from
// the launcher's variables (createBootstrapFromEnvironment).
//
// A star through rank 0: every other rank holds one socket to it. Rank 0
// reads each rank's request of a collective, checks that all ranks called
// the same one (type, size, root), and answers each with a status and the
// result. Every message is framed by 64-bit big-endian integers; every wait
// on a socket is bounded by a deadline. When rank 0 sees a rank fail (no
// request in time, a closed socket, a disagreeing call), it answers every
// other rank with that error, so that all ranks fail with the same message
// naming the rank at fault instead of each timing out on its own.
#include <hostir/bootstrap.h>

#include <arpa/inet.h>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <optional>
#include <thread>
#include <utility>

#include "common/check.h"
#include "common/log.h"
#include "common/parse_int.h"
#include "transport/fake_nodes.h"

namespace hir {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kMagic = 0x4849524254435031ull;  // "HIRBTCP1"
constexpr std::size_t kMaxNodeName = 255;          // Bootstrap::nodes() holds 256 bytes
// A rank other than 0 waits this much longer than the timeout for rank 0's
// answer, so that rank 0's report of the rank at fault arrives first.
constexpr milliseconds kAnswerGrace{2000};

enum class Op : uint64_t { Allgather = 1, Broadcast = 2, Barrier = 3 };
enum class Status : uint64_t { Ok = 0, Failed = 1 };
// The kind of error a Failed status carries (its exit code: 2 or 3).
enum class Fault : uint64_t { Usage = 0, Timeout = 1, Backend = 2 };

std::string_view opName(Op op) {
  switch (op) {
    case Op::Allgather: return "allgather";
    case Op::Broadcast: return "broadcast";
    case Op::Barrier: return "barrier";
  }
  return "an unknown call";
}

[[noreturn]] void throwFault(Fault fault, const std::string& text) {
  switch (fault) {
    case Fault::Usage: throw UsageError(text);
    case Fault::Timeout: throw TimeoutError(text);
    case Fault::Backend: break;
  }
  throw BackendError(text);
}

long long msLeft(Clock::time_point deadline) {
  return std::max<long long>(
      0, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
}

// One connection, to rank `peer`, with deadline-bounded transfers. Errors
// name the peer and what this rank was doing (`what`).
class Socket {
 public:
  Socket() = default;
  Socket(int fd, int self, int peer) : fd_(fd), self_(self), peer_(peer) {}
  Socket(Socket&& o) noexcept { *this = std::move(o); }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    self_ = o.self_;
    peer_ = o.peer_;
    return *this;
  }
  ~Socket() { close(); }

  int fd() const { return fd_; }
  // Gives the descriptor up to the caller.
  int release() { return std::exchange(fd_, -1); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // From any thread: makes a blocked or later transfer on either side fail.
  void shutdownBoth() const {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }

  void send(const void* data, std::size_t bytes, Clock::time_point deadline,
            std::string_view what) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      waitFor(POLLOUT, deadline, what, "room to send to");
      ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) lost(what, std::strerror(errno));
      p += n;
      bytes -= static_cast<std::size_t>(n);
    }
  }

  void recv(void* data, std::size_t bytes, Clock::time_point deadline, std::string_view what) {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      waitFor(POLLIN, deadline, what, "answer from");
      ssize_t n = ::recv(fd_, p, bytes, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n == 0) lost(what, "the connection was closed (the rank ended or aborted)");
      if (n < 0) lost(what, std::strerror(errno));
      p += n;
      bytes -= static_cast<std::size_t>(n);
    }
  }

  void sendU64(uint64_t v, Clock::time_point deadline, std::string_view what) {
    const uint64_t be = htobe64(v);
    send(&be, sizeof be, deadline, what);
  }
  uint64_t recvU64(Clock::time_point deadline, std::string_view what) {
    uint64_t be = 0;
    recv(&be, sizeof be, deadline, what);
    return be64toh(be);
  }
  void sendText(const std::string& text, Clock::time_point deadline, std::string_view what) {
    sendU64(text.size(), deadline, what);
    send(text.data(), text.size(), deadline, what);
  }
  std::string recvText(std::size_t max, Clock::time_point deadline, std::string_view what) {
    const uint64_t n = recvU64(deadline, what);
    if (n > max)
      throw BackendError(fmt::format("tcp bootstrap {} on rank {}: rank {} sent a text of {} "
                                     "bytes, at most {} expected (not a hostir rank?)",
                                     what, self_, peer_, n, max));
    std::string text(n, '\0');
    recv(text.data(), n, deadline, what);
    return text;
  }

 private:
  void waitFor(short events, Clock::time_point deadline, std::string_view what,
               std::string_view waiting_for) {
    for (;;) {
      pollfd p{fd_, events, 0};
      const long long left = msLeft(deadline);
      int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, INT_MAX)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) lost(what, std::strerror(errno));
      if (rc == 0)
        throw TimeoutError(fmt::format("tcp bootstrap {} on rank {}: no {} rank {} within the "
                                       "timeout",
                                       what, self_, waiting_for, peer_));
      return;  // readable, writable, or an error that the call itself reports
    }
  }

  [[noreturn]] void lost(std::string_view what, std::string_view why) const {
    throw BackendError(fmt::format("tcp bootstrap {} on rank {}: connection to rank {} lost: {}",
                                   what, self_, peer_, why));
  }

  int fd_ = -1;
  int self_ = 0, peer_ = 0;
};

class TcpBootstrap final : public Bootstrap {
 public:
  explicit TcpBootstrap(const TcpBootstrapOptions& o) : o_(o) {
    HIR_CHECK_AS(UsageError, o.world >= 1 && o.rank >= 0 && o.rank < o.world,
                 "tcp bootstrap: rank {} is not a rank of a world of {}", o.rank, o.world);
    HIR_CHECK_AS(UsageError, o.port >= 1 && o.port <= 65535,
                 "tcp bootstrap: port {} is not in [1, 65535]", o.port);
    HIR_CHECK_AS(UsageError, o.timeout.count() > 0, "tcp bootstrap: the timeout must be positive, "
                 "got {} ms", o.timeout.count());
    HIR_CHECK_AS(UsageError, (o.local_rank < 0) == (o.local_size < 0),
                 "tcp bootstrap: give both the local rank and the local size, or neither "
                 "(got {} and {})", o.local_rank, o.local_size);
    node_ = o.node.empty() ? hostName() : o.node;
    HIR_CHECK_AS(UsageError, node_.size() <= kMaxNodeName,
                 "tcp bootstrap: node identity '{}' is {} bytes long; at most {} are supported",
                 node_, node_.size(), kMaxNodeName);
    setLogRank(o.rank);
    const Clock::time_point deadline = Clock::now() + o.timeout;
    std::vector<std::string> nodes;
    if (o.world > 1) nodes = o.rank == 0 ? acceptRanks(deadline) : connectToRankZero(deadline);
    else nodes = {node_};
    if (o.local_rank >= 0) {
      local_rank_ = o.local_rank;
      local_size_ = o.local_size;
    } else {
      local_rank_ = static_cast<int>(std::count(nodes.begin(), nodes.begin() + o.rank, node_));
      local_size_ = static_cast<int>(std::count(nodes.begin(), nodes.end(), node_));
    }
    HIR_LOG_INFO(Subsys::Init, "tcp bootstrap: rank {} of {} on node {} (local rank {} of {}), "
                 "through rank 0 at {}:{}",
                 o.rank, o.world, node_, local_rank_, local_size_, o.addr, o.port);
  }

  ~TcpBootstrap() override {
    if (listener_ >= 0) ::close(listener_);
  }

  int rank() const override { return o_.rank; }
  int world() const override { return o_.world; }
  int localRank() const override { return local_rank_; }
  int localSize() const override { return local_size_; }
  const std::string& node() const override { return node_; }

  void allgather(const void* send, void* recv, std::size_t bytes) override {
    collective(Op::Allgather, send, recv, bytes, 0);
  }
  void broadcast(void* buf, std::size_t bytes, int root) override {
    HIR_CHECK_AS(UsageError, root >= 0 && root < o_.world,
                 "bootstrap broadcast: root {} is not a rank of a world of {}", root, o_.world);
    collective(Op::Broadcast, buf, buf, bytes, root);
  }
  void barrier() override { collective(Op::Barrier, nullptr, nullptr, 0, 0); }

  [[noreturn]] void abort(int exit_code) override {
    HIR_LOG_WARN(Subsys::Init, "tcp bootstrap: aborting (exit {}); the other ranks fail at their "
                 "next bootstrap call", exit_code);
    for (const Socket& s : peers_) s.shutdownBoth();
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }

 private:
  // ---------------------------------------------------------- set-up
  std::vector<std::string> acceptRanks(Clock::time_point deadline) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener_ < 0)
      throw BackendError(fmt::format("tcp bootstrap: socket failed: {}", std::strerror(errno)));
    int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(o_.port));
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw BackendError(fmt::format("tcp bootstrap: rank 0 cannot listen on port {}: {}{}",
                                     o_.port, std::strerror(errno),
                                     errno == EADDRINUSE ? " (HIR_BOOTSTRAP_PORT picks another)"
                                                         : ""));
    if (::listen(listener_, std::min(o_.world, 4096)) != 0)
      throw BackendError(fmt::format("tcp bootstrap: listen failed: {}", std::strerror(errno)));
    HIR_LOG_DEBUG(Subsys::Init, "tcp bootstrap: rank 0 listening on port {} for {} ranks",
                  o_.port, o_.world - 1);
    peers_.resize(static_cast<std::size_t>(o_.world));
    std::vector<std::string> nodes(static_cast<std::size_t>(o_.world));
    nodes[0] = node_;
    for (int connected = 0; connected < o_.world - 1;) {
      pollfd p{listener_, POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(msLeft(deadline), INT_MAX)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) {
        std::string missing;
        int count = 0;
        for (int r = 1; r < o_.world; ++r)
          if (peers_[r].fd() < 0 && count++ < 8)
            missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
        if (count > 8) missing += fmt::format(" and {} more", count - 8);
        failAll(Fault::Timeout,
                fmt::format("tcp bootstrap: rank 0 waited {} ms on port {} for rank{} {} to "
                            "connect (world of {})",
                            o_.timeout.count(), o_.port, count == 1 ? "" : "s", missing,
                            o_.world));
      }
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;  // the peer gave up already; it retries
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Socket s(fd, 0, -1);
      const std::string what = "set-up";
      uint64_t rank = 0, world = 0;
      std::string node;
      try {
        if (s.recvU64(deadline, what) != kMagic) continue;  // not one of ours
        rank = s.recvU64(deadline, what);
        world = s.recvU64(deadline, what);
        node = s.recvText(kMaxNodeName, deadline, what);
      } catch (const Error& e) {
        HIR_LOG_DEBUG(Subsys::Init, "tcp bootstrap: ignoring a connection: {}", e.what());
        continue;
      }
      std::string problem;
      if (world != static_cast<uint64_t>(o_.world))
        problem = fmt::format("a rank connected for a world of {}, rank 0's world is {}", world,
                              o_.world);
      else if (rank == 0 || rank >= world)
        problem = fmt::format("a rank connected as rank {}, not a rank in 1..{}", rank, world - 1);
      else if (peers_[rank].fd() >= 0)
        problem = fmt::format("two processes connected as rank {}", rank);
      if (!problem.empty()) {
        s.sendU64(static_cast<uint64_t>(Status::Failed), deadline, what);
        s.sendU64(static_cast<uint64_t>(Fault::Usage), deadline, what);
        s.sendText("tcp bootstrap: " + problem, deadline, what);
        failAll(Fault::Usage, "tcp bootstrap: " + problem);
      }
      peers_[rank] = Socket(s.release(), 0, static_cast<int>(rank));
      nodes[rank] = std::move(node);
      ++connected;
      HIR_LOG_DEBUG(Subsys::Init, "tcp bootstrap: rank {} connected ({} of {})", rank, connected,
                    o_.world - 1);
    }
    ::close(listener_);
    listener_ = -1;
    for (int r = 1; r < o_.world; ++r) {
      Socket& s = peers_[r];
      s.sendU64(static_cast<uint64_t>(Status::Ok), deadline, "set-up");
      for (const std::string& n : nodes) s.sendText(n, deadline, "set-up");
    }
    return nodes;
  }

  std::vector<std::string> connectToRankZero(Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    std::string last_error = "no attempt";
    peers_.resize(1);
    int attempts = 0;
    for (;;) {
      addrinfo* found = nullptr;
      const std::string port = std::to_string(o_.port);
      int gai = ::getaddrinfo(o_.addr.c_str(), port.c_str(), &hints, &found);
      if (gai != 0) {
        last_error = fmt::format("cannot resolve '{}': {}", o_.addr, gai_strerror(gai));
      } else {
        for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
          int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
          if (fd < 0) continue;
          if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            peers_[0] = Socket(fd, o_.rank, 0);
            break;
          }
          last_error = std::strerror(errno);
          ::close(fd);
        }
        ::freeaddrinfo(found);
      }
      ++attempts;
      if (peers_[0].fd() >= 0) break;
      if (msLeft(deadline) == 0)
        throw TimeoutError(fmt::format("tcp bootstrap: rank {} could not connect to rank 0 at "
                                       "{}:{} within {} ms ({} attempts; last: {})",
                                       o_.rank, o_.addr, o_.port, o_.timeout.count(), attempts,
                                       last_error));
      std::this_thread::sleep_for(milliseconds(std::min<long long>(100, msLeft(deadline))));
    }
    Socket& s = peers_[0];
    const std::string what = "set-up";
    s.sendU64(kMagic, deadline, what);
    s.sendU64(static_cast<uint64_t>(o_.rank), deadline, what);
    s.sendU64(static_cast<uint64_t>(o_.world), deadline, what);
    s.sendText(node_, deadline, what);
    // Rank 0 answers once every rank connected: up to its own timeout.
    const Clock::time_point answer = Clock::now() + o_.timeout + kAnswerGrace;
    readStatus(s, answer, what);
    std::vector<std::string> nodes;
    for (int r = 0; r < o_.world; ++r) nodes.push_back(s.recvText(kMaxNodeName, answer, what));
    return nodes;
  }

  // ----------------------------------------------------- collectives
  void collective(Op op, const void* send, void* recv, std::size_t bytes, int root) {
    if (!broken_.empty()) throw BackendError(broken_);
    try {
      if (o_.world == 1) {
        if (op == Op::Allgather && send != recv) std::memmove(recv, send, bytes);
        return;
      }
      if (o_.rank == 0) lead(op, send, recv, bytes, root);
      else follow(op, send, recv, bytes, root);
    } catch (const Error& e) {
      broken_ = fmt::format("tcp bootstrap: the world is broken since an earlier failure: {}",
                            e.what());
      throw;
    }
  }

  // Rank 0: every request, checked against its own; then every answer.
  void lead(Op op, const void* send, void* recv, std::size_t bytes, int root) {
    const std::string what(opName(op));
    const Clock::time_point deadline = Clock::now() + o_.timeout;
    std::vector<char> all;
    if (op == Op::Allgather) {
      all.resize(bytes * static_cast<std::size_t>(o_.world));
      if (bytes > 0) std::memcpy(all.data(), send, bytes);
    }
    for (int r = 1; r < o_.world; ++r) {
      Socket& s = peers_[r];
      uint64_t their_op = 0, their_bytes = 0, their_root = 0;
      try {
        their_op = s.recvU64(deadline, what);
        their_bytes = s.recvU64(deadline, what);
        their_root = s.recvU64(deadline, what);
      } catch (const TimeoutError&) {
        failAll(Fault::Timeout,
                fmt::format("tcp bootstrap {}: rank {} did not arrive within {} ms (rank 0 waited "
                            "for it)", what, r, o_.timeout.count()));
      } catch (const BackendError& e) {
        failAll(Fault::Backend, e.what());
      }
      if (their_op != static_cast<uint64_t>(op) || their_bytes != bytes ||
          their_root != static_cast<uint64_t>(root))
        failAll(Fault::Usage,
                fmt::format("tcp bootstrap: the ranks called different collectives: rank 0 {} of "
                            "{} bytes (root {}), rank {} {} of {} bytes (root {})",
                            what, bytes, root, r, opName(static_cast<Op>(their_op)), their_bytes,
                            their_root));
      try {
        if (op == Op::Allgather && bytes > 0)
          s.recv(all.data() + static_cast<std::size_t>(r) * bytes, bytes, deadline, what);
        if (op == Op::Broadcast && r == root && bytes > 0) s.recv(recv, bytes, deadline, what);
      } catch (const Error& e) {
        failAll(Fault::Backend, e.what());
      }
    }
    for (int r = 1; r < o_.world; ++r) {
      Socket& s = peers_[r];
      s.sendU64(static_cast<uint64_t>(Status::Ok), deadline, what);
      if (op == Op::Allgather) s.send(all.data(), all.size(), deadline, what);
      if (op == Op::Broadcast && r != root) s.send(recv, bytes, deadline, what);
    }
    if (op == Op::Allgather && bytes > 0) std::memcpy(recv, all.data(), all.size());
  }

  void follow(Op op, const void* send, void* recv, std::size_t bytes, int root) {
    const std::string what(opName(op));
    Socket& s = peers_[0];
    const Clock::time_point deadline = Clock::now() + o_.timeout;
    s.sendU64(static_cast<uint64_t>(op), deadline, what);
    s.sendU64(bytes, deadline, what);
    s.sendU64(static_cast<uint64_t>(root), deadline, what);
    if (op == Op::Allgather) s.send(send, bytes, deadline, what);
    if (op == Op::Broadcast && root == o_.rank) s.send(recv, bytes, deadline, what);
    const Clock::time_point answer = deadline + kAnswerGrace;
    readStatus(s, answer, what);
    if (op == Op::Allgather) s.recv(recv, bytes * static_cast<std::size_t>(o_.world), answer, what);
    if (op == Op::Broadcast && root != o_.rank) s.recv(recv, bytes, answer, what);
  }

  void readStatus(Socket& s, Clock::time_point deadline, std::string_view what) {
    const uint64_t status = s.recvU64(deadline, what);
    if (status == static_cast<uint64_t>(Status::Ok)) return;
    const auto fault = static_cast<Fault>(s.recvU64(deadline, what));
    throwFault(fault, fmt::format("{} (said by rank 0; this is rank {})",
                                  s.recvText(1 << 16, deadline, what), o_.rank));
  }

  // Rank 0: tells every connected rank, then throws. Best effort: a rank
  // that cannot be told fails by itself at its own deadline.
  [[noreturn]] void failAll(Fault fault, const std::string& text) {
    const Clock::time_point deadline = Clock::now() + milliseconds(1000);
    for (std::size_t r = 1; r < peers_.size(); ++r) {
      if (peers_[r].fd() < 0) continue;
      try {
        peers_[r].sendU64(static_cast<uint64_t>(Status::Failed), deadline, "error report");
        peers_[r].sendU64(static_cast<uint64_t>(fault), deadline, "error report");
        peers_[r].sendText(text, deadline, "error report");
      } catch (const Error&) {
      }
    }
    HIR_LOG_WARN(Subsys::Init, "{}", text);
    throwFault(fault, text);
  }

  TcpBootstrapOptions o_;
  std::string node_;
  int local_rank_ = 0, local_size_ = 1;
  int listener_ = -1;
  std::vector<Socket> peers_;  // rank 0: one per rank (none for itself); others: rank 0's
  std::string broken_;
};

// An integer variable of the launcher: `name` must be set when `required`.
std::optional<int64_t> launcherInteger(const char* name, int64_t min, int64_t max,
                                       bool required, std::string_view launcher) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    HIR_CHECK_AS(UsageError, !required, "{} but {} is not set", launcher, name);
    return std::nullopt;
  }
  return parseInteger(name, v, min, max);
}

}  // namespace

std::unique_ptr<Bootstrap> createTcpBootstrap(const TcpBootstrapOptions& options) {
  return std::make_unique<TcpBootstrap>(options);
}

bool launchedByTorchrun() {
  if (launchedByMpi()) return false;
  for (const char* var : {"RANK", "WORLD_SIZE"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return true;
  return false;
}

std::unique_ptr<Bootstrap> createBootstrapFromEnvironment(std::chrono::milliseconds timeout) {
  if (launchedByMpi()) {
    HIR_LOG_DEBUG(Subsys::Init, "bootstrap: MPI (an MPI launcher's variables are set)");
    return createMpiBootstrap();
  }
  if (!launchedByTorchrun()) {
    HIR_LOG_DEBUG(Subsys::Init, "bootstrap: one rank (no MPI or torchrun variables)");
    return createSelfBootstrap();
  }
  const std::string_view why = "torchrun's variables are set (RANK or WORLD_SIZE)";
  TcpBootstrapOptions o;
  o.world = static_cast<int>(*launcherInteger("WORLD_SIZE", 1, INT_MAX, true, why));
  o.rank = static_cast<int>(*launcherInteger("RANK", 0, o.world - 1, true, why));
  const char* addr = std::getenv("MASTER_ADDR");
  HIR_CHECK_AS(UsageError, addr != nullptr && *addr != '\0', "{} but MASTER_ADDR is not set", why);
  o.addr = addr;
  if (auto port = launcherInteger("HIR_BOOTSTRAP_PORT", 1, 65535, false, why)) {
    o.port = static_cast<int>(*port);
  } else {
    o.port = static_cast<int>(*launcherInteger("MASTER_PORT", 1, 65535, true, why));
    // torchrun's agent may serve its own store on MASTER_PORT.
    const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (agent_store != nullptr && std::string_view(agent_store) == "True") {
      HIR_CHECK_AS(UsageError, o.port < 65535,
                   "MASTER_PORT is 65535 and torchrun's agent holds it: set HIR_BOOTSTRAP_PORT");
      ++o.port;
    }
  }
  const auto local_rank = launcherInteger("LOCAL_RANK", 0, INT_MAX, false, why);
  const auto local_size = launcherInteger("LOCAL_WORLD_SIZE", 1, INT_MAX, false, why);
  if (local_rank && local_size) {
    HIR_CHECK_AS(UsageError, *local_rank < *local_size,
                 "LOCAL_RANK {} is not below LOCAL_WORLD_SIZE {}", *local_rank, *local_size);
    o.local_rank = static_cast<int>(*local_rank);
    o.local_size = static_cast<int>(*local_size);
  }
  if (int fake = parseFakeNodes(std::getenv("HIR_FAKE_NODES")); fake > 0) {
    NodeAssignment a = fakeNodeAssignment(o.rank, o.world, fake);
    o.node = a.node;
    o.local_rank = a.local_rank;
    o.local_size = a.local_size;
  }
  o.timeout = timeout;
  HIR_LOG_DEBUG(Subsys::Init, "bootstrap: TCP ({}), rank {} of {}, rank 0 at {}:{}", why, o.rank,
                o.world, o.addr, o.port);
  return createTcpBootstrap(o);
}

}  // namespace hir
