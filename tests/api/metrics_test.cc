// GET /metrics over HTTP for a known state: one node of two cards registered through the agent
// API, a whole card held by research (guaranteed), a quarter-card share held by vision
// (borrowed), a job pending; telemetry that marks the whole card's job held but idle. The served
// text is parsed and its numbers checked exactly, and `promtool check metrics` (Debian's
// prometheus package; missing is a failure) must find nothing wrong with it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "api/server.h"
#include "support/test_dir.h"
#include "support/wait.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
idle_after: 1m
heartbeat_timeout: 10m
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: victor, role: user, groups: [vision], token: victor-token-1}
  - {name: agent, role: agent, nodes: [n1], token: agent-token-1}
groups:
  - {name: research, reservation: {gpu: 1}}
  - {name: vision}
profiles:
  - {name: train, gpus: 1, cpu: 2, memory: 1GiB, forms: [whole]}
  - {name: nb, gpus: 1, gpu_fraction: 0.25, gpu_memory: 8GiB, cpu: 500m, memory: 512MiB, forms: [share]}
queues:
  - {name: training, profile: train, groups: [research, vision]}
  - {name: notebooks, profile: nb, groups: [vision]}
)";

constexpr int64_t kStartMs = 1'700'000'000'000;
constexpr double kMiB = 1024.0 * 1024.0;

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The exposition text's samples (comments skipped), label values unescaped. Fails the test on a
// line it cannot read.
std::vector<Sample> Parse(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find("=\"", i);
        EXPECT_NE(eq, std::string::npos) << line;
        if (eq == std::string::npos) return out;
        const std::string key = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        s.labels[key] = value;
        ++i;  // the closing quote
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    s.value = std::stod(line.substr(i));
    out.push_back(s);
  }
  return out;
}

class MetricsTest : public ::testing::Test {
 protected:
  void Start(const std::string& config) {
    dir_ = tessera::testing::FreshTestDir("metrics");
    auto store = store::Store::Open(dir_ + "/t.db");
    ASSERT_TRUE(store.ok());
    auto c = ParseConfig(config);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto e = Engine::Open(*c, std::move(*store), dir_, [this] { return now_ms_.load(); });
    ASSERT_TRUE(e.ok());
    engine_ = std::move(*e);
    server_ = std::make_unique<ApiServer>(engine_.get());
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    thread_ = std::thread([this] { server_->Run(50); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    ASSERT_TRUE(tessera::testing::WaitFor(
        [&] { return static_cast<bool>(client_->Get("/v1/health")); }, std::chrono::seconds(2)))
        << "the server never answered";
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Result Post(const std::string& path, const std::string& token, const std::string& body) {
    return client_->Post(path.c_str(), {{"Authorization", "Bearer " + token}}, body,
                         "application/json");
  }
  std::string Submit(const std::string& token, const std::string& queue) {
    auto r = Post("/v1/jobs", token, R"({"queue":")" + queue + R"(","command":["sleep","1000"]})");
    EXPECT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
    EXPECT_TRUE(engine_->RunCycle().ok());
    return r && r->status == 201 ? nlohmann::json::parse(r->body)["id"].get<std::string>() : "";
  }
  nlohmann::json Job(const std::string& id) {
    auto r = client_->Get(("/v1/jobs/" + id).c_str(), {{"Authorization", "Bearer admin-token-1"}});
    return r && r->status == 200 ? nlohmann::json::parse(r->body) : nlohmann::json::object();
  }
  int Code(const httplib::Headers& h) {
    auto r = client_->Get("/metrics", h);
    return r ? r->status : 0;
  }
  // The sum of the samples named `name` whose labels include `want`, and how many there were.
  static double Sum(const std::vector<Sample>& all, const std::string& name,
                    const std::map<std::string, std::string>& want = {}, int* count = nullptr) {
    double sum = 0;
    int n = 0;
    for (const Sample& s : all) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : want) match = match && s.labels.count(k) && s.labels.at(k) == v;
      if (!match) continue;
      sum += s.value;
      ++n;
    }
    if (count) *count = n;
    return sum;
  }

  std::atomic<int64_t> now_ms_{kStartMs};
  std::string dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
};

TEST_F(MetricsTest, KnownStateHasExactNumbersAndPassesPromtool) {
  Start(kConfig);
  std::string devices;
  for (int i = 0; i < 2; ++i) {
    devices += std::string(i ? "," : "") + R"({"index":)" + std::to_string(i) +
               R"(,"model":"H100-80GB","memory_mib":81920,"uuid":"u)" + std::to_string(i) + "\"}";
  }
  auto r =
      Post("/v1/agent/register", "agent-token-1",
           R"({"node":"n1","cpu_milli":64000,"memory_mib":262144,"devices":[)" + devices + "]}");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");

