// Unit tests of the backends' pieces that need no scheduler: the registry, template rendering,
// the mapping of allocation forms to GRES, index lists, running a command, and the Slurm poll's
// call pattern against stand-in squeue/scontrol scripts, and the accounts jobs are submitted as.
#include "backends/backend.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::backends {
namespace {

JobRequest Job(const std::string& form, int gpus, int64_t gpu_mem = 0) {
  JobRequest j;
  j.id = "j-7";
  j.name = "tessera-c-j-7";
  j.command = {"python", "train.py", "it's"};
  j.form = form;
  j.gpus = gpus;
  j.gpu_memory_mib = gpu_mem;
  j.cpu_milli = 1500;
  j.memory_mib = 2048;
  j.output_path = "/data/output/j-7.log";
  j.mapping.partition = "gpu";
  return j;
}

TEST(Registry, BuiltinsAreRegisteredByName) {
  const Registry& r = BuiltinRegistry();
  EXPECT_TRUE(r.Has("slurm"));
  EXPECT_TRUE(r.Has("pbs"));
  EXPECT_TRUE(r.Has("kubernetes"));
  EXPECT_FALSE(r.Has("nomad"));
  auto b = r.Make("slurm", {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->Name(), "slurm");
  EXPECT_FALSE(r.Make("nope", {}).ok());
}

TEST(Gres, FormsMapToSlurmResources) {
  EXPECT_EQ(*GresFor(Job("whole", 2)), "gpu:2");
  JobRequest typed = Job("whole", 4);
  typed.mapping.gpu_type = "a100";
  EXPECT_EQ(*GresFor(typed), "gpu:a100:4");
  // Shares: shard GRES sized from the share's memory (1 GiB per shard by default, rounded up).
  EXPECT_EQ(*GresFor(Job("share", 1, 10 * 1024 + 1)), "shard:11");
  JobRequest big_shards = Job("share", 1, 8192);
  big_shards.mapping.shard_mib = 4096;
  EXPECT_EQ(*GresFor(big_shards), "shard:2");
  // MIG instances as typed GRES with Slurm's names, when the queue maps one.
  JobRequest mig = Job("partition", 1);
  EXPECT_FALSE(GresFor(mig).ok());
  mig.mapping.gres_partition = "gpu:1g.10gb:1";
  EXPECT_EQ(*GresFor(mig), "gpu:1g.10gb:1");
  // A profile chosen from the queue's mig_model: Slurm's type name, or the admin's pattern.
  JobRequest chosen = Job("partition", 1);
  chosen.mig_profile = "2g.20gb";
  EXPECT_EQ(*GresFor(chosen), "gpu:2g.20gb:1");
  chosen.mapping.gres_partition = "gpu:h100_{profile}:1";
  EXPECT_EQ(*GresFor(chosen), "gpu:h100_2g.20gb:1");
  // The admin's override.
  JobRequest over = Job("whole", 2);
  over.mapping.gres_whole = "gpu:h100:{gpus},nic:1";
  EXPECT_EQ(*GresFor(over), "gpu:h100:2,nic:1");
  EXPECT_EQ(*GresFor(Job("", 0)), "");
}

TEST(Render, SlurmDefaultTemplateCarriesResourcesEnvAndCommand) {
  auto b = BuiltinRegistry().Make("slurm", {});
  JobRequest j = Job("share", 1, 3072);
  j.env["A"] = "x y";
  auto s = (*b)->Render(j);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (const char* want :
       {"#SBATCH --job-name=tessera-c-j-7\n", "#SBATCH --partition=gpu\n",
        "#SBATCH --cpus-per-task=2\n", "#SBATCH --mem=2048M\n",
        "#SBATCH --output=/data/output/j-7.log\n", "#SBATCH --gres=shard:3\n", "export A='x y'\n",
        "export TESSERA_GPU_MEMORY_LIMIT='3221225472'\n", "'python' 'train.py' 'it'\\''s'\n"}) {
    EXPECT_NE(s->find(want), std::string::npos) << want << " in\n" << *s;
  }
}

TEST(Render, AnEnvironmentNameThatIsNotAShellNameIsRefused) {
  for (const char* backend : {"slurm", "pbs"}) {
    auto b = BuiltinRegistry().Make(backend, {});
    JobRequest j = Job("whole", 1);
    j.env["X=1; touch /tmp/owned; Y"] = "v";  // a record from before the API refused these
    auto s = (*b)->Render(j);
    ASSERT_FALSE(s.ok()) << backend << ":\n" << *s;
    EXPECT_NE(s.status().message().find("is not a shell name"), std::string::npos)
        << s.status().message();
  }
}

// A declared walltime is the scheduler's time limit (backfill counts on it; the control plane
// leaves an external queue's jobs to their scheduler to stop): a directive before the first
// command, and none without one.
TEST(Render, AWalltimeIsTheSchedulersTimeLimit) {
  for (const auto& [backend, directive] : std::vector<std::pair<std::string, std::string>>{
           {"slurm", "#SBATCH --time=25:01:01\n"}, {"pbs", "#PBS -l walltime=25:01:01\n"}}) {
    auto b = BuiltinRegistry().Make(backend, {});
    JobRequest j = Job("whole", 1);
    auto none = (*b)->Render(j);
    ASSERT_TRUE(none.ok()) << none.status().message();
    EXPECT_EQ(none->find("time"), std::string::npos) << *none;
    j.walltime_s = 25 * 3600 + 61;
    auto s = (*b)->Render(j);
    ASSERT_TRUE(s.ok()) << s.status().message();
    const size_t at = s->find(directive);
    ASSERT_NE(at, std::string::npos) << directive << " in\n" << *s;
    EXPECT_LT(at, s->find("export ")) << *s;
    EXPECT_TRUE(CheckScriptTemplate(*s, backend).ok()) << *s;
  }
  EXPECT_EQ(ClockSeconds(ClockText(25 * 3600 + 61)), 25 * 3600 + 61);
  EXPECT_EQ(ClockText(59), "00:00:59");
}

TEST(Render, PbsDefaultTemplateUsesSelect) {
  auto b = BuiltinRegistry().Make("pbs", {});
  auto s = (*b)->Render(Job("whole", 2));
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find("#PBS -l select=1:ncpus=2:ngpus=2:mem=2048mb\n"), std::string::npos) << *s;
  EXPECT_NE(s->find("#PBS -q gpu\n"), std::string::npos) << *s;
}

TEST(Render, UnknownPlaceholderIsNamed) {
  auto r = RenderTemplate("a {{x}} {{ y }}", {{"x", "1"}, {"y", "2"}});
  EXPECT_EQ(*r, "a 1 2");
  auto bad = RenderTemplate("{{nope}}", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nope"), std::string::npos);
}

// sbatch and qsub read no directive after a script's first command. The shipped Slurm example
// listed {{env}} in its header comment: its export lines came first, so no job got its name,
// partition, GPUs or output file, and a job's environment could add #SBATCH lines of its own.
TEST(TemplateCheck, DirectivesComeBeforeTheFirstCommandAndCommandsStayOutOfComments) {
  for (const char* file : {"/examples/slurm/job.sbatch", "/examples/slurm/job.pbs"}) {
    std::ifstream in(std::string(TESSERA_SOURCE_DIR) + file);
    std::stringstream text;
    text << in.rdbuf();
    ASSERT_FALSE(text.str().empty()) << file;
    const std::string backend = std::string(file).ends_with(".pbs") ? "pbs" : "slurm";
    EXPECT_TRUE(CheckScriptTemplate(text.str(), backend).ok())
        << file << ": " << CheckScriptTemplate(text.str(), backend).ToString();
  }
  const Status in_comment = CheckScriptTemplate(
      "#!/bin/bash\n# placeholders: {{env}} {{command}}\n#SBATCH -J x\n"
      "{{env}}\n{{command}}\n",
      "slurm");
  ASSERT_FALSE(in_comment.ok());
  EXPECT_NE(in_comment.message().find("line 2"), std::string::npos) << in_comment.ToString();
  EXPECT_NE(in_comment.message().find("{{env}}"), std::string::npos) << in_comment.ToString();
  const Status late = CheckScriptTemplate(
      "#!/bin/bash\n#PBS -N {{job_name}}\n{{env}}\n#PBS -o {{output}}\n{{command}}\n", "pbs");
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.message().find("line 4 ('#PBS -o {{output}}') comes after the first command "
                                "(line 3)"),
            std::string::npos)
      << late.ToString();
  const Status late_line = CheckScriptTemplate(
      "#!/bin/bash\ncd /scratch\n{{sbatch_gres}}{{env}}\n{{command}}\n", "slurm");
  EXPECT_FALSE(late_line.ok());
  // What the backends build in, and a template for a backend without directives.
  EXPECT_TRUE(CheckScriptTemplate("#!/bin/bash\n#SBATCH -J {{job_name}}\n\n# run it\n"
                                  "{{sbatch_partition}}{{sbatch_gres}}{{env}}\n{{command}}\n",
                                  "slurm")
                  .ok());
  EXPECT_TRUE(CheckScriptTemplate("echo {{env}}", "kubernetes").ok());
}

// sbatch refuses a script with a carriage return in it, every time: the job waited for ever,
// placed and holding its group's quota, retrying once a minute.
TEST(Render, ACarriageReturnIsRefusedForSlurmNotRetried) {
  auto slurm = BuiltinRegistry().Make("slurm", {});
  JobRequest j = Job("whole", 1);
  j.command = {"python", "-c", "print(1)\r\nprint(2)"};
  auto s = (*slurm)->Render(j);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("carriage return"), std::string::npos)
      << s.status().ToString();
  j.command = {"true"};
  j.env["A"] = "x\r";
  EXPECT_FALSE((*slurm)->Render(j).ok());
  auto pbs = BuiltinRegistry().Make("pbs", {});
  EXPECT_TRUE((*pbs)->Render(j).ok()) << "qsub takes it, quoted";
}

