// Partitions on agent devices: simulated inventories keep MIG instances under the partition
// engine's rules; NVML devices get them through NVML, here the stand-in library (fake_nvml.cc):
// a GPU instance created at the cycle's start slice, a compute instance over it, its MIG UUID for
// the job, both destroyed when the job ends; MIG-off devices and overlapping starts are refused.
#include "agent/partitions.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "partition/catalog.h"

namespace tessera::agent {
namespace {

std::string FakeInstances() {
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return "(not loaded)";
  auto list = reinterpret_cast<void (*)(char*, unsigned)>(dlsym(lib, "fake_nvml_instances"));
  char buf[256] = {};
  list(buf, sizeof buf);
  dlclose(lib);
  return buf;
}

// Node n1's inventory, simulated as `spec` ("2xMI300X").
Inventory Simulated(const std::string& spec) {
  auto devs = ParseSimulatedInventory(spec, "n1", partition::Catalog::BuiltIn());
  EXPECT_TRUE(devs.ok()) << devs.status().ToString();
  Inventory inv;
  inv.node = "n1";
  if (devs.ok()) inv.devices = *devs;
  return inv;
}

TEST(AgentPartitions, SimulatedInstancesFollowThePartitionEngine) {
  Inventory inv = Simulated("1xA100-80GB");
  Partitions p(inv, "");
  auto a = p.Acquire("j1", 0, "1g.10gb@6");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->mig.rfind("MIG-", 0), 0u);
  EXPECT_EQ(a->amd_index, -1);
  EXPECT_FALSE(p.Acquire("j2", 0, "1g.10gb@6").ok());  // taken
  EXPECT_FALSE(p.Acquire("j2", 0, "3g.40gb@3").ok());  // not a legal start
  EXPECT_FALSE(p.Acquire("j2", 0, "3g.40gb@4").ok());  // slices 4-7 overlap 1g.10gb@6
  EXPECT_TRUE(p.Acquire("j2", 0, "3g.40gb@0").ok());
  EXPECT_EQ(p.Layout(0), "3g.40gb@0, 1g.10gb@6");
  p.Release("j1");
  EXPECT_EQ(p.Layout(0), "3g.40gb@0");
}

// AMD: a partition switches its device's compute mode only while the device is idle, and the
// memory mode only while the whole node is; partitions are logical GPUs numbered across devices.
TEST(AgentPartitions, SimulatedAmdModesFollowThePartitionEngine) {
  Inventory inv = Simulated("2xMI300X");
  Partitions p(inv, "");
  EXPECT_EQ(p.Layout(1), "");  // SPX+NPS1: not split
  auto a = p.Acquire("j1", 1, "CPX#2", "CPX+NPS1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->amd_index, 1 + 2);  // device 0 is one logical GPU (SPX), then device 1's #2
  EXPECT_EQ(a->mig, "");
  EXPECT_EQ(p.Layout(1), "CPX+NPS1: #2");
  auto taken = p.Acquire("j2", 1, "CPX#2", "CPX+NPS1");
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("in use by job j1"), std::string::npos)
      << taken.status().message();
  EXPECT_FALSE(p.Acquire("j2", 1, "CPX#8", "CPX+NPS1").ok());  // CPX has partitions 0-7
  auto busy = p.Acquire("j2", 1, "QPX#0", "QPX+NPS1");  // device 1 is busy: no compute change
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().message().find("busy"), std::string::npos) << busy.status().message();
  // NPS4 is hive-wide: refused while device 1 runs j1, whichever device asks.
  auto nps = p.Acquire("j3", 0, "CPX#0", "CPX+NPS4");
  ASSERT_FALSE(nps.ok());
  EXPECT_NE(nps.status().message().find("device 1"), std::string::npos) << nps.status().message();
  EXPECT_EQ(p.Layout(0), "");                                  // nothing half-applied
  EXPECT_FALSE(p.Acquire("j3", 0, "SPX#0", "SPX+NPS4").ok());  // not a legal pair
  p.Release("j1");
  auto b = p.Acquire("j3", 0, "CPX#1", "CPX+NPS4");  // the node is idle now
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->amd_index, 1);
  EXPECT_EQ(p.Layout(0), "CPX+NPS4: #1");
  EXPECT_EQ(p.Layout(1), "CPX+NPS4:");  // switched with the hive
  // A whole card in use holds its device's mode too.
  ASSERT_TRUE(p.Use("j4", 1).ok());
  EXPECT_FALSE(p.Acquire("j5", 1, "QPX#0", "QPX+NPS4").ok());
  p.Release("j4");
  EXPECT_TRUE(p.Acquire("j5", 1, "QPX#0", "QPX+NPS4").ok());
}

