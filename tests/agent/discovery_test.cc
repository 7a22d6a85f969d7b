#include "agent/discovery.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "agent/device_health.h"
#include "agent/nvml_mig.h"
#include "test_util.h"

namespace tessera::agent {
namespace {

const partition::Catalog& Cat() { return partition::Catalog::BuiltIn(); }

TEST(AgentSimulatedInventory, CountTimesModel) {
  Result<std::vector<DiscoveredDevice>> d = ParseSimulatedInventory("2xH100-80GB", "host-a", Cat());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*d)[i].index, i);
    EXPECT_EQ((*d)[i].model, "H100-80GB");
    EXPECT_EQ((*d)[i].memory_mib, 81920);
    EXPECT_EQ((*d)[i].uuid, "GPU-sim-host-a-" + std::to_string(i));
    EXPECT_TRUE((*d)[i].simulated);
  }
}

TEST(AgentSimulatedInventory, MixedListKeepsOrderAndCatalogNames) {
  Result<std::vector<DiscoveredDevice>> d =
      ParseSimulatedInventory(" 1xMI300X , 4xa100-40gb", "n1", Cat());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->size(), 5u);
  EXPECT_EQ((*d)[0].model, "MI300X");
  EXPECT_EQ((*d)[0].memory_mib, 196608);
  EXPECT_EQ((*d)[1].model, "A100-40GB");  // canonical spelling from the catalog
  EXPECT_EQ((*d)[4].index, 4);
  EXPECT_EQ((*d)[4].uuid, "GPU-sim-n1-4");
}

TEST(AgentSimulatedInventory, BareModelMeansOneAndModelsMayContainX) {
  Result<std::vector<DiscoveredDevice>> d = ParseSimulatedInventory("MI300X", "n", Cat());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].model, "MI300X");
  d = ParseSimulatedInventory("3XMI325X", "n", Cat());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->size(), 3u);
}

TEST(AgentSimulatedInventory, BadSpecsSayWhatIsWrong) {
  struct Case {
    const char* spec;
    const char* want;  // a fragment of the message
  };
  for (const Case& c : std::vector<Case>{
           {"", "empty"},
           {"2xH100-80GB,", "empty item"},
           {",1xA30-24GB", "empty item"},
           {"0xH100-80GB", "count must be 1 to 64"},
           {"65xH100-80GB", "count must be 1 to 64"},
           {"2x", "names no model"},
           {"2xH999", "unknown GPU model 'H999'"},
           {"2xH999", "H100-80GB"},  // the known names are listed
           {"40xA30-24GB,40xA30-24GB", "more than 64"},
       }) {
    Result<std::vector<DiscoveredDevice>> d = ParseSimulatedInventory(c.spec, "n", Cat());
    ASSERT_FALSE(d.ok()) << c.spec;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << c.spec;
    EXPECT_NE(d.status().message().find(c.want), std::string::npos)
        << c.spec << ": " << d.status().message();
  }
}

TEST(AgentNvml, AbsentLibraryIsReportedCleanly) {
  Result<std::vector<DiscoveredDevice>> d = DiscoverNvml(Cat(), "/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.status().message().rfind("no NVML", 0), 0u) << d.status().message();
}

TEST(AgentNvml, AbsentNvmlGivesACpuOnlyInventory) {
  Result<Inventory> inv = DiscoverInventory("host-b", "", "/nonexistent/libnvidia-ml.so.1");
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_TRUE(inv->devices.empty());
  EXPECT_FALSE(inv->simulated);
  EXPECT_EQ(inv->source, "none");
  EXPECT_EQ(inv->note.rfind("no NVML", 0), 0u);
  EXPECT_GT(inv->host.cpu_milli, 0);
  EXPECT_GT(inv->host.memory_mib, 0);
}

TEST(AgentNvml, EnumeratesThroughAStandInLibrary) {
  unsetenv("FAKE_NVML_INIT_FAIL");
  Result<std::vector<DiscoveredDevice>> d = DiscoverNvml(Cat(), FAKE_NVML_PATH);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].model, "H100-80GB");
  EXPECT_EQ((*d)[0].uuid, "GPU-fake-agent-0");
  EXPECT_EQ((*d)[0].memory_mib, 81559);
  EXPECT_TRUE((*d)[0].mig_enabled);
  EXPECT_FALSE((*d)[0].simulated);
  EXPECT_EQ((*d)[1].model, "A100-40GB");
  EXPECT_FALSE((*d)[1].mig_enabled);
}

