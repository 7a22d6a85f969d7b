// The HTTP server against clients that hold connections or frame requests ambiguously, in-process
// on loopback ports with raw sockets (red-team report, issue 30): connection caps in all and per
// peer address (over them a connection is closed at once, others are served); slow-header and
// slow-body clients dropped at their deadlines while kept-alive connections may idle longer;
// ambiguous framing refused with 400 and the connection closed; idle connections keep no request
// buffers; memory freed by a flood of connections goes back to the system.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/heap.h"
#include "net/http_server.h"
#include "support/free_port.h"
#include "support/wait.h"

namespace tessera::net {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

bool WaitFor(const std::function<bool()>& done, int ms) {
  return tessera::testing::WaitFor(done, std::chrono::milliseconds(ms));
}

// A client socket connected to 127.0.0.1:port, from the loopback address `from` when given;
// -1 when it cannot connect.
int Connect(int port, const std::string& from = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (!from.empty()) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, from.c_str(), &a.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// What the server sends on fd until it closes the connection or `ms` pass; *closed says which.
std::string ReadUntilClosed(int fd, int ms, bool* closed) {
  std::string got;
  *closed = false;
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      *closed = true;
      return got;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// Whether the server has neither closed fd nor sent anything on it.
bool StillOpen(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// The status of the first response in `raw` ("HTTP/1.1 200 OK..."), 0 when there is none.
int StatusOf(const std::string& raw) {
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || raw.size() < 12) return 0;
  return std::atoi(raw.c_str() + 9);
}

int64_t Count(const std::string& haystack, const std::string& needle) {
  int64_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

// This process's resident anonymous memory in KiB (RssAnon: the heap and stacks, not the code
// pages that VmRSS also counts, which grow as new code paths run for the first time).
int64_t AnonKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8));
  }
  return 0;
}

// Bytes the allocator has handed out and not had back (every arena, mmapped chunks included).
int64_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

class HardeningTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions o) {
    server_ = std::make_unique<HttpServer>(o);
    server_->Route("GET", "/v1/health",
                   [](const HttpRequest&, HttpResponse& res) { res.body = "{\"ok\":true}"; });
    server_->Route("POST", "/echo",
                   [](const HttpRequest& req, HttpResponse& res) { res.body = req.body; });
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
    thread_ = std::thread([this] { server_->Run(); });
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  // A connection kept until the test ends; -1 when it could not connect.
  int Open(const std::string& from = "") {
    const int fd = Connect(port_, from);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  void CloseSome(size_t n) {
    for (size_t i = 0; i < n && !fds_.empty(); ++i) {
      ::close(fds_.back());
      fds_.pop_back();
    }
  }
  // GET /v1/health over a new connection: its status, 0 when the connection was closed unanswered.
  int Health(const std::string& from = "") {
    const int fd = Connect(port_, from);
    if (fd < 0) return -1;
    SendAll(fd, "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    bool closed = false;
    const std::string raw = ReadUntilClosed(fd, 5000, &closed);
    ::close(fd);
    return StatusOf(raw);
  }
  // Connections a test may open (two descriptors each, client and server), at most `wanted`.
  static int Affordable(int wanted) {
    rlimit r{};
    getrlimit(RLIMIT_NOFILE, &r);
    const int64_t cur =
        r.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20 : static_cast<int64_t>(r.rlim_cur);
    return static_cast<int>(std::clamp<int64_t>((cur - 256) / 2, 16, wanted));
  }

  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::vector<int> fds_;
};

// A path served under other methods answers 405 with the methods it takes (RFC 9110, 15.5.6),
// not 404 "no such endpoint"; a path served under none is 404.
TEST_F(HardeningTest, AMethodThePathDoesNotTakeIs405WithTheMethodsItDoes) {
  Start(HttpServerOptions{});
  auto ask = [&](const std::string& request) {
    const int fd = Connect(port_);
    SendAll(fd, request);
    bool closed = false;
    const std::string raw = ReadUntilClosed(fd, 5000, &closed);
    ::close(fd);
    return raw;
  };
  const std::string wrong =
      ask("DELETE /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(StatusOf(wrong), 405) << wrong;
  EXPECT_NE(wrong.find("Allow: GET\r\n"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("method DELETE is not allowed here (allowed: GET)"), std::string::npos)
      << wrong;
  const std::string none = ask("GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(StatusOf(none), 404) << none;
}

// A process the server starts (`tessera up`'s agent, a backend's sbatch) does not keep its
// listening socket: killed, `tessera up` once left its agent holding the port, and the next start
// said "Address already in use".
TEST_F(HardeningTest, AChildProcessDoesNotKeepTheListeningPort) {
  Start(HttpServerOptions{});
  // Until it execs, a forked child holds every descriptor: the check is of the program it runs.
  // A close-on-exec pipe tells when the exec has happened (its end closes then).
  int exec_seen[2];
  ASSERT_EQ(::pipe2(exec_seen, O_CLOEXEC), 0);
  const pid_t child = fork();
  if (child == 0) {
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(child, 0);
  ::close(exec_seen[1]);
  char byte;
  while (::read(exec_seen[0], &byte, 1) < 0 && errno == EINTR) {
  }
  ::close(exec_seen[0]);
  server_->Stop();
  thread_.join();
  server_.reset();
  const bool bound = tessera::testing::PortIsFree(port_);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(bound) << "port " << port_ << " is still held by the child";
}

TEST_F(HardeningTest, OverTheConnectionCapANewConnectionIsClosedAtOnceAndOthersAreServed) {
  HttpServerOptions o;
  o.max_connections = 20;
  Start(o);
  for (int i = 0; i < 20; ++i) ASSERT_GE(Open(), 0);
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 20; }, 5000))
      << server_->connections();

  const int over = Connect(port_);
  ASSERT_GE(over, 0);  // accepted, then closed
  const auto t = Clock::now();
  bool closed = false;
  EXPECT_EQ(ReadUntilClosed(over, 3000, &closed), "");
  EXPECT_TRUE(closed) << "a connection over the cap was kept open";
  EXPECT_LT(MsSince(t), 1000);
  ::close(over);
  EXPECT_EQ(Health(), 0);  // still full
  EXPECT_EQ(server_->refused_connections(), 2);
  for (int fd : fds_) EXPECT_TRUE(StillOpen(fd)) << "a connection under the cap was closed";

  CloseSome(5);  // room again: served
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 15; }, 5000))
      << server_->connections();
  EXPECT_EQ(Health(), 200);
  EXPECT_EQ(server_->max_connections(), 20);
}

