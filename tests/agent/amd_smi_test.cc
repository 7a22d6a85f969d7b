// AMD devices through AMD SMI (src/agent/amd_smi.h) and their modes through the agent's
// partitions (src/agent/partitions.h), against the stand-in libamd_smi.so of this directory
// (fake_amdsmi.cc: AMD SMI's GPU, partition and ECC calls, its state a file FAKE_AMDSMI_CONFIG
// names, set calls recorded there): there is no GPU here.
#include "agent/amd_smi.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "agent/partitions.h"
#include "partition/catalog.h"
#include "test_util.h"

namespace tessera::agent {
namespace {

class AmdSmiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = dir_.path() + "/amdsmi";
    // Two MI300X as AMD SMI names them, 192 GiB each, in SPX+NPS1.
    Append("device 0 GPU-amd-0 196608 AMD Instinct MI300X");
    Append("device 1 GPU-amd-1 196608 AMD Instinct MI300X");
    setenv("FAKE_AMDSMI_CONFIG", file_.c_str(), 1);
  }
  void TearDown() override { unsetenv("FAKE_AMDSMI_CONFIG"); }
  void Append(const std::string& line) { std::ofstream(file_, std::ios::app) << line << "\n"; }
  // The set calls the stand-in received, one per line ("amdsmi_set_gpu_compute_partition 0 CPX").
  std::string Calls() {
    std::ifstream in(file_);
    std::string line, out;
    while (std::getline(in, line))
      if (line.rfind("call ", 0) == 0) out += line.substr(5) + "\n";
    return out;
  }
  Inventory Discovered() {
    auto devices = DiscoverAmdSmi(partition::Catalog::BuiltIn(), FAKE_AMDSMI_PATH);
    EXPECT_TRUE(devices.ok()) << devices.status().ToString();
    Inventory inv;
    inv.node = "amd-1";
    inv.source = "amdsmi";
    if (devices.ok()) inv.devices = *devices;
    return inv;
  }
  testing::TempDir dir_;
  std::string file_;
};

TEST_F(AmdSmiTest, DiscoveryReadsTwoMi300xWithTheirModes) {
  Append("compute 1 CPX");
  Append("memory 1 NPS4");
  auto d = DiscoverAmdSmi(partition::Catalog::BuiltIn(), FAKE_AMDSMI_PATH);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->size(), 2u) << "device 1's seven other partitions are not devices";
  EXPECT_EQ((*d)[0].index, 0);
  EXPECT_EQ((*d)[0].model, "MI300X");
  EXPECT_EQ((*d)[0].uuid, "GPU-amd-0");
  EXPECT_EQ((*d)[0].memory_mib, 196608);
  EXPECT_FALSE((*d)[0].simulated);
  EXPECT_EQ((*d)[0].amd_mode, "SPX+NPS1");
  EXPECT_EQ((*d)[1].uuid, "GPU-amd-1");
  EXPECT_EQ((*d)[1].amd_mode, "CPX+NPS4");
  EXPECT_EQ((*d)[1].memory_mib, 196608) << "8 partitions of 24 GiB";
}

TEST_F(AmdSmiTest, NoLibraryOrAFailedInitIsNoAmdSmi) {
  auto none = DiscoverAmdSmi(partition::Catalog::BuiltIn(), "/nonexistent/libamd_smi.so");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message().rfind("no AMD SMI: cannot load", 0), 0u)
      << none.status().message();
  Append("fail amdsmi_init 34");
  auto failed = DiscoverAmdSmi(partition::Catalog::BuiltIn(), FAKE_AMDSMI_PATH);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(),
            "no AMD SMI: amdsmi_init failed: An unknown error occurred (status 34)");
}

