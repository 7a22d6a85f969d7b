#include "partition/amd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::partition {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const GpuModel& Gpu(const char* name) {
  const GpuModel* m = Catalog::BuiltIn().Find(name);
  if (m == nullptr) ADD_FAILURE() << "no model " << name;
  return *m;
}

std::vector<std::string> PairNames(const GpuModel& m) {
  std::vector<std::string> out;
  for (const AmdPair& p : LegalPairs(m)) out.push_back(p.ToString());
  return out;
}

constexpr MiB kGiB = 1024;

TEST(AmdTest, LegalPairsPerModelFromTheSource) {
  EXPECT_THAT(PairNames(Gpu("MI300X")),
              ElementsAre("SPX+NPS1", "DPX+NPS1", "QPX+NPS1", "QPX+NPS4", "CPX+NPS1", "CPX+NPS4"));
  EXPECT_THAT(PairNames(Gpu("MI325X")),
              ElementsAre("SPX+NPS1", "DPX+NPS1", "QPX+NPS1", "QPX+NPS4", "CPX+NPS1", "CPX+NPS4"));
  EXPECT_THAT(PairNames(Gpu("MI355X")),
              ElementsAre("SPX+NPS1", "DPX+NPS1", "DPX+NPS2", "QPX+NPS1", "CPX+NPS1"));
}

TEST(AmdTest, IllegalPairsNameTheReason) {
  struct Case {
    const char* model;
    AmdPair pair;
    const char* message;
  };
  const Case cases[] = {
      {"MI300X",
       {"SPX", "NPS4"},
       "SPX+NPS4 is not a legal pair on MI300X: memory partitions (4) exceed compute "
       "partitions (1)"},
      {"MI300X",
       {"DPX", "NPS4"},
       "DPX+NPS4 is not a legal pair on MI300X: memory partitions (4) exceed compute "
       "partitions (2)"},
      {"MI355X",
       {"QPX", "NPS2"},
       "QPX+NPS2 is not a legal pair on MI355X: QPX pairs with NPS1 only"},
      {"MI355X",
       {"CPX", "NPS2"},
       "CPX+NPS2 is not a legal pair on MI355X: CPX pairs with NPS1 only"},
      {"MI355X", {"SPX", "NPS4"}, "unknown memory mode NPS4 (modes: NPS1, NPS2)"},
      {"MI300X", {"TPX", "NPS1"}, "unknown compute mode TPX (modes: SPX, DPX, QPX, CPX)"},
  };
  for (const Case& c : cases) {
    Result<AmdPartitioning> r = Partition(Gpu(c.model), c.pair);
    ASSERT_FALSE(r.ok()) << c.pair.ToString();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.message));
  }
}

TEST(AmdTest, MemoryPerPartition) {
  struct Case {
    const char* model;
    const char* pair;
    int partitions;
    MiB mib;
    int cus;
  };
  const Case cases[] = {
      {"MI300X", "SPX+NPS1", 1, 192 * kGiB, 304}, {"MI300X", "CPX+NPS4", 8, 24 * kGiB, 38},
      {"MI300X", "cpx+nps1", 8, 24 * kGiB, 38},   {"MI300X", "QPX+NPS4", 4, 48 * kGiB, 76},
      {"MI325X", "CPX+NPS1", 8, 32 * kGiB, 38},   {"MI355X", "CPX+NPS1", 8, 36 * kGiB, 32},
      {"MI355X", "DPX+NPS2", 2, 144 * kGiB, 128},
  };
  for (const Case& c : cases) {
    Result<AmdPair> pair = ParsePair(Gpu(c.model), c.pair);
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    Result<AmdPartitioning> p = Partition(Gpu(c.model), *pair);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->partitions, c.partitions) << c.pair;
    EXPECT_EQ(p->memory_per_partition_mib, c.mib) << c.pair;
    EXPECT_EQ(p->cus_per_partition, c.cus) << c.pair;
  }
  EXPECT_TRUE(Partition(Gpu("MI300X"), {"CPX", "NPS4"})->validated);
  EXPECT_FALSE(Partition(Gpu("MI300X"), {"QPX", "NPS4"})->validated);
  EXPECT_FALSE(ParsePair(Gpu("MI300X"), "CPX").ok());
  EXPECT_FALSE(ParsePair(Gpu("MI300X"), "CPX+NPS4+X").ok());
  EXPECT_FALSE(ParsePair(Gpu("A100-40GB"), "CPX+NPS4").ok());
}