  const std::string whole = Submit("alice-token-1", "training");
  ASSERT_EQ(Job(whole).value("state", ""), "placed") << Job(whole).dump();
  const std::string share = Submit("victor-token-1", "notebooks");
  ASSERT_EQ(Job(share).value("state", ""), "placed") << Job(share).dump();
  const std::string waiting = Submit("alice-token-1", "training");  // no card is free
  const nlohmann::json w = Job(waiting);
  ASSERT_EQ(w.value("state", ""), "pending") << w.dump();
  const std::string reason = w.value("reason", "");
  const std::string step = reason.substr(0, reason.find(": "));
  ASSERT_EQ(step, "Placement") << reason;

  // Both start; the whole card's job shows no activity for longer than idle_after (1m).
  auto heartbeat = [&](const std::string& extra) {
    auto h = Post("/v1/agent/heartbeat", "agent-token-1",
                  R"({"node":"n1","running":[{"job":")" + whole +
                      R"(","pid":11,"active":false,"gpu_memory_used_mib":30000},{"job":")" + share +
                      R"(","pid":12,"active":true,"gpu_memory_used_mib":2048}])" + extra + "}");
    ASSERT_TRUE(h && h->status == 200) << (h ? h->body : "no answer");
  };
  heartbeat("");
  now_ms_ += 61'000;
  heartbeat(
      R"(,"devices":[{"index":0,"util_pct":37,"memory_used_mib":30000},{"index":1,"util_pct":5}])");
  now_ms_ += 7'250;  // the heartbeat's age when read

  // Who may read it: admins only (metrics_public is off).
  EXPECT_EQ(Code({}), 401);
  EXPECT_EQ(Code({{"Authorization", "Bearer not-a-token"}}), 401);
  EXPECT_EQ(Code({{"Authorization", "Bearer alice-token-1"}}), 403);
  EXPECT_EQ(Code({{"Authorization", "Bearer agent-token-1"}}), 403);
  auto m = client_->Get("/metrics", {{"Authorization", "Bearer admin-token-1"}});
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  EXPECT_EQ(m->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u)
      << m->get_header_value("Content-Type");
  const std::vector<Sample> all = Parse(m->body);
  SCOPED_TRACE(m->body);

  // Capacity.
  int n = 0;
  EXPECT_EQ(Sum(all, "tessera_device_gpu_milli",
                {{"node", "n1"}, {"model", "H100-80GB"}, {"pool", "default"}}, &n),
            2000);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(Sum(all, "tessera_device_memory_bytes", {{"node", "n1"}, {"device", "1"}}),
            81920 * kMiB);
  EXPECT_EQ(Sum(all, "tessera_node_cpu_milli", {{"node", "n1"}}), 64000);
  // Allocation, by form, group and queue, on different cards.
  const std::map<std::string, std::string> whole_labels = {{"node", "n1"},
                                                           {"form", "whole"},
                                                           {"group", "research"},
                                                           {"queue", "training"},
                                                           {"pool", "default"}};
  const std::map<std::string, std::string> share_labels = {{"node", "n1"},
                                                           {"form", "share"},
                                                           {"group", "vision"},
                                                           {"queue", "notebooks"},
                                                           {"pool", "default"}};
  EXPECT_EQ(Sum(all, "tessera_allocated_gpu_milli", whole_labels, &n), 1000);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_allocated_gpu_milli", share_labels, &n), 250);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_allocated_gpu_milli", {}, &n), 1250);
  EXPECT_EQ(n, 2);
  std::string whole_device, share_device;
  for (const Sample& s : all) {
    if (s.name != "tessera_allocated_gpu_milli") continue;
    (s.labels.at("form") == "whole" ? whole_device : share_device) = s.labels.at("device");
  }
  EXPECT_NE(whole_device, share_device);
  EXPECT_EQ(Sum(all, "tessera_allocated_gpu_memory_bytes", whole_labels), 81920 * kMiB);
  EXPECT_EQ(Sum(all, "tessera_allocated_gpu_memory_bytes", share_labels), 8192 * kMiB);
  EXPECT_EQ(Sum(all, "tessera_allocated_cpu_milli", whole_labels), 2000);
  EXPECT_EQ(Sum(all, "tessera_allocated_cpu_milli", share_labels), 500);
  EXPECT_EQ(Sum(all, "tessera_allocated_memory_bytes", share_labels), 512 * kMiB);
  // Jobs and why they wait.
  EXPECT_EQ(Sum(all, "tessera_jobs",
                {{"state", "running"}, {"queue", "training"}, {"group", "research"}}),
            1);
  EXPECT_EQ(
      Sum(all, "tessera_jobs", {{"state", "running"}, {"queue", "notebooks"}, {"group", "vision"}}),
      1);
  EXPECT_EQ(Sum(all, "tessera_jobs",
                {{"state", "pending"}, {"queue", "training"}, {"group", "research"}}),
            1);
  EXPECT_EQ(Sum(all, "tessera_jobs", {}, &n), 3);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(Sum(all, "tessera_pending_jobs", {{"queue", "training"}, {"reason", "Placement"}}), 1);
  EXPECT_EQ(Sum(all, "tessera_pending_jobs", {}, &n), 1);
  EXPECT_EQ(n, 1);
  // Counters since start: research within its reservation, vision borrowing.
  EXPECT_EQ(Sum(all, "tessera_admissions_total",
                {{"queue", "training"}, {"group", "research"}, {"kind", "guaranteed"}}),
            1);
  EXPECT_EQ(Sum(all, "tessera_admissions_total",
                {{"queue", "notebooks"}, {"group", "vision"}, {"kind", "borrowed"}}),
            1);
  EXPECT_EQ(Sum(all, "tessera_admissions_total", {}, &n), 2);
  EXPECT_EQ(Sum(all, "tessera_preemptions_total", {}, &n), 0);
  EXPECT_EQ(n, 0);
  // Agents and telemetry.
  EXPECT_EQ(Sum(all, "tessera_agent_heartbeat_age_seconds", {{"node", "n1"}}, &n), 7.25);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_node_lost", {{"node", "n1"}}, &n), 0);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_device_utilization_ratio", {{"node", "n1"}, {"device", "0"}}), 0.37);
  EXPECT_EQ(Sum(all, "tessera_device_utilization_ratio", {{"node", "n1"}, {"device", "1"}}), 0.05);
  EXPECT_EQ(Sum(all, "tessera_device_memory_used_bytes", {{"device", "0"}}), 30000 * kMiB);
  Sum(all, "tessera_device_memory_used_bytes", {{"device", "1"}}, &n);
  EXPECT_EQ(n, 0) << "device 1 reported no memory: no sample";
  EXPECT_EQ(Sum(all, "tessera_allocation_idle",
                {{"job", whole}, {"group", "research"}, {"queue", "training"}}, &n),
            1);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_allocation_idle", {{"job", share}}, &n), 0);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_allocation_gpu_memory_used_bytes", {{"job", whole}}), 30000 * kMiB);
  EXPECT_EQ(Sum(all, "tessera_allocation_gpu_memory_used_bytes", {{"job", share}}), 2048 * kMiB);
  EXPECT_EQ(Sum(all, "tessera_idle_held_gpu_milli", {{"group", "research"}}), 1000);
  EXPECT_EQ(Sum(all, "tessera_idle_held_gpu_milli", {{"group", "vision"}}, &n), 0);
  EXPECT_EQ(n, 1);
  // Histograms: cycles ran (three at least, one per submission); +Inf holds every one.
  const double cycles = Sum(all, "tessera_scheduling_cycle_seconds_count");
  EXPECT_GE(cycles, 3);
  EXPECT_EQ(Sum(all, "tessera_scheduling_cycle_seconds_bucket", {{"le", "+Inf"}}), cycles);
  // Three submissions answered 201, counted under the route's pattern, never a job's path.
  const std::map<std::string, std::string> posts = {
      {"method", "POST"}, {"route", "/v1/jobs"}, {"code", "201"}};
  EXPECT_EQ(Sum(all, "tessera_http_request_duration_seconds_count", posts), 3);
  EXPECT_EQ(Sum(all, "tessera_http_request_duration_seconds_bucket",
                {{"method", "POST"}, {"route", "/v1/jobs"}, {"code", "201"}, {"le", "+Inf"}}),
            3);
  EXPECT_GE(Sum(all, "tessera_http_request_duration_seconds_count",
                {{"route", "/v1/jobs/{id}"}, {"code", "200"}}),
            3);
  EXPECT_EQ(Sum(all, "tessera_http_request_duration_seconds_count",
                {{"route", "/metrics"}, {"code", "403"}}),
            2);
  for (const Sample& s : all) {
    if (s.labels.count("route")) {
      EXPECT_EQ(s.labels.at("route").find("j-"), std::string::npos) << s.labels.at("route");
    }
  }

  // promtool: exit 0 and nothing to say.
  const std::string file = dir_ + "/metrics.txt";
  std::ofstream(file) << m->body;
  const std::string cmd = "promtool check metrics < '" + file + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  char buf[512];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) said.append(buf, got);
  const int status = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "promtool check metrics exited " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
      << " (127: promtool is missing; scripts/setup.sh installs the prometheus package): " << said;
  EXPECT_EQ(said, "");
}