TEST(IndexList, Ranges) {
  EXPECT_EQ(ParseIndexList("0-2,5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(ParseIndexList("3"), (std::vector<int>{3}));
  EXPECT_TRUE(ParseIndexList("x").empty());
  // Found by fuzz/slurm_fuzz: a range ending at INT_MAX overflowed its loop counter.
  EXPECT_EQ(ParseIndexList("2147483647-2147483647"), (std::vector<int>{2147483647}));
}

// How long a job ran, as Slurm's TimeUsed and PBS's resources_used.walltime write it.
TEST(BackendText, ClockDurations) {
  EXPECT_EQ(ClockSeconds("0:00"), 0);
  EXPECT_EQ(ClockSeconds("1:05"), 65);
  EXPECT_EQ(ClockSeconds("00:00:05"), 5);
  EXPECT_EQ(ClockSeconds("2:03:04"), 7384);
  EXPECT_EQ(ClockSeconds("1-02:03:04"), 93784);
  EXPECT_EQ(ClockSeconds("1-02:03"), 93780);  // days-hours:minutes
  for (const char* bad : {"", "INVALID", "UNLIMITED", "5", "1:2:3:4", "-1:00", "1:xx", "1:60",
                          "99999999999999999999:00", ":05", "1::05"}) {
    EXPECT_EQ(ClockSeconds(bad), -1) << bad;
  }
}

// Lines as Slurm 22.05's squeue and scontrol print them (captured from the test cluster).
TEST(SlurmListing, ParsesSqueueAndScontrolLines) {
  auto held = ParseSqueueLine("2|PENDING||JobHeldUser|0|0:00|alice|tessera-x-j-2|");
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->external_id, "2");
  EXPECT_EQ(held->user, "alice");
  EXPECT_EQ(held->state, "pending");
  EXPECT_EQ(held->reason, "JobHeldUser");
  EXPECT_EQ(held->name, "tessera-x-j-2");
  EXPECT_FALSE(held->exit_code.has_value());
  EXPECT_EQ(held->run_s, 0);
  auto failed = ParseSqueueLine("2001|FAILED|vm|NonZeroExitCode|768|1:05|bob|tx|fail|");
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->state, "failed");
  EXPECT_EQ(failed->exit_code, 3);  // the raw wait status 768
  EXPECT_EQ(failed->node, "vm");
  EXPECT_EQ(failed->name, "tx|fail");  // a '|' in a name shifts nothing
  EXPECT_EQ(failed->run_s, 65);        // TimeUsed: how long it ran
  auto killed = ParseSqueueLine("7|CANCELLED|vm|None|9|1-02:03:04|root|t|");
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(killed->state, "cancelled");
  EXPECT_EQ(killed->signal, 9);
  EXPECT_EQ(killed->run_s, 93784);
  EXPECT_EQ(ParseSqueueLine("8|RUNNING|vm|None|0|INVALID|root|t|")->run_s, -1);  // not said
  // Only the states Slurm documents as ends end a job: a held requeue (SPECIAL_EXIT) or a state
  // this release does not know is followed as waiting, not recorded failed while it may run on.
  const std::vector<std::pair<std::string, std::string>> states = {
      {"SPECIAL_EXIT", "pending"}, {"SOME_NEW_STATE", "pending"}, {"REVOKED", "cancelled"},
      {"TIMEOUT", "failed"},       {"OUT_OF_MEMORY", "failed"},   {"PREEMPTED", "failed"},
      {"NODE_FAIL", "failed"},     {"BOOT_FAIL", "failed"},       {"DEADLINE", "failed"}};
  for (const auto& [native, state] : states) {
    auto x = ParseSqueueLine("9|" + native + "|vm|None|0|0:01|root|t|");
    ASSERT_TRUE(x.has_value()) << native;
    EXPECT_EQ(x->state, state) << native;
  }
  EXPECT_FALSE(ParseSqueueLine("garbage").has_value());
  ExternalJob running = ParseScontrolLine(
      "JobId=2002 JobName=tx-run JobState=RUNNING Reason=None ExitCode=0:0 NodeList=vm "
      "Nodes=vm CPU_IDs=0 Mem=4000 GRES=gpu:testgpu:1(IDX:1)");
  EXPECT_EQ(running.state, "running");
  EXPECT_EQ(running.gres, "gpu:testgpu:1(IDX:1)");
  EXPECT_EQ(running.devices, (std::vector<int>{1}));
}

