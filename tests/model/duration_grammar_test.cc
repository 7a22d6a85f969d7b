// The one duration grammar (model/duration.h), and every duration field that reads it: for each
// field (the server's config, the policy as the server and as a scenario load it, scenario files,
// a job's walltime through the API and the command line, the command line's own durations),
// `500ms`, `1.5m`, `2h`, `-1s`, `5 parsecs` and an empty text are put in that field of a real
// document or command, which is then loaded: a field kept in milliseconds holds 500, 90000 and
// 7200000; a field kept in whole seconds refuses 500ms and holds 90 and 7200; the three bad texts
// are refused. Every refusal names the field and quotes the text.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../api/engine_fixture.h"
#include "api/config.h"
#include "model/duration.h"
#include "model/quantity.h"
#include "sim/scenario.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

TEST(DurationGrammar, ReadsMillisecondsExactly) {
  const std::pair<const char*, int64_t> ok[] = {
      {"500ms", 500},
      {"2s", 2000},
      {"1.5m", 90'000},
      {"2h", 7'200'000},
      {"1d", 86'400'000},
      {"90", 90'000},
      {"1.5", 1500},
      {"0", 0},
      {"0s", 0},
      {"1h30m", 5'400'000},
      {"2m30s", 150'000},
      {"1s500ms", 1500},
      {"1d2h3m4s5ms", 93'784'005},
      {"0.1s", 100},
      {".5m", 30'000},
      {"0.001s", 1},
      {"36500d", kMaxDurationMs},
      {"1.25h", 4'500'000},
  };
  for (const auto& [text, want] : ok) {
    Result<int64_t> got = ParseDurationMs(text);
    ASSERT_TRUE(got.ok()) << text << ": " << got.status().message();
    EXPECT_EQ(*got, want) << text;
    // What is printed reads back as the same value.
    EXPECT_EQ(*ParseDurationMs(FormatDurationMs(want)), want) << FormatDurationMs(want);
  }
  EXPECT_EQ(FormatDurationMs(5'400'000), "1h30m");
  EXPECT_EQ(FormatDurationMs(500), "500ms");
  EXPECT_EQ(FormatDurationMs(0), "0s");
}

TEST(DurationGrammar, RefusesWithAReason) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "empty"},
      {"-1s", "negative"},
      {"-0", "negative"},
      {"+1s", "expected a number"},
      {"5 parsecs", "unknown unit ' parsecs'"},
      {"1y", "unknown unit 'y'"},
      {"1us", "unknown unit 'us'"},
      {"5M", "unknown unit 'M'"},
      {"1h 30m", "unknown unit 'h '"},
      {"30m1h", "from the largest to the smallest"},
      {"1s1s", "from the largest to the smallest"},
      {"1h30", "'30' needs a unit"},
      {"s", "expected a number"},
      {"1.2.3s", "two decimal points"},
      {".s", "no digits"},
      {"0.0001s", "finer than a millisecond"},
      {"1.0005", "finer than a millisecond"},
      {"36500d1ms", "longer than 36500d"},
      {"9223372036854775807md", "unknown unit 'md'"},
      {"106751991167d", "longer than 36500d"},
      {"99999999999999999999999999999s", "too long"},
  };
  for (const auto& [text, why] : bad) {
    Result<int64_t> got = ParseDurationMs(text);
    ASSERT_FALSE(got.ok()) << text << " read as " << *got;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find("'" + std::string(text) + "' is not a duration"),
              std::string::npos)
        << got.status().message();
    EXPECT_NE(got.status().message().find(why), std::string::npos) << got.status().message();
  }
  EXPECT_EQ(*ParseDurationSeconds("1.5m"), 90);
  EXPECT_NE(ParseDurationSeconds("1500ms").status().message().find("not a whole number of seconds"),
            std::string::npos);
  EXPECT_EQ(*ParseDurationSeconds("2000ms"), 2);
}

// Negative quantities say so, quoting the value (not "unknown unit" or "not a number").
TEST(QuantityGrammar, NegativeValuesAreNamed) {
  EXPECT_EQ(ParseMemoryMiB("-8GiB").status().message(),
            "memory quantity '-8GiB' is negative (memory is 0 or more, e.g. 8GiB)");
  EXPECT_EQ(ParseMilli("-2").status().message(),
            "quantity '-2' is negative (a count is 0 or more, e.g. 2, 0.5 or 500m)");
}

// ---- every duration field ----------------------------------------------------------------------

// What a field holds once loaded, in its own unit; nullopt where the value cannot be read back
// (a command line flag whose value goes on unchanged: accepted is all that shows).
using Loaded = Result<std::optional<int64_t>>;