// Without NVML the inventory is AMD SMI's; without either it is a CPU-only node saying why.
// The mode setters refuse a mode AMD SMI has no value for, calling nothing, and name the device,
// the call and AMD SMI's status when the call fails.
TEST_F(AmdSmiTest, ModeSettersRefuseUnknownModesAndNameAFailedCall) {
  auto smi = AmdSmi::Open(FAKE_AMDSMI_PATH);
  ASSERT_TRUE(smi.ok()) << smi.status().ToString();
  Status st = (*smi)->SetCompute("GPU-amd-0", "XPX");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "AMD SMI has no compute mode 'XPX'");
  st = (*smi)->SetMemory("GPU-amd-0", "NPS3");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "AMD SMI has no memory mode 'NPS3'");
  EXPECT_EQ(Calls(), "");
  Append("fail amdsmi_set_gpu_compute_partition 34");
  Append("fail amdsmi_set_gpu_memory_partition 34");
  st = (*smi)->SetCompute("GPU-amd-1", "CPX");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "device GPU-amd-1: amdsmi_set_gpu_compute_partition(CPX) failed: An unknown error "
            "occurred (status 34)");
  st = (*smi)->SetMemory("GPU-amd-1", "NPS4");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "device GPU-amd-1: amdsmi_set_gpu_memory_partition(NPS4) failed: An unknown error "
            "occurred (status 34)");
  EXPECT_TRUE((*smi)->Modes("GPU-amd-1").ok()) << "the library was started again after";
}

TEST_F(AmdSmiTest, TheInventoryFallsBackFromNvmlToAmdSmi) {
  auto inv = DiscoverInventory("amd-1", "", "/nonexistent/libnvidia-ml.so.1", FAKE_AMDSMI_PATH);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->source, "amdsmi");
  ASSERT_EQ(inv->devices.size(), 2u);
  EXPECT_EQ(inv->devices[1].model, "MI300X");
  auto none = DiscoverInventory("amd-1", "", "/nonexistent/libnvidia-ml.so.1",
                                "/nonexistent/libamd_smi.so");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->source, "none");
  EXPECT_EQ(none->note.rfind("no NVML", 0), 0u) << none->note;
  EXPECT_NE(none->note.find("; no AMD SMI: cannot load /nonexistent/libamd_smi.so"),
            std::string::npos)
      << none->note;
}

// A partition on a real (stand-in) device: amdsmi_set_gpu_compute_partition, read back, and the
// logical GPUs numbered across devices; back to SPX when the device is free again.
TEST_F(AmdSmiTest, APartitionSetsTheComputeModeThroughAmdSmi) {
  Inventory inv = Discovered();
  Partitions p(inv, "", FAKE_AMDSMI_PATH);
  auto a = p.Acquire("j1", 1, "CPX#2", "CPX+NPS1");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Calls(), "amdsmi_set_gpu_compute_partition 1 CPX\n");
  EXPECT_EQ(a->amd_index, 1 + 2) << "device 0's one logical GPU, then partition 2";
  EXPECT_EQ(p.Layout(1), "CPX+NPS1: #2");
  auto again = AmdSmi::Open(FAKE_AMDSMI_PATH);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Modes("GPU-amd-1")->ToString(), "CPX+NPS1") << "the device says so";
  // A second partition in the same mode needs no call.
  ASSERT_TRUE(p.Acquire("j2", 1, "CPX#5", "CPX+NPS1").ok());
  EXPECT_EQ(Calls(), "amdsmi_set_gpu_compute_partition 1 CPX\n");
  p.Release("j1");
  p.Release("j2");
  auto whole = p.Use("j3", 1, "SPX+NPS1");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, "CPX+NPS1");
  EXPECT_EQ(Calls(),
            "amdsmi_set_gpu_compute_partition 1 CPX\namdsmi_set_gpu_compute_partition 1 SPX\n");
  EXPECT_EQ((*again)->Modes("GPU-amd-1")->ToString(), "SPX+NPS1");
}