TEST_F(HardeningTest, TheDefaultCapLeavesDescriptorsForTheRestOfTheProcess) {
  Start(HttpServerOptions{});
  rlimit r{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);  // as Bind raised it
  const int64_t limit =
      r.rlim_cur == RLIM_INFINITY ? int64_t{1} << 40 : static_cast<int64_t>(r.rlim_cur);
  const int64_t expected = std::min<int64_t>(limit > 2048 ? limit - 1024 : limit / 2, 50000);
  EXPECT_EQ(server_->max_connections(), expected) << "open-file limit " << limit;
  EXPECT_GT(server_->max_connections(), 0);
}

TEST_F(HardeningTest, ThePerPeerCapCountsEachAddressAndOthersAreServed) {
  HttpServerOptions o;
  o.max_connections_per_peer = 5;
  o.limit_loopback_peers = true;  // the test's peers are all loopback addresses
  Start(o);
  for (int i = 0; i < 5; ++i) ASSERT_GE(Open("127.0.0.2"), 0);
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 5; }, 5000));
  EXPECT_EQ(Health("127.0.0.2"), 0) << "a sixth connection from one address was served";
  EXPECT_EQ(Health("127.0.0.3"), 200) << "another address was refused";
  EXPECT_EQ(server_->refused_connections(), 1);
  for (int fd : fds_) EXPECT_TRUE(StillOpen(fd));
  CloseSome(1);
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 4; }, 5000));
  EXPECT_EQ(Health("127.0.0.2"), 200);
}

TEST_F(HardeningTest, LoopbackPeersAreNotCountedUnlessAsked) {
  HttpServerOptions o;
  o.max_connections_per_peer = 5;
  Start(o);
  for (int i = 0; i < 10; ++i) ASSERT_GE(Open("127.0.0.2"), 0);
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 10; }, 5000));
  EXPECT_EQ(Health("127.0.0.2"), 200);
  EXPECT_EQ(server_->refused_connections(), 0);
}

