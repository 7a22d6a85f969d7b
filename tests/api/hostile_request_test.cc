// Hostile requests over a real socket against the in-process API server: the red team's exact
// requests (invalid UTF-8 in a path or a query, which once stored an event that made every page
// of /v1/events answer 500, also after a restart), then a generated test over every route:
// arbitrary bytes in the path, the query, the headers and the body, from every role and none,
// never get a 5xx (nor a dropped connection) nor past the route's declared access, and every read
// endpoint still answers 200 after.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "api/routes.h"
#include "api/server.h"
#include "common/log.h"
#include "common/text.h"
#include "sim/scenario.h"
#include "support/served_engine.h"
#include "support/test_dir.h"
#include "support/wait.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1, run_as: nobody}
  - {name: bob, role: user, groups: [prod], token: bob-token-12, run_as: daemon}
  - {name: agent1, role: agent, nodes: [n1], token: agent1-token-1}
groups: [{name: research}, {name: prod}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues:
  - {name: training, profile: train, groups: [research]}
  - {name: prodq, profile: train, groups: [prod]}
)";

const std::vector<std::string> kTokens = {
    "", "not-a-token-1", "admin-token-1", "alice-token-1", "bob-token-12", "agent1-token-1"};

// Whether a route of `access` admits the bearer of `token` (kConfig has no metrics_public).
bool Admitted(Access access, const std::string& token) {
  if (access == Access::kPublic) return true;
  if (token == "admin-token-1") return true;
  if (token == "alice-token-1" || token == "bob-token-12")
    return Admits(access, Role::kUser, false);
  if (token == "agent1-token-1") return Admits(access, Role::kAgent, false);
  return false;  // no token, or an unknown one
}

// One request written byte for byte on a fresh connection; the status code of the answer, or
// 0 when none came (the connection was dropped).
int RawRequest(int port, const std::string& bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int status = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    std::string got;
    char buf[4096];
    while (got.find("\r\n") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    if (got.rfind("HTTP/1.1 ", 0) == 0 && got.size() >= 12)
      status = std::atoi(got.substr(9, 3).c_str());
  }
  close(fd);
  return status;
}

std::string Request(const std::string& method, const std::string& target, const std::string& token,
                    const std::string& body = "", const std::string& extra_headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  r += extra_headers;
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return r;
}

class HostileRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("hostile");
    Start();
  }
  // The engine over dir_'s store (again, after Stop: a restart), with agent1's node registered.
  void Start() {
    ASSERT_TRUE(served_.Start(
        dir_, kConfig, [] { return int64_t{1'000'000}; },
        [](EngineConfig& c) { c.whatif.replay = sim::WhatIfReport; }));  // as `tessera serve`
    port_ = served_.port();
    client_ = &served_.client();
    ASSERT_EQ(served_.Send("POST", "/v1/agent/register", "agent1-token-1",
                           R"({"node":"n1","cpu_milli":64000,"memory_mib":262144,"devices":[)"
                           R"({"index":0,"model":"H100-80GB","memory_mib":81920,"uuid":"u0"}]})"),
              200)
        << served_.body();
  }
  void Stop() {
    served_.Stop();
    client_ = nullptr;
  }
  int Get(const std::string& path, const std::string& token) {
    auto r = client_->Get(path.c_str(), {{"Authorization", "Bearer " + token}});
    return r ? r->status : 0;
  }
  // Every read endpoint answers an admin with 200.
  void ExpectReadsAnswer(const std::string& when) {
    for (const RouteInfo& r : ApiServer::Routes()) {
      if (r.method != "GET" || r.openapi_path.find('{') != std::string::npos) continue;
      std::string path = r.openapi_path;
      if (path == "/v1/agent/orders") path += "?node=n1&wait_ms=0";
      if (path == "/v1/whatif/scenario") continue;  // needs a scenario name; covered below
      EXPECT_EQ(Get(path, "admin-token-1"), 200) << path << " " << when;
    }
    auto ev = client_->Get("/v1/events?limit=1000", {{"Authorization", "Bearer admin-token-1"}});
    ASSERT_TRUE(ev);
    EXPECT_EQ(ev->status, 200) << when << ": " << ev->body;
  }

  tessera::testing::ServedEngine served_;
  std::string dir_;
  int port_ = 0;
  httplib::Client* client_ = nullptr;
};