// Quota per GPU model (issue 37): a group holding a card of a model it has a quota on shows what
// it holds there, its reservation and its limit; a model it only holds shows the holding alone.
TEST_F(MetricsTest, AGroupHoldingAModelShowsItsUsageReservationAndLimitThere) {
  Start(R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, nodes: [n1, n2], token: agent-token-1}
groups:
  - {name: research, reservation: {gpu: 2, models: {H100-80GB: 1}}, limit: {models: {H100-80GB: 3}}}
profiles:
  - {name: train, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: training, profile: train, groups: [research], models: [H100-80GB, A100-80GB]}
)");
  auto reg = [&](const std::string& node, const std::string& model) {
    auto r = Post("/v1/agent/register", "agent-token-1",
                  R"({"node":")" + node +
                      R"(","cpu_milli":8000,"memory_mib":65536,"devices":[{"index":0,"model":")" +
                      model + R"(","memory_mib":81920,"uuid":")" + node + R"("}]})");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  };
  reg("n1", "H100-80GB");
  reg("n2", "A100-80GB");
  const std::string first = Submit("alice-token-1", "training");
  const std::string second = Submit("alice-token-1", "training");  // H100 full: spills
  ASSERT_EQ(Job(first).value("state", ""), "placed") << Job(first).dump();
  ASSERT_EQ(Job(second).value("state", ""), "placed") << Job(second).dump();
  auto m = client_->Get("/metrics", {{"Authorization", "Bearer admin-token-1"}});
  ASSERT_TRUE(m && m->status == 200);
  const std::vector<Sample> all = Parse(m->body);
  SCOPED_TRACE(m->body);
  int n = 0;
  EXPECT_EQ(Sum(all, "tessera_group_model_held_gpu_milli",
                {{"group", "research"}, {"model", "H100-80GB"}}, &n),
            1000);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_group_model_held_gpu_milli",
                {{"group", "research"}, {"model", "A100-80GB"}}, &n),
            1000);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_group_model_reservation_gpu_milli",
                {{"group", "research"}, {"model", "H100-80GB"}}, &n),
            1000);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_group_model_limit_gpu_milli",
                {{"group", "research"}, {"model", "H100-80GB"}}, &n),
            3000);
  EXPECT_EQ(n, 1);
  Sum(all, "tessera_group_model_reservation_gpu_milli", {{"model", "A100-80GB"}}, &n);
  EXPECT_EQ(n, 0) << "no reservation on A100-80GB: no sample";
  Sum(all, "tessera_group_model_limit_gpu_milli", {{"model", "A100-80GB"}}, &n);
  EXPECT_EQ(n, 0) << "no limit on A100-80GB: no sample";

  const std::string file = dir_ + "/metrics_models.txt";
  std::ofstream(file) << m->body;
  const std::string cmd = "promtool check metrics < '" + file + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string said;
  char buf[512];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) said.append(buf, got);
  const int status = ::pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << said;
  EXPECT_EQ(said, "");
}