TEST(AgentNvml, InitFailureIsNoNvml) {
  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  Result<std::vector<DiscoveredDevice>> d = DiscoverNvml(Cat(), FAKE_NVML_PATH);
  unsetenv("FAKE_NVML_INIT_FAIL");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("Driver Not Loaded"), std::string::npos)
      << d.status().message();
}

TEST(AgentNvml, SimulatedSpecWinsOverNvml) {
  Result<Inventory> inv = DiscoverInventory("h", "1xH100-80GB", FAKE_NVML_PATH);
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->simulated);
  EXPECT_EQ(inv->source, "simulated");
  ASSERT_EQ(inv->devices.size(), 1u);
  EXPECT_EQ(inv->devices[0].uuid, "GPU-sim-h-0");
  EXPECT_FALSE(DiscoverInventory("h", "1xNOPE", FAKE_NVML_PATH).ok());
}

TEST(AgentMatchCatalogModel, DriverNamesToCatalogModels) {
  EXPECT_EQ(MatchCatalogModel("NVIDIA H100 80GB HBM3", 81559, Cat()), "H100-80GB");
  EXPECT_EQ(MatchCatalogModel("NVIDIA H100 NVL", 95830, Cat()), "H100-NVL-94GB");
  EXPECT_EQ(MatchCatalogModel("NVIDIA A100-SXM4-80GB", 81920, Cat()), "A100-80GB");
  EXPECT_EQ(MatchCatalogModel("NVIDIA A100-PCIE-40GB", 40536, Cat()), "A100-40GB");
  EXPECT_EQ(MatchCatalogModel("NVIDIA H200", 143771, Cat()), "H200-141GB");
  EXPECT_EQ(MatchCatalogModel("Tesla T4", 15360, Cat()), "");
}

TEST(AgentHostParsers, CgroupCpuMax) {
  EXPECT_EQ(ParseCgroupCpuMax("max 100000\n"), 0);
  EXPECT_EQ(ParseCgroupCpuMax("150000 100000\n"), 1500);
  EXPECT_EQ(ParseCgroupCpuMax("50000 100000"), 500);
  EXPECT_EQ(ParseCgroupCpuMax("-1 100000"), 0);  // cgroup v1 "no quota"
  EXPECT_EQ(ParseCgroupCpuMax(""), 0);
  EXPECT_EQ(ParseCgroupCpuMax("junk"), 0);
}

TEST(AgentHostParsers, MemInfoTotal) {
  EXPECT_EQ(ParseMemInfoTotal("MemTotal:       65843012 kB\nMemFree:  1 kB\n"), 64299);
  EXPECT_EQ(ParseMemInfoTotal("MemFree: 1 kB\n"), 0);
}

}  // namespace
}  // namespace tessera::agent