// The Slurm backend's poll against stand-in squeue/scontrol scripts (a unit test of the call
// pattern; the real Slurm tests cover the commands themselves): GRES indices are read once per job
// newly seen running, one scontrol call each for a few, one full listing for many.
TEST(SlurmPoll, ReadsGresOncePerJobAndListsAllWhenManyStart) {
  const std::string dir = ::testing::TempDir() + "/slurm_poll_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto script = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir + "/" + name) << "#!/bin/sh\n" << body;
    std::filesystem::permissions(dir + "/" + name, std::filesystem::perms::owner_all);
  };
  // RUNNING jobs 1..N (N from the file `n`), each on index (id mod 4). Both list every
  // partition's jobs (-a: hidden ones too, which a server not run as root would not see).
  script("squeue",
         "echo \"squeue $*\" | cut -c1-19 >> " + dir + "/calls\nn=$(cat " + dir +
             "/n); i=1; while [ $i -le $n ]; do echo \"$i|RUNNING|vm|None|0|0:05|root|t-j-$i|\"; "
             "i=$((i+1)); done\n");
  script("scontrol", "echo \"$*\" >> " + dir + "/calls\nn=$(cat " + dir +
                         "/n); i=1\n"
                         "while [ $i -le $n ]; do if [ -z \"$6\" ] || [ \"$6\" = \"$i\" ]; then "
                         "echo \"JobId=$i JobName=t-j-$i JobState=RUNNING Reason=None NodeList=vm "
                         "GRES=gpu:t:1(IDX:$((i % 4)))\"; fi; "
                         "i=$((i+1)); done\n");
  auto calls = [&] {
    std::ifstream in(dir + "/calls");
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
    std::filesystem::remove(dir + "/calls");
    return out;
  };
  BackendOptions o;
  o.bin_dir = dir;
  o.command_nice = 0;
  auto b = MakeSlurmBackend(o);
  // Two jobs start: one scontrol call each, by id.
  std::ofstream(dir + "/n") << 2;
  auto r = b->Poll({"1", "2"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->at("2").devices, (std::vector<int>{2}));
  EXPECT_EQ(r->at("1").gres, "gpu:t:1(IDX:1)");
  EXPECT_EQ(calls(), (std::vector<std::string>{"squeue -a -h -t all", "-a show job -d -o 1",
                                               "-a show job -d -o 2"}));
  // Polled again: known already, no scontrol call; the indices are still reported.
  r = b->Poll({"1", "2"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at("2").devices, (std::vector<int>{2}));
  EXPECT_EQ(calls(), std::vector<std::string>{"squeue -a -h -t all"});
  // Twenty more start at once: one full listing.
  std::ofstream(dir + "/n") << 22;
  std::vector<std::string> ids;
  for (int i = 1; i <= 22; ++i) ids.push_back(std::to_string(i));
  r = b->Poll(ids);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 22u);
  EXPECT_EQ(r->at("22").devices, (std::vector<int>{2}));
  EXPECT_EQ(r->at("13").devices, (std::vector<int>{1}));
  EXPECT_EQ(calls(), (std::vector<std::string>{"squeue -a -h -t all", "-a show job -d -o"}));
  std::filesystem::remove_all(dir);
}

