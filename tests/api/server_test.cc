// The HTTP API in-process on a loopback port: status codes, JSON errors, body limit, the route
// table well formed, and the OpenAPI description kept true against it (routes and access).
#include "api/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "api/routes.h"
#include "api/submit_request.h"
#include "forwarding_store.h"
#include "support/served_engine.h"
#include "support/test_dir.h"
#include "support/wait.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: nb, gpus: 1, gpu_memory: 8GiB, forms: [share]}]
queues: [{name: notebooks, profile: nb, groups: [research]}]
)";

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(served_.Start(tessera::testing::FreshTestDir("server"), kConfig,
                              [] { return int64_t{1000}; }));
    engine_ = &served_.engine();
    client_ = &served_.client();
    port_ = served_.port();
  }
  httplib::Headers Auth(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }
  static std::string Error(const httplib::Result& r) {
    auto j = Json::parse(r->body, nullptr, false);
    return j.is_discarded() ? "<not json: " + r->body + ">" : j.value("error", "<no error field>");
  }

  tessera::testing::ServedEngine served_;
  Engine* engine_ = nullptr;
  httplib::Client* client_ = nullptr;
  int port_ = 0;
};

TEST_F(ServerTest, HealthNeedsNoTokenAndSaysRoleAndStore) {
  auto r = client_->Get("/v1/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  Json h = Json::parse(r->body);
  EXPECT_EQ(h["ok"], true);
  EXPECT_EQ(h["role"], "leader");
  EXPECT_EQ(h["store"], "ok");
  // Counts only for an admin: an anonymous caller learns up or down, nothing of the load.
  EXPECT_FALSE(h.contains("commits_queued")) << h.dump();
  EXPECT_FALSE(h.contains("jobs_in_memory")) << h.dump();
  EXPECT_FALSE(h.contains("nodes")) << h.dump();
  r = client_->Get("/v1/health", Auth("alice-token-1"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(Json::parse(r->body).contains("jobs_in_memory")) << r->body;
  r = client_->Get("/v1/health", Auth("admin-token-1"));
  ASSERT_TRUE(r);
  h = Json::parse(r->body);
  EXPECT_EQ(h["commits_queued"], 0);
  EXPECT_EQ(h["jobs_in_memory"], 0);
}

TEST_F(ServerTest, StatusCodesAndJsonErrors) {
  auto r = client_->Get("/v1/jobs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(Error(r).find("missing bearer token"), std::string::npos);
  r = client_->Get("/v1/jobs", Auth("wrong-token"));
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Error(r), "unknown token");
  r = client_->Post("/v1/jobs", Auth("alice-token-1"), "{not json", "application/json");
  EXPECT_EQ(r->status, 400);
  // Where and why: it said only "malformed JSON body", which left the writer of a request by hand
  // to guess (a body of Latin-1 text, not UTF-8, read the same as a missing brace).
  EXPECT_EQ(Error(r),
            "malformed JSON body: at line 1, column 3: syntax error while parsing object key - "
            "invalid literal (expected string literal)");
  r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                    "{\"queue\":\"q\",\n\"command\":[\"caf\xe9\"]}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r),
            "malformed JSON body: at line 2, column 17: syntax error while parsing value - invalid "
            "string: ill-formed UTF-8 byte");
  // A key with a space and a key of 201 characters were refused in words that contradicted each
  // other ("1 to 255 printable ASCII characters", "1 to 200 letters, digits or ..."): one rule.
  for (const std::string& key : {std::string("bad key!"), std::string(201, 'k')}) {
    httplib::Headers h = Auth("alice-token-1");
    h.emplace("Idempotency-Key", key);
    r = client_->Post("/v1/jobs", h, R"({"queue":"training","command":["true"]})",
                      "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(Error(r),
              "Idempotency-Key: expected 1 to 200 letters, digits or -_.:/+= (a UUID, say)");
  }
  r = client_->Post("/v1/jobs", Auth("alice-token-1"), "{\"queue\":\"q\"", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(Error(r),
            "malformed JSON body: at line 1, column 13: syntax error while parsing object - "
            "unexpected end of input (expected '}')");
  // A number past what a double holds was a 500 "internal error" (the red team): said, 400.
  r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                    R"({"queue":"training","command":["true"],"gpus":1e400})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r), "malformed JSON body: a number past what JSON numbers hold here (1e400)");
  // A field given twice is refused, not read as its last value (a job went to the second queue
  // named, and its first was never checked), at any depth.
  r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                    R"({"queue":"nope","command":["true"],"queue":"training"})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r), "field 'queue' is given twice in the JSON body");
  r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                    R"({"queue":"training","command":["true"],"env":{"A":"1","A":"2"}})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r), "field 'A' is given twice in the JSON body");
  // The same name in two objects is two fields.
  r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                    R"({"queue":"nope","command":["true"],"env":{"queue":"x"}})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_NE(Error(r).find("unknown queue 'nope'"), std::string::npos) << Error(r);
  // The authentication scheme is case-insensitive (RFC 9110): "bearer" is "Bearer".
  for (const char* scheme : {"bearer ", "BEARER "}) {
    r = client_->Get("/v1/whoami", {{"Authorization", std::string(scheme) + "alice-token-1"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << scheme << r->body;
  }
  // Deep nesting is refused before it is parsed (a stack overflow otherwise, for any token).
  const std::string deep =
      R"({"queue": "x", "command": )" + std::string(200000, '[') + std::string(200000, ']') + "}";
  r = client_->Post("/v1/jobs", Auth("alice-token-1"), deep, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Error(r), "JSON body nested deeper than 64 levels");
  // Brackets inside strings are not nesting.
  r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                    R"({"queue": "nope", "command": [")" + std::string(100, '[') + R"("]})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(Error(r).find("queue"), std::string::npos) << Error(r);
  r = client_->Post("/v1/jobs", Auth("alice-token-1"), R"({"queue":"nope","command":["true"]})",
                    "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(Error(r).find("unknown queue 'nope'"), std::string::npos);
  std::string big =
      R"({"queue":"notebooks","command":["true"],"name":")" + std::string(1100 * 1024, 'x') + "\"}";
  r = client_->Post("/v1/jobs", Auth("alice-token-1"), big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(Error(r).find("1 MiB"), std::string::npos);
  r = client_->Get("/v1/jobs/j-999", Auth("alice-token-1"));
  EXPECT_EQ(r->status, 404);
  r = client_->Post("/v1/agent/register", Auth("alice-token-1"),
                    R"({"node":"x","cpu_milli":1000,"memory_mib":1024})", "application/json");
  EXPECT_EQ(r->status, 403);
  r = client_->Get("/v1/nosuch", Auth("alice-token-1"));
  EXPECT_EQ(r->status, 404);
  // Both refused credentials are in the audit trail (admins read it).
  ASSERT_TRUE(engine_->Tick().ok());
  r = client_->Get("/v1/events?kind=auth.failed", Auth("admin-token-1"));
  ASSERT_EQ(r->status, 200) << r->body;
  const Json failed = Json::parse(r->body)["events"];
  ASSERT_EQ(failed.size(), 2u) << failed.dump();
  EXPECT_EQ(failed[0]["reason"], "missing bearer token (Authorization: Bearer <token>)");
  EXPECT_EQ(failed[1]["reason"], "unknown token");
  EXPECT_EQ(failed[1]["subject"], "/v1/jobs");
  EXPECT_EQ(r->body.find("wrong-token"), std::string::npos)
      << "a presented token is never recorded";
  // None of that changed anything.
  r = client_->Get("/v1/jobs", Auth("admin-token-1"));
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(Json::parse(r->body)["jobs"].empty());
  // A good submission is 201 with the job.
  r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                    R"({"queue":"notebooks","command":["true"]})", "application/json");
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(Json::parse(r->body)["id"], "j-1");
  r = client_->Get("/v1/whoami", Auth("alice-token-1"));
  EXPECT_EQ(Json::parse(r->body)["name"], "alice");
}

// A store whose commits, while `hold` is set, wait for `release` to open (counting the ones
// waiting).
class HeldStore : public tessera::testing::ForwardingStore {
 public:
  HeldStore(std::unique_ptr<store::Store> inner, std::atomic<bool>* hold,
            tessera::testing::Latch* release, std::atomic<int>* waiting)
      : ForwardingStore(std::move(inner)), hold_(hold), release_(release), waiting_(waiting) {}
  Status Commit(const std::vector<store::Event>& events, const std::vector<store::JobRecord>& jobs,
                std::vector<int64_t>* seqs) override {
    ++*waiting_;
    if (hold_->load()) release_->Wait();
    --*waiting_;
    return ForwardingStore::Commit(events, jobs, seqs);
  }

 private:
  std::atomic<bool>* hold_;
  tessera::testing::Latch* release_;
  std::atomic<int>* waiting_;
};

// With one API thread, a submission whose write is slow holds no thread: other requests (an
// agent's heartbeat, a health check) are answered meanwhile, and the submission when it lands.
TEST(ServerThreads, ASubmissionWaitingForTheStoreHoldsNoApiThread) {
  const std::string dir = ::testing::TempDir() + "/server_held_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::atomic<bool> hold{false};
  tessera::testing::Latch release;
  std::atomic<int> waiting{0};
  auto inner = store::Store::Open(dir + "/t.db");
  ASSERT_TRUE(inner.ok());
  auto e = Engine::Open(*ParseConfig(kConfig),
                        std::make_unique<HeldStore>(std::move(*inner), &hold, &release, &waiting),
                        dir, [] { return int64_t{1000}; });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ApiServerOptions options;
  options.io_threads = 1;
  options.workers = 0;  // every route on the one loop: a submission that held it would stall all
  ApiServer server(e->get(), options);
  auto port = server.Bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  std::thread serving([&] { server.Run(50); });
  httplib::Client user("127.0.0.1", *port), agent("127.0.0.1", *port);
  user.set_read_timeout(20, 0);
  agent.set_read_timeout(5, 0);
  const httplib::Headers alice = {{"Authorization", "Bearer alice-token-1"}};
  const httplib::Headers agent_token = {{"Authorization", "Bearer agent-token-1"}};
  auto reg = agent.Post(
      "/v1/agent/register", agent_token,
      R"({"node":"n1","cpu_milli":8000,"memory_mib":65536,"devices":[{"index":0,"model":"H100-80GB","memory_mib":81920}]})",
      "application/json");
  ASSERT_TRUE(reg);
  ASSERT_EQ(reg->status, 200) << reg->body;

  hold = true;
  int submitted_status = 0;
  std::string submitted_body;
  std::thread submitter([&] {
    auto r = user.Post("/v1/jobs", alice, R"({"queue":"notebooks","command":["true"]})",
                       "application/json");
    if (!r) return;
    submitted_status = r->status;
    submitted_body = r->body;
  });
  tessera::testing::WaitFor([&] { return waiting.load() > 0; }, std::chrono::seconds(5));
  ASSERT_GT(waiting.load(), 0) << "the submission never reached the store";
  auto hb = agent.Post("/v1/agent/heartbeat", agent_token, R"({"node":"n1"})", "application/json");
  ASSERT_TRUE(hb) << "a heartbeat was not answered while a submission waited for the store";
  EXPECT_EQ(hb->status, 200) << hb->body;
  auto health = agent.Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_GT(waiting.load(), 0) << "the write ended early: the test showed nothing";
  release.CountDown();
  submitter.join();
  ASSERT_EQ(submitted_status, 201) << submitted_body;
  EXPECT_EQ(Json::parse(submitted_body)["id"], "j-1");
  server.Stop();
  serving.join();
}

TEST_F(ServerTest, OutputIsServedInRanges) {
  auto r = client_->Post("/v1/jobs", Auth("alice-token-1"),
                         R"({"queue":"notebooks","command":["true"]})", "application/json");
  ASSERT_EQ(r->status, 201);
  const std::string id = Json::parse(r->body)["id"];
  ASSERT_TRUE(engine_->agents()
                  .WriteOutput(engine_->config().identities[0], id, 0, "0123456789")
                  .ok());  // an admin may
  const std::string path = "/v1/jobs/" + id + "/output";
  r = client_->Get(path.c_str(), Auth("alice-token-1"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "0123456789");
  EXPECT_EQ(r->get_header_value("X-Output-Size"), "10");
  httplib::Headers ranged = Auth("alice-token-1");
  ranged.emplace("Range", "bytes=2-5");
  r = client_->Get(path.c_str(), ranged);
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(r->body, "2345");
  EXPECT_EQ(r->get_header_value("Content-Range"), "bytes 2-5/10");
  r = client_->Get((path + "?offset=7").c_str(), Auth("alice-token-1"));
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(r->body, "789");
  r = client_->Get((path + "?offset=x").c_str(), Auth("alice-token-1"));
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(Error(r).find("'offset'"), std::string::npos);
  ranged = Auth("alice-token-1");
  ranged.emplace("Range", "bytes=5-2");
  EXPECT_EQ(client_->Get(path.c_str(), ranged)->status, 400);
  // The largest LAST there is: to the end (its length is not computed by overflowing).
  ranged = Auth("alice-token-1");
  ranged.emplace("Range", "bytes=0-9223372036854775807");
  r = client_->Get(path.c_str(), ranged);
  EXPECT_EQ(r->status, 200) << "all of it";
  EXPECT_EQ(r->body, "0123456789");
  // A Range starting past the end is unsatisfiable (RFC 9110, 15.5.17): 416, saying the size.
  // (?offset= at the end stays 206 and empty: a follower waiting for more output.)
  ranged = Auth("alice-token-1");
  ranged.emplace("Range", "bytes=10-");
  r = client_->Get(path.c_str(), ranged);
  EXPECT_EQ(r->status, 416);
  EXPECT_EQ(r->get_header_value("Content-Range"), "bytes */10");
  r = client_->Get((path + "?offset=10").c_str(), Auth("alice-token-1"));
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(r->body, "");
  // A suffix range: the last N bytes (the tail of a log), all of it when N is more.
  const std::vector<std::tuple<std::string, int, std::string, std::string>> suffixes = {
      {"bytes=-3", 206, "789", "bytes 7-9/10"},
      {"bytes=-10", 200, "0123456789", ""},
      {"bytes=-99", 200, "0123456789", ""},
  };
  for (const auto& [range, status, body, content_range] : suffixes) {
    ranged = Auth("alice-token-1");
    ranged.emplace("Range", range);
    r = client_->Get(path.c_str(), ranged);
    EXPECT_EQ(r->status, status) << range;
    EXPECT_EQ(r->body, body) << range;
    EXPECT_EQ(r->get_header_value("Content-Range"), content_range) << range;
  }
  ranged = Auth("alice-token-1");
  ranged.emplace("Range", "bytes=-0");  // no bytes at all: unsatisfiable
  EXPECT_EQ(client_->Get(path.c_str(), ranged)->status, 416);
  ranged = Auth("alice-token-1");
  ranged.emplace("Range", "bytes=-");
  EXPECT_EQ(client_->Get(path.c_str(), ranged)->status, 400);
}

// The Submit schema (additionalProperties: false) lists exactly the fields the server takes: it
// once left out secret_args, which a client checking against it would refuse to send.
TEST(OpenApi, TheSubmitSchemaListsExactlyTheFieldsASubmissionTakes) {
  std::ifstream in(TESSERA_SOURCE_DIR "/docs/openapi.json");
  ASSERT_TRUE(in) << "docs/openapi.json missing";
  const Json spec = Json::parse(in);
  std::set<std::string> documented;
  for (const auto& [field, schema] : spec["components"]["schemas"]["Submit"]["properties"].items())
    documented.insert(field);
  EXPECT_EQ(documented, SubmitFields());
}

TEST_F(ServerTest, OpenApiDescribesExactlyTheRoutes) {
  std::ifstream in(TESSERA_SOURCE_DIR "/docs/openapi.json");
  ASSERT_TRUE(in) << "docs/openapi.json missing";
  Json spec = Json::parse(in);
  std::set<std::string> documented, served;
  for (const auto& [path, ops] : spec["paths"].items()) {
    for (const auto& [method, op] : ops.items()) {
      std::string m = method;
      for (char& c : m) c = static_cast<char>(std::toupper(c));
      documented.insert(m + " " + path);
    }
  }
  for (const RouteInfo& r : ApiServer::Routes()) served.insert(r.method + " " + r.openapi_path);
  EXPECT_EQ(documented, served);
  // Who may call each route, as the route table declares it (and the server enforces it): the
  // operation's x-tessera-access names the level (one of x-tessera-access-levels), its security
  // says whether a token is needed (public: none; metrics: a token or none), 401 is documented
  // unless it is public, and 403 where the level refuses some role.
  const Json& levels = spec["x-tessera-access-levels"];
  for (const RouteInfo& r : ApiServer::Routes()) {
    std::string m = r.method;
    for (char& c : m) c = static_cast<char>(std::tolower(c));
    const std::string name = r.method + " " + r.openapi_path;
    if (!spec["paths"].contains(r.openapi_path) || !spec["paths"][r.openapi_path].contains(m))
      continue;  // reported above
    const Json& op = spec["paths"][r.openapi_path][m];
    const std::string access = AccessName(r.access);
    EXPECT_EQ(op.value("x-tessera-access", ""), access) << name;
    EXPECT_TRUE(levels.contains(access)) << access << " is not in x-tessera-access-levels";
    const Json want_security =
        Json::parse(r.access == Access::kPublic    ? "[]"
                    : r.access == Access::kMetrics ? R"([{"bearer": []}, {}])"
                                                   : R"([{"bearer": []}])");
    EXPECT_EQ(op.value("security", Json()), want_security) << name;
    EXPECT_EQ(op["responses"].contains("401"), r.access != Access::kPublic) << name;
    if (r.access != Access::kPublic && r.access != Access::kIdentity) {
      EXPECT_TRUE(op["responses"].contains("403")) << name << ": 403 undocumented";
    }
  }
  EXPECT_EQ(levels.size(), 6u) << "one description per Access level";
  // And every documented route answers something other than "no such endpoint".
  for (const RouteInfo& r : ApiServer::Routes()) {
    std::string path = r.openapi_path;
    size_t brace = path.find("{id}");
    if (brace != std::string::npos) path.replace(brace, 4, "j-1");
    httplib::Result res =
        r.method == "GET" ? client_->Get(path.c_str(), Auth("admin-token-1"))
        : r.method == "POST"
            ? client_->Post(path.c_str(), Auth("admin-token-1"), "{}", "application/json")
            : client_->Put(path.c_str(), Auth("admin-token-1"), "", "text/plain");
    ASSERT_TRUE(res) << r.method << " " << path;
    if (res->status == 404) {
      EXPECT_NE(Error(res), "no such endpoint") << r.method << " " << path;
    }
  }
}

// The route table: each route once (method and pattern), each with one handler, sync or async;
// Routes() lists the same routes with their access and request-log level.
TEST(RouteTable, EachRouteOnceWithOneHandler) {
  const std::vector<Route> table = RouteTable(nullptr, nullptr);
  std::set<std::string> seen;
  for (const Route& r : table) {
    EXPECT_TRUE(seen.insert(r.method + " " + r.pattern).second) << r.method << " " << r.pattern;
    EXPECT_NE(static_cast<bool>(r.handler), static_cast<bool>(r.async))
        << r.method << " " << r.pattern << ": exactly one of handler and async";
  }
  ASSERT_EQ(ApiServer::Routes().size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const RouteInfo& info = ApiServer::Routes()[i];
    EXPECT_EQ(info.method + " " + info.openapi_path, table[i].method + " " + table[i].pattern);
    EXPECT_EQ(info.access, table[i].access) << info.openapi_path;
    EXPECT_EQ(info.request_log, table[i].request_log) << info.openapi_path;
  }
}

}  // namespace
}  // namespace tessera::api
