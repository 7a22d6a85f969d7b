#include "partition/catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace tessera::partition {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CatalogTest, BuiltInLoadsEveryCanonicalModel) {
  const Catalog& c = Catalog::BuiltIn();
  std::vector<std::string> names;
  for (const GpuModel& m : c.models()) names.push_back(m.name);
  EXPECT_THAT(names, ElementsAre("A30-24GB", "A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL-94GB",
                                 "GH200-96GB", "GH200-144GB", "H200-141GB", "B200-180GB",
                                 "GB200-186GB", "B300-288GB", "MI300X", "MI325X", "MI355X"));
}

TEST(CatalogTest, EmbeddedTextMatchesTheCommittedFile) {
  std::ifstream in(TESSERA_SOURCE_DIR "/data/catalog.json");
  ASSERT_TRUE(in) << "data/catalog.json is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(BuiltInCatalogJson(), text.str()) << "the build embeds a stale catalog; re-run cmake";
}

TEST(CatalogTest, FindsByNameOrAliasIgnoringCase) {
  const Catalog& c = Catalog::BuiltIn();
  struct Case {
    const char* query;
    const char* want;
  };
  for (const Case& k :
       {Case{"a100-40gb", "A100-40GB"}, Case{"A100-SXM4-40GB", "A100-40GB"},
        Case{"A800-40GB", "A100-40GB"}, Case{"GH200", "GH200-96GB"}, Case{"b200", "B200-180GB"},
        Case{"GB200 186GB", "GB200-186GB"}, Case{"NVIDIA A30", "A30-24GB"},
        Case{"mi300x", "MI300X"}, Case{"H200", "H200-141GB"}}) {
    const GpuModel* m = c.Find(k.query);
    ASSERT_NE(m, nullptr) << k.query;
    EXPECT_EQ(m->name, k.want) << k.query;
  }
  EXPECT_EQ(c.Find("A100"), nullptr);  // ambiguous between 40GB and 80GB: no alias
  Result<const GpuModel*> missing = c.Lookup("Z9000");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("unknown GPU model 'Z9000'"));
  EXPECT_THAT(missing.status().message(), HasSubstr("A100-40GB"));
  EXPECT_THAT(missing.status().message(), HasSubstr("MI355X"));
}

TEST(CatalogTest, ProfileNamesStripNotesAndKeepEarlyNamesAsAliases) {
  const GpuModel* gb200 = Catalog::BuiltIn().Find("GB200-186GB");
  ASSERT_NE(gb200, nullptr);
  std::vector<std::string> names;
  for (const MigProfile& p : gb200->mig.profiles) {
    names.push_back(p.name);
    EXPECT_EQ(p.name.find('('), std::string::npos) << p.name;
    EXPECT_EQ(p.name.find(' '), std::string::npos) << p.name;
  }
  EXPECT_THAT(names, ElementsAre("1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb",
                                 "4g.93gb", "7g.186gb"));
  ASSERT_NE(gb200->mig.FindProfile("1g.24gb"), nullptr);
  EXPECT_EQ(gb200->mig.FindProfile("1g.24gb")->name, "1g.23gb");
  EXPECT_EQ(gb200->mig.FindProfile("7G.189GB")->name, "7g.186gb");
  EXPECT_TRUE(gb200->mig.FindProfile("1g.23gb+me")->media_extension);
}

TEST(CatalogTest, MemoryIsIntegerMiBAndEstimatesAreMarked) {
  const Catalog& c = Catalog::BuiltIn();
  const GpuModel* a100 = c.Find("A100-40GB");
  EXPECT_EQ(a100->memory_mib, 40 * 1024);
  EXPECT_EQ(a100->mig.FindProfile("1g.5gb")->memory_mib, 4864);    // 4.75 GiB reported
  EXPECT_EQ(a100->mig.FindProfile("7g.40gb")->memory_mib, 40192);  // 39.25 GiB
  EXPECT_EQ(c.Find("H100-80GB")->mig.FindProfile("1g.10gb")->memory_mib, 9984);  // 9.75 GiB
  // Not reported on B200: estimated and marked.
  const MigProfile* b200_3g = c.Find("B200-180GB")->mig.FindProfile("3g.90gb");
  EXPECT_GT(b200_3g->memory_mib, 0);
  EXPECT_THAT(b200_3g->inferred_fields, ::testing::Contains("memory_mib"));
  for (const GpuModel& m : c.models()) {
    for (const MigProfile& p : m.mig.profiles) {
      EXPECT_LE(p.memory_mib, m.memory_mib) << m.name << " " << p.name;
    }
  }
}

