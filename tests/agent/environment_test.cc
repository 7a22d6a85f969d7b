#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "agent/launcher.h"

namespace tessera::agent {
namespace {

std::map<std::string, std::string> AsMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const std::string& kv : env) {
    size_t eq = kv.find('=');
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

LauncherOptions TmpOpts() {
  LauncherOptions o;
  o.work_dir = "/tmp";
  return o;
}

JobSpec TwoDevices() {
  JobSpec spec;
  spec.id = "j-1";
  spec.command = {"true"};
  spec.devices = {{0, "GPU-aaa", "", "", "", -1}, {1, "GPU-bbb", "", "", "", -1}};
  return spec;
}

TEST(AgentJobEnvironment, VisibleDevicesAreTheGrantedUuids) {
  auto env = AsMap(BuildJobEnvironment(TwoDevices(), {"PATH=/bin", "HOME=/root"}, TmpOpts()));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-aaa,GPU-bbb");
  EXPECT_EQ(env["TESSERA_JOB_ID"], "j-1");
  EXPECT_EQ(env["PATH"], "/bin");
  EXPECT_EQ(env.count("TESSERA_GPU_MEMORY_LIMIT"), 0u);
  EXPECT_EQ(env.count("TESSERA_CAPGPU_REGION"), 0u);
}

TEST(AgentJobEnvironment, MigSliceUsesTheMigUuid) {
  JobSpec spec = TwoDevices();
  spec.devices = {{0, "GPU-aaa", "MIG-1234", "", "", -1}};
  auto env = AsMap(BuildJobEnvironment(spec, {}, TmpOpts()));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "MIG-1234");
}

TEST(AgentJobEnvironment, AmdPartitionIsALogicalGpuIndex) {
  JobSpec spec = TwoDevices();
  spec.devices = {{1, "GPU-bbb", "", "CPX#2", "CPX+NPS1", 3}};
  auto env = AsMap(BuildJobEnvironment(spec, {"ROCR_VISIBLE_DEVICES=0,1"}, TmpOpts()));
  EXPECT_EQ(env["ROCR_VISIBLE_DEVICES"], "3");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
}

TEST(AgentJobEnvironment, NoGpuMeansNoVisibleDevice) {
  JobSpec spec = TwoDevices();
  spec.devices.clear();
  auto env = AsMap(BuildJobEnvironment(spec, {"CUDA_VISIBLE_DEVICES=0,1"}, TmpOpts()));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
}

TEST(AgentJobEnvironment, BindingsBeatInheritedAndJobVariables) {
  JobSpec spec = TwoDevices();
  spec.env = {{"CUDA_VISIBLE_DEVICES", "everything"}, {"TESSERA_JOB_ID", "other"}, {"K", "V"}};
  auto env = AsMap(BuildJobEnvironment(
      spec, {"TESSERA_GPU_MEMORY_LIMIT=1", "TESSERA_CAPGPU_REGION=/x", "K=old"}, TmpOpts()));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-aaa,GPU-bbb");
  EXPECT_EQ(env["TESSERA_JOB_ID"], "j-1");
  EXPECT_EQ(env["K"], "V");
  EXPECT_EQ(env.count("TESSERA_GPU_MEMORY_LIMIT"), 0u);  // the agent's own never leaks
  EXPECT_EQ(env.count("TESSERA_CAPGPU_REGION"), 0u);
}

TEST(AgentJobEnvironment, TheAgentTokenNeverReachesAJob) {
  JobSpec spec = TwoDevices();
  auto env = AsMap(BuildJobEnvironment(
      spec, {"TESSERA_TOKEN=agent-secret", "TESSERA_URL=http://cp:8080"}, TmpOpts()));
  EXPECT_EQ(env.count("TESSERA_TOKEN"), 0u);
  EXPECT_EQ(env.count("TESSERA_URL"), 0u);
  spec.env = {{"TESSERA_TOKEN", "the-job-s-own"}};  // a job may bring its own
  env = AsMap(BuildJobEnvironment(spec, {"TESSERA_TOKEN=agent-secret"}, TmpOpts()));
  EXPECT_EQ(env["TESSERA_TOKEN"], "the-job-s-own");
}

TEST(AgentJobEnvironment, OnlyAllowedVariablesOfTheAgentReachAJob) {
  JobSpec spec = TwoDevices();
  auto env = AsMap(BuildJobEnvironment(
      spec,
      {"PATH=/usr/bin", "LANG=C.UTF-8", "LC_ALL=C", "LD_LIBRARY_PATH=/opt/cuda/lib64",
       "CUDA_CACHE_PATH=/c", "AWS_SECRET_ACCESS_KEY=s3cr3t", "PGPASSWORD=pw", "HOME=/root",
       "LD_PRELOAD=/agent-s.so", "SSH_AUTH_SOCK=/tmp/agent.sock"},
      TmpOpts()));
  EXPECT_EQ(env["PATH"], "/usr/bin");
  EXPECT_EQ(env["LANG"], "C.UTF-8");
  EXPECT_EQ(env["LC_ALL"], "C");
  EXPECT_EQ(env["LD_LIBRARY_PATH"], "/opt/cuda/lib64");
  EXPECT_EQ(env["CUDA_CACHE_PATH"], "/c");
  for (const char* name :
       {"AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "HOME", "LD_PRELOAD", "SSH_AUTH_SOCK"}) {
    EXPECT_EQ(env.count(name), 0u) << name;
  }
}

TEST(AgentJobEnvironment, ShareGetsLimitRegionAndPreloadWhenTheLibraryExists) {
  char lib[] = "/tmp/agent-capgpu-XXXXXX";
  int fd = mkstemp(lib);
  ASSERT_GE(fd, 0);
  close(fd);
  LauncherOptions opts = TmpOpts();
  opts.capgpu_preload = lib;
  opts.region_dir = "/dev/shm";
  JobSpec spec = TwoDevices();
  spec.devices = {{0, "GPU-aaa", "", "", "", -1}};
  spec.gpu_memory_limit_bytes = 8589934592;
  spec.env = {{"LD_PRELOAD", "/other.so"}};  // the job's own preload stays, after the cap library
  auto env = AsMap(BuildJobEnvironment(spec, {"LD_PRELOAD=/agent-s.so"}, opts));
  EXPECT_EQ(env["TESSERA_GPU_MEMORY_LIMIT"], "8589934592");
  EXPECT_EQ(env["TESSERA_CAPGPU_REGION"], "/dev/shm/tessera-capgpu-j-1");
  EXPECT_EQ(env["LD_PRELOAD"], std::string(lib) + ":/other.so");

  spec.env.clear();
  unlink(lib);  // a configured library that is missing is not preloaded
  env = AsMap(BuildJobEnvironment(spec, {}, opts));
  EXPECT_EQ(env.count("LD_PRELOAD"), 0u);
  EXPECT_EQ(env["TESSERA_GPU_MEMORY_LIMIT"], "8589934592");

  spec.gpu_memory_limit_bytes = 0;  // no share: no preload even with the library present
  opts.capgpu_preload = "/bin/sh";
  env = AsMap(BuildJobEnvironment(spec, {}, opts));
  EXPECT_EQ(env.count("LD_PRELOAD"), 0u);
}

TEST(AgentCgroups, LimitTexts) {
  EXPECT_EQ(CgroupCpuMax(0), "max 100000");
  EXPECT_EQ(CgroupCpuMax(2000), "200000 100000");
  EXPECT_EQ(CgroupCpuMax(250), "25000 100000");
  EXPECT_EQ(CgroupCpuMax(1), "1000 100000");  // kernel minimum
  EXPECT_EQ(CgroupMemoryMax(0), "max");
  EXPECT_EQ(CgroupMemoryMax(4096), "4294967296");
  // Found by fuzz/agent_protocol_fuzz: a start order's amounts past what the files can say
  // overflowed int64; they are no limit.
  EXPECT_EQ(CgroupCpuMax(99999999999999999), "max 100000");
  EXPECT_EQ(CgroupMemoryMax(99999999999999999), "max");
  EXPECT_EQ(CgroupMemoryMax(8796093022207), "9223372036853727232");  // the largest that fits
}

TEST(AgentJobIds, OnlySafeNames) {
  EXPECT_TRUE(ValidateJobId("j-12").ok());
  EXPECT_TRUE(ValidateJobId("job_1.retry-2").ok());
  EXPECT_FALSE(ValidateJobId("").ok());
  EXPECT_FALSE(ValidateJobId("../etc").ok());
  EXPECT_FALSE(ValidateJobId(".hidden").ok());
  EXPECT_FALSE(ValidateJobId("a/b").ok());
  EXPECT_FALSE(ValidateJobId(std::string(129, 'a')).ok());
}

}  // namespace
}  // namespace tessera::agent