TEST_F(HostileRequestTest, InvalidUtf8InAPathOrQueryNeverBreaksTheEventLog) {
  // The red team's requests: unauthenticated, and an agent's long poll for a node named %FF.
  const int a = RawRequest(port_, Request("GET", "/v1/jobs/%FF%FE", ""));
  EXPECT_EQ(a, 400);
  const int b =
      RawRequest(port_, Request("GET", "/v1/agent/orders?node=%FF&wait_ms=0", "agent1-token-1"));
  EXPECT_EQ(b, 400);
  const int c = RawRequest(port_, Request("GET", "/v1/jobs?state=%1B%5B2J", "alice-token-1"));
  EXPECT_EQ(c, 400);
  ExpectReadsAnswer("after invalid UTF-8 in requests");
  // A database written before the fix may hold such an event already: it renders (bytes
  // replaced), and so after a restart.
  Stop();
  {
    auto store = store::Store::Open(dir_ + "/t.db");
    ASSERT_TRUE(store.ok());
    store::Event ev;
    ev.time_ms = 1;
    ev.actor = "-\xFF";
    ev.kind = "auth.failed";
    ev.subject = "/v1/jobs/\xFF\xFE";
    ev.reason = "unknown token \xC0";
    ev.data = "{}";
    ASSERT_TRUE((*store)->Commit({ev}, {}, nullptr).ok());
  }
  Start();
  ExpectReadsAnswer("after a restart over a stored invalid event");
  auto ev =
      client_->Get("/v1/events?kind=auth.failed", {{"Authorization", "Bearer admin-token-1"}});
  ASSERT_TRUE(ev);
  ASSERT_EQ(ev->status, 200);
  EXPECT_TRUE(IsValidUtf8(ev->body));
  EXPECT_NE(ev->body.find("/v1/jobs/\xEF\xBF\xBD\xEF\xBF\xBD"), std::string::npos) << ev->body;
}

// The red team: paths up to the header's limit (64 KiB), sent without a token, were written
// whole into the request log (2.8 GB in 30 s from one client) and into every auth.failed event
// (the store grew 80 MB in 30 s, kept 30 days). Both keep the path's first 256 bytes and its
// length.
TEST_F(HostileRequestTest, ALongPathIsRecordedCutNotWhole) {
  const log::Level level = log::CurrentLevel();
  const log::Format format = log::CurrentFormat();
  std::mutex mu;
  size_t longest = 0;
  std::string request_line;
  log::ConfigureForTesting(log::Level::kInfo, log::Format::kJson, [&](std::string_view line) {
    std::lock_guard<std::mutex> l(mu);
    if (line.find("\"request\"") == std::string_view::npos) return;
    longest = std::max(longest, line.size());
    if (line.find("aaaa") != std::string_view::npos) request_line = std::string(line);
  });
  const std::string path = "/v1/jobs/" + std::string(60000, 'a');
  EXPECT_EQ(RawRequest(port_, Request("GET", path, "")), 401);
  EXPECT_EQ(RawRequest(port_, Request("GET", "/zz" + std::string(60000, 'b'), "")), 404);
  log::Configure(level, format);
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_LT(longest, 1024u) << request_line.substr(0, 400);
    EXPECT_NE(request_line.find("(60009 bytes)"), std::string::npos) << request_line.substr(0, 600);
  }
  auto ev = client_->Get("/v1/events?kind=auth.failed&limit=10",
                         {{"Authorization", "Bearer admin-token-1"}});
  ASSERT_TRUE(ev);
  ASSERT_EQ(ev->status, 200);
  const auto events = nlohmann::json::parse(ev->body)["events"];
  ASSERT_FALSE(events.empty()) << ev->body;
  const std::string subject = events[0]["subject"];
  EXPECT_LT(subject.size(), 300u);
  EXPECT_EQ(subject.rfind("/v1/jobs/aaaa", 0), 0u) << subject;
  EXPECT_NE(subject.find("(60009 bytes)"), std::string::npos) << subject;
}

// The red team: the dashboard, which acts with the token it keeps, could be framed by another
// site (clickjacking). It says it may not be, in both ways browsers read.
TEST_F(HostileRequestTest, TheDashboardMayNotBeFramed) {
  auto r = client_->Get("/");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("X-Frame-Options"), "DENY");
  EXPECT_NE(r->get_header_value("Content-Security-Policy").find("frame-ancestors 'none'"),
            std::string::npos);
}

