// Partitions on agent devices: simulated inventories keep MIG instances under the partition
// engine's rules; NVML devices get them through NVML, here the stand-in library (fake_nvml.cc):
// a GPU instance created at the cycle's start slice, a compute instance over it, its MIG UUID for
// the job, both destroyed when the job ends; MIG-off devices and overlapping starts are refused.
#include "agent/partitions.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

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

TEST(AgentPartitions, SimulatedInstancesFollowThePartitionEngine) {
  auto devs = ParseSimulatedInventory("1xA100-80GB", "n1", partition::Catalog::BuiltIn());
  ASSERT_TRUE(devs.ok());
  Inventory inv;
  inv.node = "n1";
  inv.devices = *devs;
  Partitions p(inv, "");
  auto a = p.Acquire("j1", 0, "1g.10gb@6");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->rfind("MIG-", 0), 0u);
  EXPECT_FALSE(p.Acquire("j2", 0, "1g.10gb@6").ok());    // taken
  EXPECT_FALSE(p.Acquire("j2", 0, "3g.40gb@3").ok());    // not a legal start
  EXPECT_FALSE(p.Acquire("j2", 0, "3g.40gb@4").ok());    // slices 4-7 overlap 1g.10gb@6
  EXPECT_TRUE(p.Acquire("j2", 0, "3g.40gb@0").ok());
  EXPECT_EQ(p.Layout(0), "3g.40gb@0, 1g.10gb@6");
  p.Release("j1");
  EXPECT_EQ(p.Layout(0), "3g.40gb@0");
}

TEST(AgentPartitions, NvmlDevicesGetInstancesThroughNvml) {
  Inventory inv;
  inv.node = "n1";
  inv.devices = {{0, "H100-80GB", 81152, "GPU-fake-agent-0", false, true},
                 {1, "A100-40GB", 40536, "GPU-fake-agent-1", false, false}};
  Partitions p(inv, FAKE_NVML_PATH);
  auto a = p.Acquire("j1", 0, "1g.10gb@3");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->rfind("MIG-fake-", 0), 0u) << *a;
  EXPECT_EQ(FakeInstances(), "19@3");  // profile id 19 (1g.10gb) at slice 3, with its compute instance
  auto b = p.Acquire("j2", 0, "3g.40gb@4");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(*a, *b);
  EXPECT_EQ(FakeInstances(), "19@3 9@4");
  auto overlap = p.Acquire("j3", 0, "1g.10gb@5");  // inside 3g.40gb@4's slices 4-7
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("at slice 5"), std::string::npos) << overlap.status().message();
  auto off = p.Acquire("j4", 1, "1g.5gb@0");
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find("MIG mode is off"), std::string::npos) << off.status().message();
  p.Release("j1");
  EXPECT_EQ(FakeInstances(), "9@4");
  p.Release("j2");
  EXPECT_EQ(FakeInstances(), "-");
}

}  // namespace
}  // namespace tessera::agent