TEST_F(HardeningTest, ASlowHeaderClientIsDroppedAtTheHeaderDeadline) {
  HttpServerOptions o;
  o.header_timeout_ms = 1500;
  Start(o);
  const int fd = Open();
  ASSERT_GE(fd, 0);
  // Slowloris: a header byte every 100 ms, never the blank line that ends it.
  const std::string header =
      "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 'a');
  const auto t = Clock::now();
  int64_t closed_after = -1;
  for (size_t i = 0; i < header.size() && MsSince(t) < 8000; ++i) {
    if (!SendAll(fd, header.substr(i, 1))) {
      closed_after = MsSince(t);
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char c;
      if (::recv(fd, &c, 1, 0) <= 0) {
        closed_after = MsSince(t);
        break;
      }
    }
  }
  ASSERT_GE(closed_after, 0) << "a slow-header client was kept for 8 s";
  EXPECT_GE(closed_after, 1300);
  EXPECT_LE(closed_after, 4000);
  EXPECT_EQ(Health(), 200);
}

TEST_F(HardeningTest, ASilentNewConnectionIsDroppedAtTheHeaderDeadline) {
  HttpServerOptions o;
  o.header_timeout_ms = 1000;
  Start(o);
  const int fd = Open();
  ASSERT_GE(fd, 0);
  const auto t = Clock::now();
  bool closed = false;
  ReadUntilClosed(fd, 6000, &closed);
  EXPECT_TRUE(closed) << "a connection that sent nothing was kept for 6 s";
  EXPECT_GE(MsSince(t), 800);
}

TEST_F(HardeningTest, ASlowBodyIsDroppedAtTheBodyDeadline) {
  HttpServerOptions o;
  o.body_timeout_ms = 1000;
  Start(o);
  const int fd = Open();
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(
      SendAll(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"));
  const auto t = Clock::now();
  bool closed = false;
  ReadUntilClosed(fd, 6000, &closed);
  EXPECT_TRUE(closed) << "a body that never came was waited for 6 s";
  EXPECT_GE(MsSince(t), 800);
}

TEST_F(HardeningTest, AKeptAliveConnectionMayIdleLongerThanTheHeaderDeadline) {
  HttpServerOptions o;
  o.header_timeout_ms = 500;
  o.idle_timeout_ms = 20000;
  Start(o);
  const int fd = Open();
  ASSERT_GE(fd, 0);
  const std::string get = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(SendAll(fd, get));
    bool closed = false;
    const std::string raw = ReadUntilClosed(fd, 1000, &closed);
    EXPECT_EQ(StatusOf(raw), 200) << "request " << i;
    ASSERT_FALSE(closed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // idle: three header deadlines
  }
  EXPECT_TRUE(StillOpen(fd));
}

TEST_F(HardeningTest, ChunkedIdentityGets400AndTheConnectionIsClosed) {
  Start(HttpServerOptions{});
  // Beast alone reads this as a POST without a body, then "5\r\nhello..." as a second request.
  const std::vector<std::string> smuggling = {
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, "
      "identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: "
      "5\r\n\r\nhello",
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nGET /v1/health "
      "HTTP/1.1\r\n\r\n",
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 0\r\n\r\nhello",
  };
  for (const std::string& req : smuggling) {
    const int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, req));
    bool closed = false;
    const std::string raw = ReadUntilClosed(fd, 5000, &closed);
    EXPECT_EQ(StatusOf(raw), 400) << req << "\n---\n" << raw;
    EXPECT_EQ(Count(raw, "HTTP/1.1 "), 1) << "more than one answer:\n" << raw;
    EXPECT_TRUE(closed) << req;
  }
  // Sound chunked framing is still read.
  const int fd = Open();
  ASSERT_TRUE(SendAll(
      fd,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n"));
  bool closed = false;
  const std::string raw = ReadUntilClosed(fd, 5000, &closed);
  EXPECT_EQ(StatusOf(raw), 200) << raw;
  EXPECT_NE(raw.find("\r\n\r\nhello"), std::string::npos) << raw;
}

TEST_F(HardeningTest, IdleConnectionsKeepNoRequestBuffers) {
  HttpServerOptions o;
  o.workers = 0;
  Start(o);
  const int n = Affordable(400);
  // Each connection's one request has a 48 KiB header: its read buffer grows to hold it.
  const std::string get =
      "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Fill: " + std::string(48 * 1024, 'a') + "\r\n\r\n";
  std::vector<int> conns;
  for (int i = 0; i < 20; ++i) conns.push_back(Open());  // the loop's own allocations settle
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 20; }, 5000));
  // Time for the loop's allocations to settle before the heap is measured (nothing to wait on).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t before = HeapInUse();
  for (int i = 0; i < n; ++i) {
    const int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, get));
    conns.push_back(fd);
  }
  for (size_t i = 20; i < conns.size(); ++i) {
    std::string raw;
    while (raw.find("{\"ok\":true}") == std::string::npos) {
      char buf[1024];
      const ssize_t got = ::recv(conns[i], buf, sizeof buf, 0);
      ASSERT_GT(got, 0);
      raw.append(buf, static_cast<size_t>(got));
    }
  }
  // The answers' completions run (not observable from here: a sleep, before the measurement).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(server_->connections(), n + 20);
  const int64_t per_connection = (HeapInUse() - before) / n;
  EXPECT_LT(per_connection, 8 * 1024) << "bytes held per idle connection after one request";
}