TEST(CatalogTest, InferredFlagsCarriedFromTheSource) {
  const Catalog& c = Catalog::BuiltIn();
  const GpuModel* a100 = c.Find("A100-40GB");
  EXPECT_FALSE(a100->inferred);
  EXPECT_FALSE(a100->AnyInferred());
  for (const MigProfile& p : a100->mig.profiles) EXPECT_FALSE(p.inferred) << p.name;

  const GpuModel* h200 = c.Find("H200-141GB");
  EXPECT_TRUE(h200->inferred);
  for (const MigProfile& p : h200->mig.profiles) {
    EXPECT_TRUE(p.inferred) << p.name;
    EXPECT_THAT(p.inferred_fields, ::testing::Contains("placements")) << p.name;
  }
  // A100-80GB: only 1g.20gb was not read on the part.
  const GpuModel* a100_80 = c.Find("A100-80GB");
  EXPECT_FALSE(a100_80->inferred);
  EXPECT_TRUE(a100_80->AnyInferred());
  EXPECT_TRUE(a100_80->mig.FindProfile("1g.20gb")->inferred);
  EXPECT_FALSE(a100_80->mig.FindProfile("2g.20gb")->inferred);
  EXPECT_TRUE(c.Find("MI325X")->inferred);
  EXPECT_FALSE(c.Find("A30-24GB")->inferred);
}

// Loads the embedded catalog, applies `edit` to its JSON and expects FromJson to fail with a
// message holding every one of `want`.
void ExpectInvalid(const std::function<void(json&)>& edit, std::vector<std::string> want) {
  json j = json::parse(BuiltInCatalogJson());
  edit(j);
  Result<Catalog> r = Catalog::FromJson(j.dump());
  ASSERT_FALSE(r.ok()) << "accepted; wanted error with " << want[0];
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& w : want) EXPECT_THAT(r.status().message(), HasSubstr(w));
}

json& Model(json& j, const std::string& name) {
  for (json& m : j["models"]) {
    if (m["name"] == name) return m;
  }
  throw std::runtime_error("no model " + name);
}

json& Profile(json& j, const std::string& model, const std::string& name) {
  for (json& p : Model(j, model)["profiles"]) {
    if (p["name"] == name) return p;
  }
  throw std::runtime_error("no profile " + name);
}

TEST(CatalogTest, RejectsBrokenJson) {
  for (const char* bad : {"{", "", "[1, 2", "{\"models\": [}"}) {
    Result<Catalog> r = Catalog::FromJson(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("not valid JSON")) << bad;
  }
  Result<Catalog> r = Catalog::FromJson("[]");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("top level must be an object"));
  r = Catalog::FromJson(R"({"schema_version": 1, "models": []})");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("'models'"));
}

TEST(CatalogTest, RejectsDuplicateNamesAndAliases) {
  ExpectInvalid([](json& j) { j["models"][1]["name"] = "a30-24gb"; },
                {"model a30-24gb", "already used"});
  ExpectInvalid([](json& j) { Model(j, "MI300X")["aliases"].push_back("GH200"); },
                {"model MI300X", "'aliases'", "GH200"});
  ExpectInvalid([](json& j) { Profile(j, "A100-40GB", "2g.10gb")["name"] = "1g.5gb"; },
                {"model A100-40GB", "1g.5gb", "used twice"});
}