// Quota per pool (issue 37): a group with a reservation and a limit in a pool shows, per pool,
// what it holds there, its reservation and its limit; a pool it only holds in, the holding alone.
TEST_F(MetricsTest, AGroupHoldingInAPoolShowsItsUsageReservationAndLimitThere) {
  Start(R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, nodes: [n1, n2], token: agent-token-1}
pools:
  - {name: east, forms: [whole]}
  - {name: west, forms: [whole]}
groups:
  - {name: research, reservation: {gpu: 1, pools: {east: 1}}, limit: {pools: {east: 2}}}
profiles:
  - {name: train, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole], pools: [east, west]}
queues:
  - {name: training, profile: train, groups: [research]}
)");
  auto reg = [&](const std::string& node, const std::string& pool) {
    auto r = Post(
        "/v1/agent/register", "agent-token-1",
        R"({"node":")" + node + R"(","pool":")" + pool +
            R"(","cpu_milli":8000,"memory_mib":65536,"devices":[{"index":0,"model":"H100-80GB","memory_mib":81920,"uuid":")" +
            node + R"("}]})");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  };
  reg("n1", "east");
  reg("n2", "west");
  const std::string first = Submit("alice-token-1", "training");
  const std::string second = Submit("alice-token-1", "training");
  ASSERT_EQ(Job(first).value("state", ""), "placed") << Job(first).dump();
  ASSERT_EQ(Job(second).value("state", ""), "placed") << Job(second).dump();
  auto m = client_->Get("/metrics", {{"Authorization", "Bearer admin-token-1"}});
  ASSERT_TRUE(m && m->status == 200);
  const std::vector<Sample> all = Parse(m->body);
  SCOPED_TRACE(m->body);
  int n = 0;
  EXPECT_EQ(
      Sum(all, "tessera_group_pool_held_gpu_milli", {{"group", "research"}, {"pool", "east"}}, &n),
      1000);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(
      Sum(all, "tessera_group_pool_held_gpu_milli", {{"group", "research"}, {"pool", "west"}}, &n),
      1000);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(Sum(all, "tessera_group_pool_reservation_gpu_milli",
                {{"group", "research"}, {"pool", "east"}}, &n),
            1000);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(
      Sum(all, "tessera_group_pool_limit_gpu_milli", {{"group", "research"}, {"pool", "east"}}, &n),
      2000);
  EXPECT_EQ(n, 1);
  Sum(all, "tessera_group_pool_reservation_gpu_milli", {{"pool", "west"}}, &n);
  EXPECT_EQ(n, 0) << "no reservation in west: no sample";
  Sum(all, "tessera_group_pool_limit_gpu_milli", {{"pool", "west"}}, &n);
  EXPECT_EQ(n, 0) << "no limit in west: no sample";
}