// The PBS backend's reading of `qstat -x -f -F json` against a stand-in qstat printing fields of
// other types than PBS documents. Found by fuzz/backend_poll_fuzz: json::value threw out of
// List/Poll (ending the server), and a fractional Exit_status out of int's range was undefined.
TEST(PbsPoll, FieldsOfTheWrongTypeReadAsAbsent) {
  const std::string dir = ::testing::TempDir() + "/pbs_poll_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/qstat")
      << "#!/bin/sh\ncat <<'EOF'\n"
      << R"({"Jobs": {"1.s": {"Job_Name": 5, "job_state": "F", "Exit_status": 1e300},
                                              "2.s": {"Job_Name": "t-2", "job_state": "F", "Exit_status": "0",
                                                      "exec_host": ["n1"], "comment": {}},
                                              "3.s": {"Job_Name": "t-3", "job_state": "F", "Exit_status": 271}}})"
      << "\nEOF\n";
  std::filesystem::permissions(dir + "/qstat", std::filesystem::perms::owner_all);
  BackendOptions o;
  o.bin_dir = dir;
  o.command_nice = 0;
  auto b = MakePbsBackend(o);
  auto r = b->Poll({"1.s", "2.s", "3.s"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->at("1.s").name, "");
  EXPECT_EQ(r->at("1.s").exit_code, -1);
  EXPECT_EQ(r->at("1.s").state, "failed");
  EXPECT_EQ(r->at("2.s").name, "t-2");
  EXPECT_EQ(r->at("2.s").exit_code, -1);
  EXPECT_EQ(r->at("2.s").node, "");
  EXPECT_EQ(r->at("3.s").state, "cancelled");
  std::filesystem::remove_all(dir);
}