// The simulated path's rules hold on real devices: a busy device keeps its compute mode (no
// call is made), a memory mode waits for the whole hive; the driver's own refusal names the
// device, the call and the status; a change that does not take is caught by reading it back.
TEST_F(AmdSmiTest, ABusyDevicesModeChangeIsRefused) {
  Inventory inv = Discovered();
  Partitions p(inv, "", FAKE_AMDSMI_PATH);
  ASSERT_TRUE(p.Use("whole", 0, "SPX+NPS1").ok());
  auto refused = p.Acquire("j1", 0, "CPX#0", "CPX+NPS1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("busy"), std::string::npos)
      << refused.status().message();
  auto hive = p.Acquire("j1", 1, "CPX#0", "CPX+NPS4");
  ASSERT_FALSE(hive.ok());
  EXPECT_NE(hive.status().message().find("device 0"), std::string::npos) << hive.status().message();
  EXPECT_EQ(Calls(), "") << "nothing was asked of the device";
  p.Release("whole");

  Append("busy 1 1");  // a process the agent does not know of holds device 1
  auto driver = p.Acquire("j1", 1, "CPX#0", "CPX+NPS1");
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().message(),
            "AMD partition CPX#0 on GPU-amd-1: device GPU-amd-1: "
            "amdsmi_set_gpu_compute_partition(CPX) failed: Device busy (status 30)");
  Append("busy 1 0");
  Append("ignore amdsmi_set_gpu_compute_partition");
  auto stuck = p.Acquire("j1", 1, "QPX#0", "QPX+NPS1");
  ASSERT_FALSE(stuck.ok());
  EXPECT_EQ(stuck.status().message(),
            "AMD partition QPX#0 on GPU-amd-1: device GPU-amd-1: "
            "amdsmi_set_gpu_compute_partition(QPX) did not take: it reports SPX");
}

// A memory mode is set once for the hive (the driver applies it to every device and moves SPX
// to CPX), then read back on every device.
TEST_F(AmdSmiTest, AMemoryModeChangeIsHiveWideAndVerified) {
  Inventory inv = Discovered();
  Partitions p(inv, "", FAKE_AMDSMI_PATH);
  auto a = p.Acquire("j1", 1, "CPX#7", "CPX+NPS4");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Calls(), "amdsmi_set_gpu_memory_partition 0 NPS4\n");
  EXPECT_EQ(a->amd_index, 8 + 7) << "device 0 is in CPX too now";
  EXPECT_EQ(p.Layout(0), "CPX+NPS4:");
  EXPECT_EQ(p.Layout(1), "CPX+NPS4: #7");
}

// A memory mode change reloads the driver: handles taken before it are stale, and health goes on
// being read through handles enumerated anew.
TEST_F(AmdSmiTest, HealthIsReadOnAfterAMemoryModeChangeReloadsTheDriver) {
  auto h = AmdSmiHealth::Open(FAKE_AMDSMI_PATH, {"GPU-amd-0", "GPU-amd-1"});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Check()[0].healthy);
  Inventory inv = Discovered();
  Partitions p(inv, "", FAKE_AMDSMI_PATH);
  ASSERT_TRUE(p.Acquire("j1", 1, "CPX#0", "CPX+NPS4").ok());
  Append("ecc 0 0 1");
  auto after = (*h)->Check();
  ASSERT_FALSE(after[0].healthy);
  EXPECT_EQ(after[0].reason, "uncorrectable ECC errors: 1 (AMD SMI)");
}

TEST_F(AmdSmiTest, AnUncorrectableEccCountMakesTheDeviceUnhealthy) {
  auto h = AmdSmiHealth::Open(FAKE_AMDSMI_PATH, {"GPU-amd-0", "GPU-amd-1"});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Append("ecc 0 12 0");  // correctable errors alone change nothing
  auto before = (*h)->Check();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_TRUE(before[0].healthy);
  EXPECT_TRUE(before[1].healthy);
  Append("ecc 1 0 2");
  std::vector<std::string> log;
  auto after = (*h)->Check(0, &log);
  EXPECT_TRUE(after[0].healthy);
  ASSERT_FALSE(after[1].healthy);
  EXPECT_EQ(after[1].reason, "uncorrectable ECC errors: 2 (AMD SMI)");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "device 1: 2 uncorrectable ECC error(s) (the device is unhealthy)");
  // An operator's word acknowledges the 2; a third error closes it again; a reset reopens it.
  EXPECT_TRUE((*h)->Reset(1));
  EXPECT_TRUE((*h)->Check()[1].healthy);
  Append("ecc 1 0 3");
  EXPECT_FALSE((*h)->Check()[1].healthy);
  Append("ecc 1 0 0");
  EXPECT_TRUE((*h)->Check()[1].healthy);
  EXPECT_EQ((*h)->Reads(), "uncorrectable ECC counts (AMD SMI)");
}

}  // namespace
}  // namespace tessera::agent