TEST(AmdTest, ComputeModeChangeNeedsAnIdleDeviceAndALegalPair) {
  const GpuModel& mi300 = Gpu("MI300X");
  AmdDevice busy{"gpu0", {"SPX", "NPS1"}, true};
  Status s = CheckComputeModeChange(mi300, busy, "CPX");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("gpu0"));
  EXPECT_THAT(s.message(), HasSubstr("busy"));

  AmdDevice idle{"gpu1", {"SPX", "NPS1"}, false};
  EXPECT_TRUE(CheckComputeModeChange(mi300, idle, "cpx").ok());
  AmdDevice nps4{"gpu2", {"CPX", "NPS4"}, false};
  Status spx = CheckComputeModeChange(mi300, nps4, "SPX");
  EXPECT_EQ(spx.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(spx.message(), HasSubstr("SPX+NPS4 is not a legal pair on MI300X"));
  EXPECT_TRUE(CheckComputeModeChange(mi300, nps4, "QPX").ok());
  EXPECT_EQ(CheckComputeModeChange(mi300, idle, "XPX").code(), StatusCode::kInvalidArgument);
}

TEST(AmdTest, MemoryModeChangeNeedsTheWholeNodeIdle) {
  const GpuModel& mi300 = Gpu("MI300X");
  std::vector<AmdDevice> node = {{"gpu0", {"SPX", "NPS1"}, false},
                                 {"gpu1", {"QPX", "NPS1"}, true},
                                 {"gpu2", {"CPX", "NPS1"}, false},
                                 {"gpu3", {"DPX", "NPS1"}, true}};
  Result<MemoryModeChange> refused = CheckMemoryModeChange(mi300, node, "NPS4");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("busy: gpu1, gpu3"));

  node[1].busy = node[3].busy = false;
  Result<MemoryModeChange> ok = CheckMemoryModeChange(mi300, node, "nps4");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_THAT(ok->affected, ElementsAre("gpu0", "gpu1", "gpu2", "gpu3"));
  // SPX and DPX cannot run with NPS4: they land in CPX, as AMD documents for MI300X.
  EXPECT_THAT(ok->resulting, ElementsAre(AmdPair{"CPX", "NPS4"}, AmdPair{"QPX", "NPS4"},
                                         AmdPair{"CPX", "NPS4"}, AmdPair{"CPX", "NPS4"}));
  EXPECT_EQ(CheckMemoryModeChange(mi300, node, "NPS2").status().code(),
            StatusCode::kInvalidArgument);
  // MI355X: NPS2 pairs only with DPX.
  Result<MemoryModeChange> mi355 =
      CheckMemoryModeChange(Gpu("MI355X"), {{"a", {"SPX", "NPS1"}, false}}, "NPS2");
  ASSERT_TRUE(mi355.ok());
  EXPECT_THAT(mi355->resulting, ElementsAre(AmdPair{"DPX", "NPS2"}));
}

TEST(AmdTest, PlanChoosesTheSmallestPartitionsThatFit) {
  const GpuModel& mi300 = Gpu("MI300X");
  Result<AmdPartitioning> p = PlanAmd(mi300, {24 * kGiB, 24 * kGiB, 40 * kGiB, 40 * kGiB});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->pair.ToString(), "QPX+NPS1");
  EXPECT_EQ(p->memory_per_partition_mib, 48 * kGiB);

  p = PlanAmd(mi300, std::vector<MiB>(8, 20 * kGiB));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pair.ToString(), "CPX+NPS1");  // ties with CPX+NPS4: fewer memory domains
  p = PlanAmd(mi300, {100 * kGiB});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pair.ToString(), "SPX+NPS1");
  p = PlanAmd(Gpu("MI355X"), {100 * kGiB, 140 * kGiB});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pair.ToString(), "DPX+NPS1");
  EXPECT_EQ(p->memory_per_partition_mib, 144 * kGiB);

  Result<AmdPartitioning> too_big = PlanAmd(mi300, {200 * kGiB});
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status().message(),
              HasSubstr("no legal pair on MI300X gives 1 partition of at least 200GiB"));
  Result<AmdPartitioning> too_many = PlanAmd(mi300, std::vector<MiB>(9, kGiB));
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.status().message(), HasSubstr("9 partitions"));
  EXPECT_EQ(PlanAmd(mi300, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanAmd(mi300, {0}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::partition