// The script backends' Submit, Cancel and List against stand-in commands: the script goes to
// the submission command on stdin and the id it printed comes back (sbatch's up to ';'), the
// cancel command gets the id, and List keeps the jobs whose name has the prefix.
TEST(ScriptBackends, SubmitCancelAndListThroughTheirCommands) {
  const std::string dir = ::testing::TempDir() + "/script_backends_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto script = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir + "/" + name) << "#!/bin/sh\n" << body;
    std::filesystem::permissions(dir + "/" + name, std::filesystem::perms::owner_all);
  };
  auto read = [&](const std::string& name) {
    std::ifstream in(dir + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  script("qsub",
         "echo \"qsub:$*\" >> " + dir + "/calls; cat > " + dir + "/qsub.in; echo ' 12.s '\n");
  script("sbatch", "echo \"sbatch:$*\" >> " + dir + "/calls; cat > " + dir +
                       "/sbatch.in; echo '34;cluster'\n");
  script("qdel", "echo \"qdel:$*\" >> " + dir + "/calls\n");
  script("scancel", "echo \"scancel:$*\" >> " + dir + "/calls\n");
  script("qstat", R"(echo '{"Jobs": {"1.s": {"Job_Name": "tessera-c-1", "job_state": "R"},)"
                  R"( "2.s": {"Job_Name": "other", "job_state": "Q"}}}')"
                  "\n");
  script("squeue",
         "echo '5|PENDING|(null)|None|0|0:00|root|tessera-c-5|'; echo "
         "'6|RUNNING|vm|None|0|0:07|root|other|'\n");
  BackendOptions o;
  o.bin_dir = dir;
  o.command_nice = 0;
  auto pbs = MakePbsBackend(o);
  auto slurm = MakeSlurmBackend(o);
  auto id = pbs->Submit(Job("whole", 1), "#!/bin/sh\necho pbs\n");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "12.s");
  id = slurm->Submit(Job("whole", 1), "#!/bin/sh\necho slurm\n");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "34");
  EXPECT_EQ(read("qsub.in"), "#!/bin/sh\necho pbs\n");
  EXPECT_EQ(read("sbatch.in"), "#!/bin/sh\necho slurm\n");
  EXPECT_TRUE(pbs->Cancel("12.s").ok());
  EXPECT_TRUE(slurm->Cancel("34").ok());
  EXPECT_EQ(read("calls"), "qsub:\nsbatch:--parsable\nqdel:12.s\nscancel:34\n");
  auto listed = pbs->List("tessera-c-");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().external_id, "1.s");
  listed = slurm->List("tessera-c-");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().external_id, "5");
  EXPECT_EQ(listed->front().user, "root");
  // A name holding a newline and a line of its own making: job 5 said twice is believed neither
  // time (it turned a running job failed).
  script(
      "squeue",
      "echo '5|RUNNING|vm|None|0|0:07|root|tessera-c-5|'; echo "
      "'9|RUNNING|vm|None|0|0:07|mallory|x'; echo '5|FAILED|vm|None|256|0:08|root|tessera-c-5|'\n");
  listed = slurm->List("tessera-c-");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty()) << listed->front().state;
  // A listing command that fails fails List.
  std::filesystem::remove(dir + "/squeue");
  EXPECT_FALSE(slurm->List("tessera-c-").ok());
  std::filesystem::remove_all(dir);
}