TEST_F(HostileRequestTest, ArbitraryBytesOnEveryRouteFromEveryRoleNeverGetA5xx) {
  std::mt19937_64 rng(20261202);
  auto byte = [&] { return static_cast<char>(rng() & 0xFF); };
  auto bytes = [&](size_t max) {
    std::string s(rng() % (max + 1), '\0');
    for (char& ch : s) ch = byte();
    return s;
  };
  auto pct = [](const std::string& s) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char ch : s) {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
    return out;
  };
  // Valid bodies to mutate, so that hostile bytes also reach the handlers past JSON parsing.
  const std::vector<std::string> bodies = {
      R"({"queue":"training","command":["true"],"env":{"A":"b"},"name":"n"})",
      R"({"node":"n1","cpu_milli":64000,"memory_mib":262144,"devices":[{"index":0,"model":"H100-80GB","memory_mib":81920,"uuid":"u0"}]})",
      R"({"node":"n1","running":[],"finished":[]})",
  };
  auto mutate = [&](std::string s) {
    switch (rng() % 5) {
      case 0:
        return bytes(300);  // raw bytes, not JSON
      case 1: {             // a string value replaced with escaped arbitrary code units
        const size_t q = s.find("\"", s.find(':'));
        std::string esc;
        for (int i = 0; i < 6; ++i) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned>(rng() & 0xFFFF));
          esc += u;
        }
        return q == std::string::npos ? s : s.insert(q + 1, esc);
      }
      case 2: {  // raw bytes inside a string
        const size_t q = s.find("\"", s.find(':'));
        return q == std::string::npos ? s : s.insert(q + 1, bytes(12));
      }
      case 3: {  // a byte flipped anywhere
        if (!s.empty()) s[rng() % s.size()] = byte();
        return s;
      }
      default:
        return s;
    }
  };
  int requests = 0, refused = 0;
  for (const RouteInfo& route : ApiServer::Routes()) {
    for (const std::string& token : kTokens) {
      for (int round = 0; round < 12; ++round) {
        std::string path = route.openapi_path;
        const size_t at = path.find('{');
        if (at != std::string::npos) {
          const size_t end = path.find('}', at);
          path.replace(at, end - at + 1,
                       rng() % 2 ? pct(bytes(8)) : "j-" + std::to_string(rng() % 5));
        }
        if (rng() % 4 == 0) path += pct(bytes(6));  // trailing bytes: most go to 404
        std::string query;
        for (const char* name :
             {"node", "after", "limit", "state", "offset", "by", "kind", "wait_ms", "tail"}) {
          if (rng() % 3 != 0) continue;
          query += (query.empty() ? "?" : "&") + std::string(name) + "=" +
                   (rng() % 2 ? pct(bytes(8)) : std::to_string(static_cast<int64_t>(rng())));
        }
        if (route.openapi_path == "/v1/agent/orders" &&
            query.find("wait_ms") == std::string::npos) {
          query += (query.empty() ? "?" : "&") + std::string("wait_ms=0");
        }
        std::string headers;
        if (rng() % 2) headers += "Idempotency-Key: " + bytes(10) + "\r\n";
        if (rng() % 3 == 0) headers += "Range: bytes=" + bytes(6) + "\r\n";
        if (rng() % 4 == 0) headers += "X-" + std::to_string(round) + ": " + bytes(20) + "\r\n";
        const std::string body = route.method == "GET" ? "" : mutate(bodies[rng() % bodies.size()]);
        // A lone CR or LF in a header value would end the header early: made a space. (A CR LF
        // pair inside the bytes starts another header line, as a client may send.)
        std::string clean;
        for (size_t i = 0; i < headers.size(); ++i) {
          const bool crlf = headers[i] == '\r' && i + 1 < headers.size() && headers[i + 1] == '\n';
          if (crlf) {
            clean += "\r\n";
            ++i;
          } else if (headers[i] == '\r' || headers[i] == '\n') {
            clean += ' ';
          } else {
            clean += headers[i];
          }
        }
        const int status =
            RawRequest(port_, Request(route.method, path + query, token, body, clean));
        ++requests;
        if (status >= 400) ++refused;
        ASSERT_NE(status, 0) << route.method << " " << path + query << " (no answer)";
        ASSERT_LT(status, 500) << route.method << " " << path + query << " token '" << token << "'";
        // However hostile the request, a caller the route's access refuses never gets through.
        if (!Admitted(route.access, token)) {
          ASSERT_GE(status, 400) << route.method << " " << path + query << " token '" << token
                                 << "' (access " << AccessName(route.access) << ")";
        }
      }
    }
  }
  EXPECT_GT(requests, 1000);
  EXPECT_GT(refused, 0);
  ExpectReadsAnswer("after the generated requests");
  auto ev = client_->Get("/v1/events?limit=1000", {{"Authorization", "Bearer admin-token-1"}});
  ASSERT_TRUE(ev);
  EXPECT_TRUE(IsValidUtf8(ev->body));
  auto jobs = client_->Get("/v1/jobs?limit=1000", {{"Authorization", "Bearer admin-token-1"}});
  ASSERT_TRUE(jobs);
  EXPECT_TRUE(IsValidUtf8(jobs->body));
}