// A whole card or share carries its device's pair: a simulated AMD card left in a split mode by
// its partitions goes back to it (the cycle returned the card to SPX+NPS1 for whole demand), only
// while idle; the same pair changes nothing.
TEST(AgentPartitions, AWholeCardGoesBackToTheOrdersMode) {
  Inventory inv = Simulated("1xMI300X");
  Partitions p(inv, "");
  ASSERT_TRUE(p.Acquire("inf", 0, "CPX#0", "CPX+NPS1").ok());
  auto busy = p.Use("train", 0, "SPX+NPS1");
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().message().find("busy"), std::string::npos) << busy.status().message();
  p.Release("inf");
  EXPECT_EQ(p.Layout(0), "CPX+NPS1:");  // left split by its partitions
  auto left = p.Use("train", 0, "SPX+NPS1");
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_EQ(*left, "CPX+NPS1");
  EXPECT_EQ(p.Layout(0), "");  // SPX+NPS1: whole again
  p.Release("train");
  auto same = p.Use("train2", 0, "SPX+NPS1");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, "");
  EXPECT_FALSE(p.Use("x", 0, "SPX+NPS9").ok());  // not a pair of the model
}

TEST(AgentPartitions, NvmlDevicesGetInstancesThroughNvml) {
  Inventory inv;
  inv.node = "n1";
  inv.devices = {{0, "H100-80GB", 81152, "GPU-fake-agent-0", false, true},
                 {1, "A100-40GB", 40536, "GPU-fake-agent-1", false, false}};
  Partitions p(inv, FAKE_NVML_PATH);
  auto a = p.Acquire("j1", 0, "1g.10gb@3");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->mig.rfind("MIG-fake-", 0), 0u) << a->mig;
  EXPECT_EQ(FakeInstances(),
            "19@3");  // profile id 19 (1g.10gb) at slice 3, with its compute instance
  auto b = p.Acquire("j2", 0, "3g.40gb@4");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->mig, b->mig);
  EXPECT_EQ(FakeInstances(), "19@3 9@4");
  auto overlap = p.Acquire("j3", 0, "1g.10gb@5");  // inside 3g.40gb@4's slices 4-7
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("at slice 5"), std::string::npos)
      << overlap.status().message();
  auto off = p.Acquire("j4", 1, "1g.5gb@0");
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find("MIG mode is off"), std::string::npos)
      << off.status().message();
  p.Release("j1");
  EXPECT_EQ(FakeInstances(), "9@4");
  p.Release("j2");
  EXPECT_EQ(FakeInstances(), "-");
}

// A MIG instance whose destroy fails at release (the killed job's processes still hold it) is
// destroyed later, by RetryDestroys or before the next instance is made, not left behind.
TEST(AgentPartitions, AnInstanceStillInUseAtReleaseIsDestroyedLater) {
  Inventory inv;
  inv.node = "n1";
  inv.devices = {{0, "H100-80GB", 81152, "GPU-fake-agent-0", false, true}};
  Partitions p(inv, FAKE_NVML_PATH);
  ASSERT_TRUE(p.Acquire("j1", 0, "1g.10gb@3").ok());
  setenv("FAKE_NVML_BUSY_DESTROYS", "2", 1);
  p.Release("j1");
  EXPECT_EQ(FakeInstances(), "19@3") << "still in use: left for later";
  EXPECT_EQ(p.RetryDestroys(), 1u) << "still in use";
  EXPECT_EQ(p.RetryDestroys(), 0u);
  EXPECT_EQ(FakeInstances(), "-");
  // And before a new instance is made where it was.
  ASSERT_TRUE(p.Acquire("j2", 0, "1g.10gb@3").ok());
  setenv("FAKE_NVML_BUSY_DESTROYS", "1", 1);
  p.Release("j2");
  EXPECT_EQ(FakeInstances(), "19@3");
  auto again = p.Acquire("j3", 0, "1g.10gb@3");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(FakeInstances(), "19@3");
  p.Release("j3");
  EXPECT_EQ(FakeInstances(), "-");
  unsetenv("FAKE_NVML_BUSY_DESTROYS");
}

}  // namespace
}  // namespace tessera::agent