TEST(Command, RunsWithInputAndReportsFailure) {
  CommandResult r = RunCommand({"sh", "-c", "cat; echo err >&2; exit 4"}, "hello\n", 5000);
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.out, "hello\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_NE(RunCommand({"/nonexistent/cmd"}, "", 5000).exit_code, 0);
  CommandResult slow = RunCommand({"sleep", "5"}, "", 100);
  EXPECT_EQ(slow.exit_code, -1);
}

TEST(Command, RunsAtTheNicenessAskedFor) {
  // Field 19 of /proc/self/stat is the niceness of the process reading it.
  const std::string read_nice = "cut -d' ' -f19 /proc/self/stat";
  CommandResult plain = RunCommand({"sh", "-c", read_nice}, "", 5000);
  CommandResult nicer = RunCommand({"sh", "-c", read_nice}, "", 5000, 7);
  ASSERT_EQ(plain.exit_code, 0);
  ASSERT_EQ(nicer.exit_code, 0);
  EXPECT_EQ(std::stoi(nicer.out), std::min(19, std::stoi(plain.out) + 7));
}

// Issue 30: which account a job is submitted as (JobRequest::run_as), and when that is refused.
TEST(SubmitAccount, ResolvedOrRefusedByTheServersAccount) {
  const passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  // No run_as, or the server's own account: submitted as before.
  auto none = ResolveSubmitAccount("slurm", "", 1000);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->other);
  auto own = ResolveSubmitAccount("slurm", "nobody", nobody->pw_uid);
  ASSERT_TRUE(own.ok());
  EXPECT_FALSE(own->other);
  auto root = ResolveSubmitAccount("slurm", "root", 0);
  ASSERT_TRUE(root.ok());
  EXPECT_FALSE(root->other);
  // A root server submits for another account: its uid, primary group, groups and a directory
  // it can start in (nobody's home, /nonexistent, is none: /tmp).
  auto as = ResolveSubmitAccount("slurm", "nobody", 0);
  ASSERT_TRUE(as.ok()) << as.status().message();
  EXPECT_TRUE(as->other);
  EXPECT_EQ(as->uid, nobody->pw_uid);
  EXPECT_EQ(as->gid, nobody->pw_gid);
  EXPECT_NE(std::find(as->groups.begin(), as->groups.end(), nobody->pw_gid), as->groups.end());
  EXPECT_EQ(as->home, nobody->pw_dir);
  EXPECT_EQ(as->work_dir, "/tmp");
  // A server that is not root refuses another account, naming it, rather than submit as itself.
  auto refused = ResolveSubmitAccount("pbs", "nobody", 1000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("'nobody'"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("not root"), std::string::npos)
      << refused.status().message();
  auto missing = ResolveSubmitAccount("slurm", "tessera-no-such-account", 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'tessera-no-such-account' does not exist"),
            std::string::npos)
      << missing.status().message();
}

