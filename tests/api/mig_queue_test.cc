// Queues with `mig_model`: a partition job gets the smallest MIG profile of the queue's model
// that gives the memory and compute it asks for, the group's limits count what that instance
// holds, and impossible asks and bad models are refused by name. Real SQLite store; a Slurm queue
// (nothing runs sbatch here: no Tick is called).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "api/engine.h"
#include "test_dir.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups:
  - {name: research, limit: {gpu_memory: 20GiB}}
profiles:
  - {name: mig, gpus: 1, gpu_fraction: 0.1, cpu: 1, memory: 1GiB, forms: [partition]}
queues:
  - {name: inference, profile: mig, groups: [research], class: inference, backend: slurm, mig_model: h100-80gb}
)";

class MigQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("mig_queue");
    auto c = ParseConfig(kConfig);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    config_ = *c;
    auto store = store::Store::Open(dir_ + "/tessera.db");
    ASSERT_TRUE(store.ok());
    auto e = Engine::Open(config_, std::move(*store), dir_, [] { return int64_t{1'000'000}; });
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
  }
  void TearDown() override {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }
  Result<Json> Submit(Json body) {
    body["queue"] = "inference";
    body["command"] = {"true"};
    return engine_->Submit(config_.identities[0], body);
  }

  std::string dir_;
  EngineConfig config_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(MigQueueTest, TheSmallestProfileThatGivesWhatIsAsked) {
  struct Case {
    Json body;
    std::string profile;
    int64_t memory_mib, gpu_milli;
  };
  const Case cases[] = {
      {Json::object(), "1g.10gb", 9984, 143},  // the profile's 0.1 of a GPU: the smallest
      {{{"gpu_memory", "10GiB"}}, "1g.20gb", 20091, 143},  // 10GiB > 9984MiB
      {{{"gpu_memory", "15GiB"}, {"gpu_fraction", "0.25"}},
       "2g.20gb",
       20091,
       286},  // 2 of 7 slices
      {{{"gpu_fraction", "0.5"}}, "4g.40gb", 40448, 572},
      {{{"gpu_memory", "79GiB"}}, "7g.80gb", 81152, 1000},  // 81152MiB: "80gb" is less than 80GiB
  };
  for (const Case& c : cases) {
    // One at a time (the group's 20GiB limit would hold the larger ones back otherwise).
    TearDown();
    SetUp();
    auto r = Submit(c.body);
    if (c.memory_mib > 20 * 1024) {
      // An instance past the group's 20GiB limit could never run: refused, naming the limit.
      ASSERT_FALSE(r.ok()) << c.body.dump();
      EXPECT_NE(r.status().message().find("group 'research' may hold at most 20GiB of gpu_memory"),
                std::string::npos)
          << r.status().message();
      continue;
    }
    ASSERT_TRUE(r.ok()) << c.body.dump() << ": " << r.status().ToString();
    EXPECT_EQ((*r)["spec"]["mig_profile"], c.profile) << c.body.dump();
    EXPECT_EQ((*r)["spec"]["gpu_memory_mib"], c.memory_mib) << c.body.dump();
    EXPECT_EQ((*r)["spec"]["gpu_milli"], c.gpu_milli) << c.body.dump();
    EXPECT_EQ((*r)["spec"]["form"], "partition");
  }
}

TEST_F(MigQueueTest, GroupLimitsCountTheInstancesMemory) {
  // Two 1g.10gb (2 x 9984MiB) fit the group's 20GiB; a third waits.
  for (int i = 0; i < 2; ++i) {
    auto r = Submit(Json::object());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)["state"], "placed") << r->dump();
  }
  auto third = Submit(Json::object());
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)["state"], "pending") << third->dump();
  EXPECT_NE((*third)["reason"].get<std::string>().find("gpu_memory"), std::string::npos)
      << third->dump();
}

TEST_F(MigQueueTest, ImpossibleAsksAndBadModelsAreRefusedByName) {
  auto r = Submit({{"gpu_memory", "100GiB"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no MIG profile of H100-80GB gives 100GiB of GPU memory"),
            std::string::npos)
      << r.status().message();
  auto none = engine_->views().ListJobs(config_.identities[0], "", 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)["jobs"].empty());  // nothing recorded
  for (const std::string model : {"MI300X", "B300-288GB-nope"}) {
    std::string yaml = kConfig;
    yaml.replace(yaml.find("h100-80gb"), 9, model);
    auto c = ParseConfig(yaml);
    ASSERT_FALSE(c.ok()) << model;
    EXPECT_NE(c.status().message().find("queues[inference].mig_model: '" + model +
                                        "' is not a MIG model"),
              std::string::npos)
        << c.status().message();
  }
  std::string local = kConfig;
  local.replace(local.find("backend: slurm, "), 16, "");
  auto c = ParseConfig(local);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("mig_model: only for a queue with an external backend"),
            std::string::npos)
      << c.status().message();
  std::string pbs = kConfig;
  pbs.replace(pbs.find("backend: slurm"), 14, "backend: pbs");
  c = ParseConfig(pbs);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(
                "queues[inference].mig_model: the PBS backend maps no MIG instances"),
            std::string::npos)
      << c.status().message();
}

// The shipped example config loads (its template paths are relative to the source tree).
TEST(ExampleConfig, SlurmExampleLoads) {
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(TESSERA_SOURCE_DIR);
  auto c = LoadConfig("examples/slurm/tessera.yaml");
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_NE(c->FindQueue("inference"), nullptr);
  EXPECT_EQ(c->FindRoute("inference")->mig_model, "A100-80GB");
  EXPECT_EQ(c->FindRoute("batch-pbs")->backend, "pbs");
  // Its inference queue (class inference, profile forms [share, partition]) grants a MIG instance
  // by default, the smallest A100-80GB profile with the profile's 10GiB: 1g.20gb; a share on ask.
  const std::string dir = ::testing::TempDir() + "/example_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto store = store::Store::Open(dir + "/tessera.db");
  ASSERT_TRUE(store.ok());
  auto e = Engine::Open(*c, std::move(*store), dir, [] { return int64_t{1'000'000}; });
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const Identity& alice = *std::find_if(c->identities.begin(), c->identities.end(),
                                        [](const Identity& i) { return i.name == "alice"; });
  auto mig = (*e)->Submit(alice, {{"queue", "inference"}, {"command", {"true"}}});
  ASSERT_TRUE(mig.ok()) << mig.status().ToString();
  EXPECT_EQ((*mig)["spec"]["form"], "partition");
  EXPECT_EQ((*mig)["spec"]["mig_profile"], "1g.20gb");
  auto share =
      (*e)->Submit(alice, {{"queue", "inference"}, {"form", "share"}, {"command", {"true"}}});
  ASSERT_TRUE(share.ok()) << share.status().ToString();
  EXPECT_EQ((*share)["spec"]["form"], "share");
  EXPECT_FALSE((*share)["spec"].contains("mig_profile"));
  e->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::api