struct Field {
  std::string path;  // as its errors name it
  bool seconds;      // kept in whole seconds (else in milliseconds)
  std::function<Loaded(const std::string& value)> load;
};

// `tmpl` with each '@' replaced by `value` as a quoted YAML scalar.
std::string Fill(const std::string& tmpl, const std::string& value) {
  std::string out;
  for (char c : tmpl) out += c == '@' ? "\"" + value + "\"" : std::string(1, c);
  return out;
}

const std::string kServer = R"(identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [g], token: alice-token-1}
groups: [{name: g}]
profiles: [{name: p, gpus: 1, forms: [whole]}]
)";
const std::string kServerQueue = "queues: [{name: q, profile: p, groups: [g], class: training}]\n";

Field Config(const std::string& path, const std::string& tmpl,
             std::function<int64_t(const api::EngineConfig&)> get, bool seconds = false) {
  return {path, seconds, [=](const std::string& v) -> Loaded {
            auto c = api::ParseConfig(Fill(tmpl, v));
            if (!c.ok()) return c.status();
            return std::optional<int64_t>(get(*c));
          }};
}

// A top-level key of the server's config, in milliseconds.
Field ServerKey(const std::string& key, int64_t api::EngineConfig::*ms,
                const std::string& extra = "") {
  return Config(key, kServer + kServerQueue + extra + key + ": @\n",
                [ms](const api::EngineConfig& c) { return c.*ms; });
}
// The same for a key kept in one of the config's groups (EngineConfig::history).
template <class Group>
Field ServerKey(const std::string& key, Group api::EngineConfig::*group, int64_t Group::*ms) {
  return Config(key, kServer + kServerQueue + key + ": @\n",
                [group, ms](const api::EngineConfig& c) { return c.*group.*ms; });
}

const std::string kScenario = R"(nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]
groups: [{name: g}]
profiles: [{name: p}]
queues: [{name: q, profile: p, groups: [g], class: training}]
)";

Field Scenario(const std::string& path, const std::string& tmpl,
               std::function<int64_t(const sim::Scenario&)> get) {
  return {path, true, [=](const std::string& v) -> Loaded {
            auto s = sim::ParseScenario(Fill(tmpl, v));
            if (!s.ok()) return s.status();
            return std::optional<int64_t>(get(*s));
          }};
}

// The built `tessera` with `args` (each '@' the value), its environment without a server, so that
// a flag's value is read and judged before anything is called. Refused when the output has
// `refusal` (the flag's own message); else accepted.
Field Command(const std::string& path, bool seconds, const std::string& args,
              const std::string& refusal) {
  return {path, seconds, [=](const std::string& v) -> Loaded {
            std::string cmd = "env -u TESSERA_URL -u TESSERA_TOKEN -u TESSERA_TOKEN_FILE " +
                              std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera ";
            for (char c : args) cmd += c == '@' ? v : std::string(1, c);
            cmd += " 2>&1";
            std::string out;
            if (FILE* p = popen(cmd.c_str(), "r")) {
              std::array<char, 4096> buf{};
              size_t n = 0;
              while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
              pclose(p);
            }
            size_t at = out.find(refusal);
            if (at != std::string::npos) return Status::InvalidArgument(out.substr(at));
            return std::optional<int64_t>();
          }};
}

class DurationFields : public api::testing::EngineFixture {};