TEST(SubmitAccount, TheWrapperGivesACleanEnvironmentAndSwitchesOnlyWhenAsked) {
  SubmitAccount a;
  EXPECT_TRUE(SubmitWrapper(a, true).empty());  // the server's own account: nothing in front
  a.other = true;
  a.name = "nobody";
  a.uid = 65534;
  a.gid = 65534;
  a.home = "/nonexistent";
  a.work_dir = "/tmp";
  ::setenv("SLURM_CONF", "/etc/slurm/test.conf", 1);
  ::setenv("SBATCH_ACCOUNT", "gpu-lab", 1);
  ::setenv("TESSERA_TEST_SECRET", "s3cret", 1);
  const std::vector<std::string> slurm = SubmitWrapper(a, false);
  ASSERT_GE(slurm.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(slurm.begin(), slurm.begin() + 4),
            (std::vector<std::string>{"env", "-i", "-C", "/tmp"}));
  EXPECT_EQ(std::vector<std::string>(slurm.end() - 3, slurm.end()),
            (std::vector<std::string>{"HOME=/nonexistent", "USER=nobody", "LOGNAME=nobody"}));
  EXPECT_NE(std::find(slurm.begin(), slurm.end(), "SLURM_CONF=/etc/slurm/test.conf"), slurm.end());
  EXPECT_NE(std::find(slurm.begin(), slurm.end(), "SBATCH_ACCOUNT=gpu-lab"), slurm.end());
  for (const std::string& w : slurm) EXPECT_EQ(w.find("s3cret"), std::string::npos) << w;
  const std::vector<std::string> pbs = SubmitWrapper(a, true);
  EXPECT_EQ(std::vector<std::string>(pbs.begin(), pbs.begin() + 5),
            (std::vector<std::string>{"setpriv", "--reuid=65534", "--regid=65534", "--init-groups",
                                      "env"}));
  ::unsetenv("TESSERA_TEST_SECRET");
  // The wrapper goes in front of the scheduler's command, which alone is looked up in bin_dir.
  BackendOptions o;
  std::vector<std::string> seen;
  o.runner = [&](const std::vector<std::string>& argv, const std::string&) {
    seen = argv;
    return CommandResult{0, "7\n", ""};
  };
  ASSERT_TRUE(
      RunSchedulerCommand(o, {"sbatch", "--parsable"}, "#!/bin/sh\n", {"env", "-C", "/tmp"}).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"env", "-C", "/tmp", "sbatch", "--parsable"}));
}

