// Runs the built `tessera` binary as a real process and checks its output and exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "run_tessera.h"

namespace {

using nlohmann::json;
using ::testing::HasSubstr;

using tessera::testing::ProcessResult;
using tessera::testing::Tessera;

json ParseJson(const ProcessResult& r) {
  json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out;
  return j;
}

TEST(CatalogCliTest, ListShowsEveryModel) {
  ProcessResult r = Tessera({"catalog", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* m : {"A30-24GB", "A100-40GB", "H100-80GB", "H200-141GB", "GB200-186GB",
                        "B300-288GB", "MI300X", "MI355X", "MIG", "AMD", "INFERRED"}) {
    EXPECT_THAT(r.out, HasSubstr(m));
  }
  json j = ParseJson(Tessera({"catalog", "list", "--json"}));
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 14u);
}

TEST(CatalogCliTest, ShowMigModel) {
  ProcessResult r = Tessera({"catalog", "show", "a100-40gb"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("A100-40GB"));
  EXPECT_THAT(r.out, HasSubstr("4g.20gb"));
  EXPECT_THAT(r.out, HasSubstr("{0,1,2,3,4,5,6}"));
  EXPECT_THAT(r.out, HasSubstr("STARTS"));

  ProcessResult h200 = Tessera({"catalog", "show", "H200", "--json"});
  ASSERT_EQ(h200.exit_code, 0) << h200.err;
  json j = ParseJson(h200);
  EXPECT_EQ(j["name"], "H200-141GB");
  EXPECT_EQ(j["profiles"][0]["inferred"], true);
  EXPECT_EQ(j["profiles"][0]["starts"], json({0, 1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(j["profiles"][0]["memory_mib"].is_number_integer());
}

TEST(CatalogCliTest, ShowAmdModel) {
  ProcessResult r = Tessera({"catalog", "show", "MI300X"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CPX+NPS4"));
  EXPECT_THAT(r.out, HasSubstr("24GiB"));
  json j = ParseJson(Tessera({"catalog", "show", "mi355x", "--json"}));
  EXPECT_EQ(j["legal_pairs"].size(), 5u);
}

TEST(CatalogCliTest, UnknownModelIsBadInput) {
  ProcessResult r = Tessera({"catalog", "show", "Z9000"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown GPU model 'Z9000'"));
  EXPECT_THAT(r.err, HasSubstr("A100-40GB"));  // lists the valid names
  EXPECT_TRUE(r.out.empty());
}

TEST(MigCliTest, PlanPrintsStartsAndSliceMap) {
  ProcessResult r = Tessera(
      {"partition", "plan", "--gpu", "H100-80GB", "--want", "3g.40gb,2g.20gb,1g.10gb,1g.10gb"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3g.40gb"));
  EXPECT_THAT(r.out, HasSubstr("START"));
  EXPECT_THAT(r.out, HasSubstr("[3g.40gb"));

  ProcessResult js =
      Tessera({"partition", "plan", "--gpu", "a100-40gb", "--want", "4g.20gb,3g.20gb", "--json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  json j = ParseJson(js);
  ASSERT_EQ(j["instances"].size(), 2u);
  for (const json& i : j["instances"]) {
    ASSERT_TRUE(i.contains("start"));
    EXPECT_TRUE(i["start"].is_number_integer());
  }
  EXPECT_EQ(j["instances"][0]["profile"], "4g.20gb");
  EXPECT_EQ(j["instances"][0]["start"], 0);
  EXPECT_EQ(j["instances"][1]["profile"], "3g.20gb");
  EXPECT_EQ(j["instances"][1]["start"], 4);
}

TEST(MigCliTest, PlanFailureExitCodes) {
  ProcessResult cap =
      Tessera({"partition", "plan", "--gpu", "A100-40GB", "--want", "4g.20gb,4g.20gb"});
  EXPECT_EQ(cap.exit_code, 1);
  EXPECT_THAT(cap.err, HasSubstr("wants 2 x 4g.20gb, at most 1 per GPU"));

  ProcessResult overlap = Tessera({"partition", "plan", "--gpu", "A100-40GB", "--want",
                                   "3g.20gb,2g.10gb", "--existing", "1g.5gb@5"});
  EXPECT_EQ(overlap.exit_code, 1);
  EXPECT_THAT(overlap.err, HasSubstr("3g.20gb (starts {0}) and 2g.10gb (starts {0,2}) overlap "
                                     "in memory slices beside existing 1g.5gb@5"));

  ProcessResult beside = Tessera({"partition", "plan", "--gpu", "A100-40GB", "--want", "3g.20gb",
                                  "--existing", "1g.5gb@5", "--json"});
  ASSERT_EQ(beside.exit_code, 0) << beside.err;
  json j = ParseJson(beside);
  EXPECT_EQ(j["instances"][0]["start"], 0);
  EXPECT_EQ(j["existing"][0]["start"], 5);

  ProcessResult bad_existing = Tessera(
      {"partition", "plan", "--gpu", "A100-40GB", "--want", "3g.20gb", "--existing", "1g.5gb"});
  EXPECT_EQ(bad_existing.exit_code, 2);
  EXPECT_THAT(bad_existing.err, HasSubstr("PROFILE@START"));

  ProcessResult unknown =
      Tessera({"partition", "plan", "--gpu", "A100-40GB", "--want", "3g.20gb,5g.1gb"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown profile '5g.1gb'"));
  EXPECT_THAT(unknown.err, HasSubstr("4g.20gb"));  // lists the valid ones

  ProcessResult malformed =
      Tessera({"partition", "plan", "--gpu", "A100-80GB", "--want", "3g.40gb,,1g.10gb"});
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_THAT(malformed.err, HasSubstr("item 2 is empty"));

  ProcessResult trailing =
      Tessera({"partition", "plan", "--gpu", "A100-80GB", "--want", "3g.40gb,"});
  EXPECT_EQ(trailing.exit_code, 2);

  ProcessResult gpu = Tessera({"partition", "plan", "--gpu", "V100", "--want", "1g.5gb"});
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_THAT(gpu.err, HasSubstr("unknown GPU model 'V100'"));
  EXPECT_THAT(gpu.err, HasSubstr("H100-80GB"));

  ProcessResult missing = Tessera({"partition", "plan", "--gpu", "H100-80GB"});
  EXPECT_EQ(missing.exit_code, 2);
}

TEST(MigCliTest, Geometries) {
  ProcessResult r = Tessera({"partition", "geometries", "--gpu", "A100-40GB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("38 maximal geometries"));
  EXPECT_THAT(r.out, HasSubstr("2 x 3g.20gb"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("1g.5gb+me")));

  json j = ParseJson(Tessera({"partition", "geometries", "--gpu", "a30", "--json"}));
  ASSERT_EQ(j["geometries"].size(), 4u);
  for (const json& g : j["geometries"]) {
    EXPECT_FALSE(g["example"].empty());
    EXPECT_TRUE(g["example"][0].contains("start"));
  }
}

TEST(AmdCliTest, PlanBySizesAndByPair) {
  ProcessResult sizes =
      Tessera({"partition", "plan", "--gpu", "MI300X", "--want", "24GiB,24GiB,40GiB,40GiB"});
  ASSERT_EQ(sizes.exit_code, 0) << sizes.err;
  EXPECT_THAT(sizes.out, HasSubstr("QPX+NPS1"));
  EXPECT_THAT(sizes.out, HasSubstr("48GiB"));

  json j =
      ParseJson(Tessera({"partition", "plan", "--gpu", "mi300x", "--want", "cpx+nps4", "--json"}));
  EXPECT_EQ(j["pair"], "CPX+NPS4");
  EXPECT_EQ(j["partitions"], 8);
  EXPECT_EQ(j["memory_per_partition_mib"], 24576);

  ProcessResult illegal = Tessera({"partition", "plan", "--gpu", "MI300X", "--want", "SPX+NPS4"});
  EXPECT_EQ(illegal.exit_code, 1);
  EXPECT_THAT(illegal.err, HasSubstr("SPX+NPS4 is not a legal pair on MI300X"));

  ProcessResult too_big = Tessera({"partition", "plan", "--gpu", "MI300X", "--want", "500GiB"});
  EXPECT_EQ(too_big.exit_code, 1);

  ProcessResult bad = Tessera({"partition", "plan", "--gpu", "MI300X", "--want", "24XB"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("24XB"));

  ProcessResult geo = Tessera({"partition", "geometries", "--gpu", "MI355X"});
  EXPECT_EQ(geo.exit_code, 0);
  EXPECT_THAT(geo.out, HasSubstr("DPX+NPS2"));
}

// `tessera serve --check-config`: the config checked as serve would, nothing opened; a broken one
// is refused naming the field.
TEST(ServeCliTest, CheckConfigSaysWhatItDeclaresOrWhatIsWrong) {
  const std::string base = ::testing::TempDir() + "/check-config-" + std::to_string(getpid());
  const std::string good = base + "-good.yaml", bad = base + "-bad.yaml";
  const std::string yaml =
      "identities:\n  - {name: admin, role: admin, token: admin-token-1}\n"
      "groups: [{name: research}]\n"
      "profiles: [{name: card, gpus: 1, forms: [whole]}]\n"
      "queues: [{name: training, profile: card, groups: [research]}]\n";
  std::ofstream(good) << yaml;
  std::string broken = yaml;
  broken.replace(broken.find("profile: card"), 13, "profile: nope");
  std::ofstream(bad) << broken;
  ProcessResult ok = Tessera({"serve", "--config", good, "--check-config"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("ok: 1 group(s)"));
  EXPECT_THAT(ok.out, HasSubstr("queue training -> local"));
  ProcessResult no = Tessera({"serve", "--config", bad, "--check-config"});
  EXPECT_EQ(no.exit_code, 2);
  EXPECT_THAT(no.err, HasSubstr("queues[training].profile 'nope' is not a profile"));
  ProcessResult no_data = Tessera({"serve", "--config", good});
  EXPECT_EQ(no_data.exit_code, 2);
  EXPECT_THAT(no_data.err, HasSubstr("--data is required"));
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

// What the config allows but an operator should know is said by --check-config: a group-level
// run_as (one account for all its members), an agent that speaks for every node.
TEST(ServeCliTest, CheckConfigWarnsOfSharedAccountsAndAgentsWithoutNodes) {
  const std::string path =
      ::testing::TempDir() + "/check-config-warn-" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << "identities:\n"
                         "  - {name: alice, role: user, groups: [research], token: alice-token-1}\n"
                         "  - {name: bob, role: user, groups: [research], token: bob-token-12}\n"
                         "  - {name: agents, role: agent, token: agent-token-1}\n"
                         "groups: [{name: research, run_as: labuser}]\n"
                         "profiles: [{name: card, gpus: 1, forms: [whole]}]\n"
                         "queues: [{name: training, profile: card, groups: [research]}]\n";
  ProcessResult r = Tessera({"serve", "--config", path, "--check-config"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("warning: group 'research' sets run_as 'labuser' for all its members"));
  EXPECT_THAT(
      r.out,
      HasSubstr(
          "warning: identities 'alice', 'bob' run their jobs as the one Unix account 'labuser'"));
  EXPECT_THAT(r.out, HasSubstr("warning: identity 'agents' (agent) has no nodes"));
  std::remove(path.c_str());
}

// A token on the command line is refused, saying how to pass it instead.
TEST(ClientCliTest, ATokenOnTheCommandLineIsRefused) {
  ProcessResult r = Tessera({"jobs", "--url", "http://127.0.0.1:1", "--token", "alice-token-1"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("--token-file"));
  EXPECT_THAT(r.err, HasSubstr("/proc/PID/cmdline"));
}

// The agent's size flags are sizes (--swap-ram above 0, --swap-disk with --swap-dir; a plain 0
// needs no unit), each refused with what it expects before the agent connects anywhere.
TEST(AgentCliTest, SizeFlagsAreSizes) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--swap-ram", "lots"}, "--swap-ram: expected a size such as 64GiB, not 'lots'"},
      {{"--swap-ram", "0"}, "--swap-ram: expected a size such as 64GiB, not '0'"},
      {{"--max-output=-1MiB"}, "--max-output: expected a size such as 64MiB, not '-1MiB'"},
      {{"--swap-ram", "64GiB", "--max-output", "0MiB", "--swap-disk", "1GiB"},
       "--swap-disk: expected a size such as 500GiB, with --swap-dir"},
      {{"--swap-dir", "/nonexistent", "--swap-disk", "big"},
       "--swap-disk: expected a size such as 500GiB, with --swap-dir"},
      // A plain 0 is a size (--max-output's help: "0: no limit"): what is refused is what follows.
      {{"--max-output", "0", "--swap-disk", "1GiB"},
       "--swap-disk: expected a size such as 500GiB, with --swap-dir"},
  };
  for (const auto& [flags, says] : cases) {
    std::vector<std::string> args = {"agent", "--server", "http://127.0.0.1:1"};
    args.insert(args.end(), flags.begin(), flags.end());
    ProcessResult r = Tessera(args);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << ": " << r.err;
    EXPECT_EQ(r.err, "tessera agent: " + says + "\n");
  }
}

}  // namespace