// An identity's requests in the server at once are bounded (max_requests_per_identity): past its
// slots it gets 429 with Retry-After at once; a slot comes back with each answer; agents and
// other identities are not counted against it.
// The red team's one request that took gigabytes: a chunked body whose chunk header never ends
// (a chunk extension of endless bytes, no CRLF), without a token. The parser waited for the end
// of the line in a read buffer without a limit: 3 GB resident after 2 GiB sent, kept after the
// connection closed. The buffer has a limit now: the server stops reading at once and answers
// 400; a sender gets nowhere near the 64 MiB it tries to send.
TEST_F(HostileRequestTest, AChunkHeaderThatNeverEndsIsRefusedNotBuffered) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string head =
      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  const std::string junk(64 * 1024, 'a');
  int64_t sent = 0;
  while (sent < 64 * 1024 * 1024) {
    const ssize_t n = send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;  // closed by the server, or it stopped reading (the send timed out)
    sent += n;
  }
  std::string got;
  char buf[4096];
  for (ssize_t n; got.find("\r\n") == std::string::npos && (n = recv(fd, buf, sizeof buf, 0)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  close(fd);
  // What the kernel's socket buffers hold is all the server does not read.
  EXPECT_LT(sent, 32 * 1024 * 1024) << "the server read " << sent << " bytes of one chunk header";
  if (!got.empty()) {
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  }
  ExpectReadsAnswer("after the endless chunk header");
}

TEST(RequestSlots, AnIdentityHoldsAtMostItsSlots) {
  RequestSlots slots(2);
  EXPECT_TRUE(slots.Acquire("alice"));
  EXPECT_TRUE(slots.Acquire("alice"));
  EXPECT_FALSE(slots.Acquire("alice"));
  EXPECT_TRUE(slots.Acquire("bob"));
  slots.Release("alice");
  EXPECT_EQ(slots.InUse("alice"), 1);
  {
    RequestSlots::Held held(&slots, "alice");  // as a route takes one
    EXPECT_TRUE(slots.Acquire("alice"));
    EXPECT_FALSE(slots.Acquire("alice"));
    slots.Release("alice");
  }
  EXPECT_EQ(slots.InUse("alice"), 0);
  EXPECT_EQ(slots.InUse("bob"), 1);
}

TEST_F(HostileRequestTest, ConcurrentRequestsOfOneIdentityGet429OrTheirAnswerAndSlotsComeBack) {
  for (int i = 0; i < 200; ++i) {
    auto r =
        client_->Post("/v1/jobs", {{"Authorization", "Bearer alice-token-1"}},
                      R"({"queue":"training","command":["true"],"name":"n"})", "application/json");
    ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
  }
  std::atomic<int> ok{0}, limited{0}, other{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 48; ++t) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", port_);
      for (int k = 0; k < 5; ++k) {
        auto r = c.Get("/v1/jobs?limit=999", {{"Authorization", "Bearer alice-token-1"}});
        if (r && r->status == 200) {
          ++ok;
        } else if (r && r->status == 429 && r->get_header_value("Retry-After") == "5") {
          ++limited;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(ok.load(), 0);
  std::printf("48 clients x 5 lists of 200 jobs: %d answered, %d refused with 429\n", ok.load(),
              limited.load());
  // Every slot came back: sequential requests all answer.
  for (int i = 0; i < 40; ++i) ASSERT_EQ(Get("/v1/jobs?limit=999", "alice-token-1"), 200) << i;
}

}  // namespace
}  // namespace tessera::api