TEST_F(HardeningTest, MemoryFreedByAFloodOfConnectionsGoesBackToTheSystem) {
  HttpServerOptions o;
  o.workers = 0;
  Start(o);
  const int n = Affordable(1500);
  const std::string fill =
      "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Fill: " + std::string(40 * 1024, 'a');
  const std::string get = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(Health(), 200);
  // The server settles before its memory is measured (nothing to wait on: a sleep).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t before = AnonKiB();
  // A flood: each connection sends most of a large header and waits; the server holds what it
  // read. Every 50th connection is a client that stays (a request, then idle): its session lies
  // among the flood's buffers and keeps the heap from shrinking back on its own.
  std::vector<int> flood;
  for (int i = 0; i < n; ++i) {
    const int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    if (i % 50 == 25) {
      fds_.push_back(fd);
      ASSERT_TRUE(SendAll(fd, get));
      continue;
    }
    ASSERT_TRUE(SendAll(fd, fill));
    flood.push_back(fd);
  }
  const int64_t staying = static_cast<int64_t>(fds_.size());
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == n; }, 10000));
  // The server reads what each connection sent: on a loaded machine that takes a while.
  int64_t peak = AnonKiB();
  WaitFor(
      [&] {
        peak = std::max(peak, AnonKiB());
        return peak - before > static_cast<int64_t>(n) * 30;
      },
      10000);
  for (int fd : flood) ::close(fd);
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == staying; }, 10000));
  // Returned within a few seconds of the last close: to within 10% of the level before, or (this
  // test process starts at a megabyte or two) 5% of what the flood took.
  const int64_t slack = std::max(before / 10, (peak - before) / 20);
  int64_t after = AnonKiB();
  WaitFor(
      [&] {
        after = AnonKiB();
        return after <= before + slack;
      },
      8000);
  std::printf(
      "[memory] %d connections, %lld staying: anonymous RSS before %lld KiB, peak %lld KiB, after "
      "%lld KiB\n",
      n, static_cast<long long>(staying), static_cast<long long>(before),
      static_cast<long long>(peak), static_cast<long long>(after));
  EXPECT_GT(peak - before, static_cast<int64_t>(n) * 20)
      << "the flood did not grow the heap: the test shows nothing";
  EXPECT_LE(after, before + slack)
      << "anonymous RSS before " << before << " KiB, peak " << peak << " KiB";
  EXPECT_EQ(Health(), 200);
}

// The chunks a thread's malloc cache keeps are in use to the heap: malloc_trim alone leaves them
// (and the pages they lie on). TakeThreadCache and FreeAndTrim hand them back (net/heap.h).
TEST(HeapTest, AThreadsMallocCacheGoesBackToTheHeap) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's malloc cache only";
#else
  int64_t cached = 0, trimmed = 0, taken = 0;
  std::thread([&] {
    // Seven freed chunks of each cached size (32 to 1,040 bytes): about 240 KB in the cache.
    std::vector<void*> chunks;
    for (size_t request = 24; request <= 1032; request += 16) {
      for (int i = 0; i < 7; ++i) chunks.push_back(std::malloc(request));
    }
    for (void* p : chunks) std::free(p);
    cached = HeapInUse();
    malloc_trim(0);
    trimmed = HeapInUse();
    FreeAndTrim(TakeThreadCache());
    taken = HeapInUse();
  }).join();
  std::printf(
      "[heap] in use: %lld bytes with the cache full, %lld after malloc_trim, %lld after "
      "FreeAndTrim(TakeThreadCache())\n",
      static_cast<long long>(cached), static_cast<long long>(trimmed),
      static_cast<long long>(taken));
  EXPECT_GT(trimmed, cached - 20'000)
      << "malloc_trim alone emptied the cache: the test shows nothing";
  EXPECT_LT(taken, trimmed - 200'000) << "the thread's cached chunks are still in use";
#endif
}

}  // namespace
}  // namespace tessera::net