// The output file of another account's job: the account must reach it, and gets it (mode 0600);
// a link put in its place is not followed.
TEST(SubmitAccount, TheOutputFileIsMadeForTheAccount) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a file to another account needs root";
  auto as = ResolveSubmitAccount("slurm", "nobody", 0);
  ASSERT_TRUE(as.ok());
  const std::string dir = ::testing::TempDir() + "/out_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/output");
  ::chmod(dir.c_str(), 0700);
  Status blocked = PrepareOutputFor(*as, dir + "/output/j-1.log");
  ASSERT_FALSE(blocked.ok());
  EXPECT_NE(blocked.message().find("'nobody' cannot reach"), std::string::npos)
      << blocked.message();
  EXPECT_NE(blocked.message().find(dir + " (mode 0700"), std::string::npos) << blocked.message();
  ::chmod(dir.c_str(), 0711);
  ::chmod((dir + "/output").c_str(), 0755);
  ASSERT_TRUE(PrepareOutputFor(*as, dir + "/output/j-1.log").ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/output/j-1.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, as->uid);
  EXPECT_EQ(st.st_gid, as->gid);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // Again (a retried submission): the same file, still the account's.
  ASSERT_TRUE(PrepareOutputFor(*as, dir + "/output/j-1.log").ok());
  std::filesystem::create_symlink("/etc/hostname", dir + "/output/j-2.log");
  EXPECT_FALSE(PrepareOutputFor(*as, dir + "/output/j-2.log").ok());
  ASSERT_EQ(::stat("/etc/hostname", &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  // The server's own account: nothing is made.
  EXPECT_TRUE(PrepareOutputFor(SubmitAccount{}, dir + "/output/j-3.log").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/output/j-3.log"));
  std::filesystem::remove_all(dir);
}

// Rendered for another account, the job's script sets its HOME, USER and LOGNAME, as the agent
// does; an account that cannot be used fails rendering (so the job fails, naming it).
TEST(SubmitAccount, RenderedForTheAccount) {
  JobRequest j = Job("whole", 1);
  j.run_as = "tessera-no-such-account";
  for (const char* name : {"slurm", "pbs"}) {
    auto b = BuiltinRegistry().Make(name, BackendOptions{});
    ASSERT_TRUE(b.ok());
    auto refused = (*b)->Render(j);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_NE(refused.status().message().find("'tessera-no-such-account'"), std::string::npos);
  }
  if (geteuid() != 0) return;
  j.run_as = "nobody";
  auto b = BuiltinRegistry().Make("slurm", BackendOptions{});
  ASSERT_TRUE(b.ok());
  auto script = (*b)->Render(j);
  ASSERT_TRUE(script.ok()) << script.status().message();
  EXPECT_NE(script->find("export HOME='/nonexistent'\n"), std::string::npos) << *script;
  EXPECT_NE(script->find("export USER='nobody'\n"), std::string::npos) << *script;
  EXPECT_NE(script->find("export LOGNAME='nobody'\n"), std::string::npos) << *script;
  j.run_as = "root";  // the server's own account (root here): as before
  auto own = (*b)->Render(j);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->find("export HOME="), std::string::npos) << *own;
}

}  // namespace
}  // namespace tessera::backends