TEST(CatalogTest, RejectsInvalidProfiles) {
  ExpectInvalid(
      [](json& j) {
        Profile(j, "A100-40GB", "3g.20gb")["starts"] = {0, 5};
      },
      {"model A100-40GB, profile 3g.20gb", "'starts'", "5 + 4 memory slices"});
  ExpectInvalid(
      [](json& j) {
        Profile(j, "A100-40GB", "1g.5gb")["starts"] = {0, 9};
      },
      {"model A100-40GB, profile 1g.5gb", "'starts'", "outside memory slices 0..7"});
  ExpectInvalid(
      [](json& j) {
        Profile(j, "A100-40GB", "1g.5gb")["starts"] = {2, 1};
      },
      {"profile 1g.5gb", "'starts'", "ascending"});
  ExpectInvalid([](json& j) { Profile(j, "A100-40GB", "1g.5gb")["starts"] = json::array(); },
                {"profile 1g.5gb", "'starts'", "non-empty"});
  ExpectInvalid([](json& j) { Profile(j, "A30-24GB", "4g.24gb")["compute_slices"] = 5; },
                {"model A30-24GB, profile 4g.24gb", "'compute_slices'", "device's 4"});
  ExpectInvalid([](json& j) { Profile(j, "H100-80GB", "7g.80gb")["memory_slices"] = 9; },
                {"model H100-80GB, profile 7g.80gb", "'memory_slices'"});
  ExpectInvalid([](json& j) { Profile(j, "H100-80GB", "2g.20gb")["max_instances"] = 0; },
                {"model H100-80GB, profile 2g.20gb", "'max_instances'"});
  ExpectInvalid([](json& j) { Profile(j, "H100-80GB", "2g.20gb")["memory_mib"] = 0; },
                {"model H100-80GB, profile 2g.20gb", "'memory_mib'"});
  ExpectInvalid([](json& j) { Profile(j, "H100-80GB", "2g.20gb")["memory_mib"] = 1.5; },
                {"profile 2g.20gb", "'memory_mib'", "integer"});
  ExpectInvalid([](json& j) { Profile(j, "H100-80GB", "2g.20gb")["memory_mib"] = 900000; },
                {"profile 2g.20gb", "'memory_mib'", "more than the device's"});
  ExpectInvalid([](json& j) { Profile(j, "H100-80GB", "2g.20gb").erase("max_instances"); },
                {"profile 2g.20gb", "'max_instances' is missing"});
  ExpectInvalid([](json& j) { Profile(j, "H100-80GB", "2g.20gb")["media_extension"] = "no"; },
                {"profile 2g.20gb", "'media_extension'"});
}

TEST(CatalogTest, RejectsInvalidModels) {
  ExpectInvalid([](json& j) { Model(j, "H200-141GB").erase("memory_mib"); },
                {"model H200-141GB", "'memory_mib' is missing"});
  ExpectInvalid([](json& j) { Model(j, "H200-141GB")["memory_mib"] = -1; },
                {"model H200-141GB", "'memory_mib'"});
  ExpectInvalid([](json& j) { Model(j, "H200-141GB")["kind"] = "tpu"; },
                {"model H200-141GB", "'kind'"});
  ExpectInvalid([](json& j) { Model(j, "H200-141GB")["max_gpu_instances"] = 0; },
                {"model H200-141GB", "'max_gpu_instances'"});
  ExpectInvalid([](json& j) { Model(j, "H200-141GB")["profiles"] = json::array(); },
                {"model H200-141GB", "'profiles'"});
  ExpectInvalid([](json& j) { j["models"][0].erase("name"); }, {"models[0]", "'name'"});
}

TEST(CatalogTest, RejectsInvalidAmdModes) {
  ExpectInvalid(
      [](json& j) {
        Model(j, "MI300X")["legal_pairs"].push_back({{"compute", "TPX"}, {"memory", "NPS1"}});
      },
      {"model MI300X", "'legal_pairs'", "unknown compute mode TPX"});
  ExpectInvalid(
      [](json& j) {
        Model(j, "MI300X")["legal_pairs"].push_back({{"compute", "SPX"}, {"memory", "NPS2"}});
      },
      {"model MI300X", "'legal_pairs'", "unknown memory mode NPS2"});
  ExpectInvalid(
      [](json& j) {
        Model(j, "MI300X")["legal_pairs"].push_back({{"compute", "SPX"}, {"memory", "NPS4"}});
      },
      {"model MI300X", "SPX+NPS4", "memory partitions (4) exceed compute partitions (1)"});
  ExpectInvalid([](json& j) { Model(j, "MI355X")["compute_modes"][1]["partitions"] = 3; },
                {"model MI355X, compute mode DPX", "'xcds_per_partition'"});
  ExpectInvalid([](json& j) { Model(j, "MI355X")["memory_modes"][0]["domains"] = 0; },
                {"model MI355X, memory mode NPS1", "'domains'"});
  ExpectInvalid([](json& j) { Model(j, "MI300X")["validated_pairs"].push_back("DPX+NPS4"); },
                {"model MI300X", "'validated_pairs'", "DPX+NPS4"});
  ExpectInvalid([](json& j) { Model(j, "MI325X")["cus"] = 0; }, {"model MI325X", "'cus'"});
}

}  // namespace
}  // namespace tessera::partition