TEST_F(MetricsTest, PublicWhenConfiguredStillRefusesUnknownTokens) {
  Start(std::string(kConfig) + "metrics_public: true\n");
  EXPECT_EQ(Code({}), 200);
  EXPECT_EQ(Code({{"Authorization", "Bearer alice-token-1"}}), 200);
  EXPECT_EQ(Code({{"Authorization", "Bearer not-a-token"}}), 401);
  auto m = client_->Get("/metrics");
  ASSERT_TRUE(m);
  // Nothing registered, nothing held: the families that always have samples.
  const std::vector<Sample> all = Parse(m->body);
  int n = 0;
  Sum(all, "tessera_device_gpu_milli", {}, &n);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(Sum(all, "tessera_idle_held_gpu_milli", {}, &n), 0);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(Sum(all, "tessera_scheduling_cycle_seconds_bucket", {{"le", "+Inf"}}, &n),
            Sum(all, "tessera_scheduling_cycle_seconds_count"));
  EXPECT_EQ(n, 1);
}

TEST(MetricsConfigTest, MetricsPublicIsABoolean) {
  auto c = ParseConfig(std::string(kConfig) + "metrics_public: sometimes\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("metrics_public"), std::string::npos)
      << c.status().ToString();
  c = ParseConfig(kConfig);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->metrics_public);
}

}  // namespace
}  // namespace tessera::api