TEST_F(DurationFields, EveryDurationFieldReadsTheOneGrammar) {
  // The API's walltime: a job submitted with it, its spec read back.
  Start("duration-grammar", kServer + kServerQueue);
  if (HasFatalFailure()) return;
  Field walltime{"'walltime'", true, [this](const std::string& v) -> Loaded {
                   auto r = engine_->Submit(
                       Who("alice"), {{"queue", "q"}, {"command", {"true"}}, {"walltime", v}});
                   if (!r.ok()) return r.status();
                   auto job = engine_->views().GetJob(Who("admin"), (*r)["id"].get<std::string>());
                   if (!job.ok()) return job.status();
                   return std::optional<int64_t>((*job)["spec"]["walltime_s"].get<int64_t>());
                 }};

  using C = api::EngineConfig;
  const std::vector<Field> fields = {
      // The server's own settings, in milliseconds.
      ServerKey("heartbeat_timeout", &C::heartbeat_timeout_ms, "heartbeat_interval: 100ms\n"),
      ServerKey("heartbeat_interval", &C::heartbeat_interval_ms, "heartbeat_timeout: 5h\n"),
      ServerKey("cancel_grace", &C::cancel_grace_ms),
      ServerKey("partition_stop", &C::partition_stop_ms,
                "heartbeat_timeout: 200ms\nheartbeat_interval: 100ms\n"),
      ServerKey("cycle", &C::cycle_ms),
      ServerKey("backend_poll", &C::backend_poll_ms),
      ServerKey("utilization_sample", &C::history, &C::History::utilization_sample_ms),
      ServerKey("retention", &C::history, &C::History::retention_ms),
      ServerKey("auth_failed_retention", &C::history, &C::History::auth_failed_retention_ms),
      ServerKey("idle_after", &C::idle_after_ms),
      ServerKey("utilization_fine_keep", &C::history, &C::History::utilization_fine_keep_ms),
      ServerKey("utilization_keep", &C::history, &C::History::utilization_keep_ms),
      Config("queues[k].placement_timeout",
             kServer + "kubernetes: {kubeconfig: /etc/k}\n"
                       "queues: [{name: k, profile: p, groups: [g], backend: kubernetes, "
                       "placement_timeout: @}]\n",
             [](const C& c) { return c.FindRoute("k")->kube.placement_timeout_ms; }),
      // The policy as the server loads it: the quota cycle counts whole seconds.
      Config(
          "grace", kServer + kServerQueue + "grace: @\n",
          [](const C& c) { return c.policy.grace_seconds; }, true),
      Config(
          "fair_share_half_life", kServer + kServerQueue + "fair_share_half_life: @\n",
          [](const C& c) { return c.policy.fair_share_half_life_s; }, true),
      Config(
          "repartition_horizon", kServer + kServerQueue + "repartition_horizon: @\n",
          [](const C& c) { return c.policy.repartition_horizon_s; }, true),
      Config(
          "queues[q].max_runtime",
          kServer +
              "queues: [{name: q, profile: p, groups: [g], class: training, max_runtime: @}]\n",
          [](const C& c) { return c.policy.queues[0].max_runtime_s; }, true),
      Scenario("queues[q].max_runtime",
               "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\ngroups: [{name: g}]\n"
               "profiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: [g], class: "
               "training, max_runtime: @}]\nworkload: []\n",
               [](const sim::Scenario& s) { return s.policy.queues[0].max_runtime_s; }),
      Config(
          "queues[q].min_runtime",
          kServer +
              "queues: [{name: q, profile: p, groups: [g], class: training, min_runtime: @}]\n",
          [](const C& c) { return c.policy.queues[0].min_runtime_s; }, true),
      Scenario("queues[q].min_runtime",
               "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\ngroups: [{name: g}]\n"
               "profiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: [g], class: "
               "training, min_runtime: @}]\nworkload: []\n",
               [](const sim::Scenario& s) { return s.policy.queues[0].min_runtime_s; }),
      Config(
          "queues[q].preemption_delay",
          kServer + "queues: [{name: q, profile: p, groups: [g], class: training, "
                    "preemption_delay: @}]\n",
          [](const C& c) { return c.policy.queues[0].preemption_delay_s; }, true),
      Scenario("queues[q].preemption_delay",
               "nodes: [{name: n, gpu: {model: A100-80GB, count: 1}}]\ngroups: [{name: g}]\n"
               "profiles: [{name: p}]\nqueues: [{name: q, profile: p, groups: [g], class: "
               "training, preemption_delay: @}]\nworkload: []\n",
               [](const sim::Scenario& s) { return s.policy.queues[0].preemption_delay_s; }),
      // The same policy keys and the scenario's own times, in a scenario file (seconds).
      Scenario("grace", kScenario + "grace: @\nworkload: []\n",
               [](const sim::Scenario& s) { return s.policy.grace_seconds; }),
      Scenario("fair_share_half_life", kScenario + "fair_share_half_life: @\nworkload: []\n",
               [](const sim::Scenario& s) { return s.policy.fair_share_half_life_s; }),
      Scenario("repartition_horizon", kScenario + "repartition_horizon: @\nworkload: []\n",
               [](const sim::Scenario& s) { return s.policy.repartition_horizon_s; }),
      Scenario("until", kScenario + "until: @\nworkload: []\n",
               [](const sim::Scenario& s) { return s.until_s; }),
      Scenario("cycle", kScenario + "cycle: @\nworkload: []\n",
               [](const sim::Scenario& s) { return s.cycle_s; }),
      Scenario("workload[0].at", kScenario + "workload: [{queue: q, duration: 1h, at: @}]\n",
               [](const sim::Scenario& s) { return s.workload[0].at_s; }),
      Scenario("workload[0].interval",
               kScenario + "workload: [{queue: q, duration: 1h, interval: @}]\n",
               [](const sim::Scenario& s) { return s.workload[0].interval_s; }),
      Scenario("workload[0].duration", kScenario + "workload: [{queue: q, duration: @}]\n",
               [](const sim::Scenario& s) { return s.workload[0].durations_s[0]; }),
      Scenario("workload[0].duration[1]", kScenario + "workload: [{queue: q, duration: [1h, @]}]\n",
               [](const sim::Scenario& s) { return s.workload[0].durations_s[1]; }),
      Scenario("outages[0].at", kScenario + "workload: []\noutages: [{node: n, at: @, for: 1h}]\n",
               [](const sim::Scenario& s) { return s.outages[0].at_s; }),
      Scenario("outages[0].for", kScenario + "workload: []\noutages: [{node: n, for: @}]\n",
               [](const sim::Scenario& s) { return s.outages[0].for_s; }),
      // A job's walltime: through the API, and on the command line (read there before the call).
      walltime,
      Command("--walltime", true, "submit --queue q --walltime '@' -- true",
              "tessera submit: --walltime: "),
      // The command line's own durations (milliseconds).
      Command("--since", false, "usage --since '@'", "tessera: --since: "),
      Command("--until", false, "usage --until '@'", "tessera: --until: "),
      Command("--burst", false, "sim swap --sessions 2 --duration 1m --burst '@'",
              "tessera sim swap: --burst: "),
      Command("--duration", false, "sim swap --sessions 2 --duration '@'",
              "tessera sim swap: --duration: "),
      Command("--swap-idle", false, "sim swap --sessions 2 --duration 1m --swap-idle '@'",
              "tessera sim swap: --swap-idle: "),
      Command("--swap-slice", false, "sim swap --sessions 2 --duration 1m --swap-slice '@'",
              "tessera sim swap: --swap-slice: "),
  };

  struct Input {
    std::string text;
    std::optional<int64_t> ms;  // nullopt: refused in every field
    std::string why;            // the refusal's reason
  };
  const Input inputs[] = {
      {"500ms", 500, "not a whole number of seconds"},
      {"1.5m", 90'000, ""},
      {"2h", 7'200'000, ""},
      {"-1s", std::nullopt, "negative"},
      {"5 parsecs", std::nullopt, "unknown unit"},
      {"", std::nullopt, "empty"},
  };
  for (const Field& f : fields) {
    for (const Input& in : inputs) {
      SCOPED_TRACE(f.path + " = '" + in.text + "'");
      Loaded got = f.load(in.text);
      const bool want_ok = in.ms.has_value() && (!f.seconds || *in.ms % 1000 == 0);
      if (!want_ok) {
        ASSERT_FALSE(got.ok()) << "accepted";
        const std::string& m = got.status().message();
        EXPECT_NE(m.find(f.path + ": '" + in.text + "'"), std::string::npos) << m;
        EXPECT_NE(m.find(in.why), std::string::npos) << m;
        continue;
      }
      ASSERT_TRUE(got.ok()) << got.status().message();
      if (got->has_value()) {
        EXPECT_EQ(**got, f.seconds ? *in.ms / 1000 : *in.ms);
      }
    }
  }
}

// A negative quantity is named as such, with the field, by the API and by the command line.
TEST_F(DurationFields, NegativeQuantitiesAreNamed) {
  Start("quantity-grammar", kServer + kServerQueue);
  if (HasFatalFailure()) return;
  const std::pair<Json, std::string> api[] = {
      {{{"cpu", "-2"}}, "'cpu': quantity '-2' is negative"},
      {{{"cpu", -2}}, "'cpu': quantity '-2' is negative"},
      {{{"cpu", -0.5}}, "'cpu': quantity '-0.5' is negative"},
      {{{"gpu_memory", "-8GiB"}}, "'gpu_memory': memory quantity '-8GiB' is negative"},
      {{{"memory", -8}}, "'memory': memory quantity '-8' is negative"},
  };
  for (const auto& [needs, want] : api) {
    Json body = {{"queue", "q"}, {"command", {"true"}}};
    body.update(needs);
    auto r = engine_->Submit(Who("alice"), body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
  for (const auto& [flag, value, want] :
       {std::tuple{"--cpu", "-2", "--cpu: quantity '-2' is negative"},
        std::tuple{"--gpu-memory", "-8GiB", "--gpu-memory: memory quantity '-8GiB' is negative"}}) {
    Loaded got = Command(flag, false, std::string("submit --queue q ") + flag + " @ -- true",
                         "tessera submit: ")
                     .load(value);
    ASSERT_FALSE(got.ok()) << flag;
    EXPECT_NE(got.status().message().find(want), std::string::npos) << got.status().message();
  }
}

}  // namespace
}  // namespace tessera