namespace tessera::agent {
namespace {

// Where NVML does not initialise (no driver), each part of the agent that opens it (the
// inventory, telemetry, device health, MIG) refuses in the same words, naming the library and
// NVML's reason, and none calls nvmlShutdown on an NVML it never initialised (telemetry used to,
// from its destructor; the inventory's message did not name the library).
TEST(OpenNvml, WhereNvmlDoesNotInitialiseEachUserRefusesAndNoneShutsItDown) {
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  auto shutdowns = reinterpret_cast<int (*)()>(dlsym(lib, "fake_nvml_shutdowns"));
  ASSERT_NE(shutdowns, nullptr);
  const int before = shutdowns();
  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  const std::string want =
      std::string("no NVML: ") + FAKE_NVML_PATH + ": nvmlInit failed: Driver Not Loaded (NVML 9)";
  EXPECT_EQ(NvmlSampler::Open(FAKE_NVML_PATH).status().message(), want);
  EXPECT_EQ(NvmlHealth::Open(FAKE_NVML_PATH).status().message(), want);
  EXPECT_EQ(NvmlMig::Open(FAKE_NVML_PATH).status().message(), want);
  EXPECT_EQ(DiscoverNvml(Cat(), FAKE_NVML_PATH).status().message(), want) << "the inventory's";
  unsetenv("FAKE_NVML_INIT_FAIL");
  EXPECT_EQ(shutdowns(), before) << "nvmlShutdown called without nvmlInit";
  auto sampler = NvmlSampler::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  sampler->reset();
  EXPECT_EQ(shutdowns(), before + 1) << "an NVML initialised is shut down with its user";
  dlclose(lib);
}

TEST(NvmlSampler, ReadsUtilizationMemoryAndProcesses) {
  auto sampler = NvmlSampler::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  std::vector<NvmlSample> s = (*sampler)->Sample();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].util_pct, 37);
  EXPECT_EQ(s[0].memory_used_bytes, 0);
  ASSERT_EQ(s[0].processes.size(), 1u);
  EXPECT_EQ(s[0].processes[0], (std::pair<int, int64_t>{4242, int64_t{3} << 30}));
  EXPECT_EQ(s[1].util_pct, 0);
  EXPECT_TRUE(s[1].processes.empty());
  EXPECT_EQ(NvmlSampler::Open("/nonexistent/libnvidia-ml.so.1").status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::agent

namespace tessera::agent {
namespace {

// The isolation grade a device gets (issue 38): MIG on is hardware partitions; else the cap
// library alone, or nothing without one.
TEST(AgentIsolationGrade, MigIsHardwareElseTheCapLibraryElseNone) {
  DiscoveredDevice mig;
  mig.mig_enabled = true;
  DiscoveredDevice whole;
  EXPECT_EQ(IsolationGrade(mig, true), "hardware");
  EXPECT_EQ(IsolationGrade(mig, false), "hardware");
  EXPECT_EQ(IsolationGrade(whole, true), "preload");
  EXPECT_EQ(IsolationGrade(whole, false), "none");
  // Through the stand-in NVML: device 0 has MIG on, device 1 not.
  auto devices = DiscoverNvml(partition::Catalog::BuiltIn(), FAKE_NVML_PATH);
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_EQ(IsolationGrade((*devices)[0], true), "hardware");
  EXPECT_EQ(IsolationGrade((*devices)[1], true), "preload");
}

// The agent claims "preload" only with a cap library it can preload (issue 38): a shared
// library, not a missing path, a directory, a text file or a program.
TEST(AgentIsolationGrade, TheCapLibraryIsCheckedBeforeItIsClaimed) {
  testing::TempDir dir;
  EXPECT_TRUE(CheckCapLibrary(FAKE_NVML_PATH).ok()) << CheckCapLibrary(FAKE_NVML_PATH).ToString();
  auto says = [](const std::string& path, const std::string& what) {
    Status st = CheckCapLibrary(path);
    EXPECT_FALSE(st.ok()) << path;
    EXPECT_NE(st.message().find("cap library '" + path + "' " + what), std::string::npos)
        << st.message();
  };
  says(dir.path() + "/libtessera_capgpu.so", "does not exist");
  says(dir.path(), "is not a regular file");
  std::ofstream(dir.path() + "/text.so") << "not a library\n";
  says(dir.path() + "/text.so", "is not an ELF shared library");
  says("/bin/sh", "is a program, not a shared library");
  DiscoveredDevice whole;
  EXPECT_EQ(IsolationGrade(whole, CheckCapLibrary(dir.path() + "/missing.so").ok()), "none");
}

}  // namespace
}  // namespace tessera::agent
