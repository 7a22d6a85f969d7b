// Backends: where the engine sends a job once it is admitted against its group's quota.
//
// A backend hands an admitted job to an external batch scheduler (Slurm, PBS) and reports what
// became of it. The engine keeps the queues, quotas and job records; the backend only renders the
// queue's batch-script template, submits it, cancels, and polls. Jobs carry a scheduler-side name
// ("tessera-<cluster>-<job id>") so that after a restart of either side the engine can find its
// own jobs again (List) and never submit one twice.
//
// The agent backend ("local": node agents through heartbeats) is built into the engine itself;
// its name is reserved in the registry so config validation sees one list of names.
//
// Thread-safety: a Backend object may be used from one thread at a time (the engine serializes
// its backend work); the Registry is safe to read from any thread once registration is done.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "model/job_state.h"

namespace tessera::backends {

// A Kubernetes queue's settings (backend: kubernetes; see backends/kubernetes/manifest.h).
struct KubeMapping {
  std::string ns;  // namespace ("" : the connection's, else "default")
  std::map<std::string, std::string> node_selector;  // of the queue's pool, set at admission
  std::string tolerations_json = "[]";  // a JSON array of tolerations, set at admission
  std::string priority_class;
  std::string image;              // the container image ("" : the template's)
  std::string vendor = "nvidia";  // nvidia | amd: whole cards as <vendor>.com/gpu
  std::string mig_strategy =
      "mixed";  // mixed: nvidia.com/mig-<profile>; single: nvidia.com/gpu + product selector
  std::string mig_product;  // single strategy: nvidia.com/gpu.product, {profile} filled in
  std::string share_mode =
      "hami";  // hami: nvidia.com/gpumem; timeslice: the cap library's environment; mps (dra only)
  std::string amd_partition;  // AMD partitions: e.g. cpx_nps4 -> amd.com/cpx_nps4
  std::map<std::string, std::string>
      resources;  // overrides: whole, mig, share, gpumem, gpucores, amd_partition
  // How devices are asked for: "extended" (the device plugins' resource names above) or "dra"
  // (a resource.k8s.io/v1 ResourceClaim per job, by device class; shares set MPS or time-slicing
  // in the claim's opaque configuration).
  std::string devices = "extended";
  std::map<std::string, std::string>
      device_classes;  // dra overrides: whole, mig, share, amd_partition
  int64_t placement_timeout_ms =
      300000;  // admitted pods unscheduled this long: suspended, requeued
};

// How a queue maps Tessera's allocation forms onto the scheduler's resources; from the queue's
// config. Placeholders in the GRES patterns: {gpus}, {type}, {shards}.
struct QueueMapping {
  std::string partition;       // Slurm partition / PBS queue; empty: the scheduler's default
  std::string template_path;   // batch-script template file; empty: the built-in default
  std::string gpu_type;        // e.g. "a100": whole cards as gpu:a100:N
  std::string gres_whole;      // default "gpu:{gpus}" or "gpu:{type}:{gpus}"
  std::string gres_share;      // default "shard:{shards}"
  std::string gres_partition;  // MIG instance, e.g. "gpu:1g.10gb:1"; empty: not offered
  int64_t shard_mib = 1024;    // GPU memory one shard stands for
  std::string cap_library;     // LD_PRELOAD'ed for shares when set (the memory-cap library)
  KubeMapping kube;            // backend: kubernetes
};

// One admitted job, as a backend needs it.
struct JobRequest {
  std::string id;    // Tessera's job id
  std::string name;  // scheduler-side job name
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string form;  // whole / share / partition, or "" for no GPU
  int gpus = 0;
  int64_t gpu_memory_mib = 0;  // a share's cap
  int64_t gpu_milli = 1000;    // a share's compute, in thousandths of a card (HAMi's gpucores)
  std::string
      mig_profile;  // a MIG instance's profile chosen from the queue's mig_model, e.g. "1g.10gb"
  int64_t cpu_milli = 1000;
  int64_t memory_mib = 1024;
  std::string output_path;  // where the job's stdout+stderr go
  // The Unix account the job is submitted as, so that the scheduler runs it as, and accounts it
  // to, that account (the job spec's run_as); "" : the account the server runs under.
  std::string run_as;
  // Its declared walltime, in seconds (0: none): the scheduler is asked to stop it then (Slurm's
  // --time, PBS's walltime, a Kubernetes Job's activeDeadlineSeconds), as backfill counts on it.
  int64_t walltime_s = 0;
  QueueMapping mapping;
};

// What a scheduler says of a job, in Tessera's words (ExternalJob::state; the scheduler's own word
// is its native_state). Not a served job state: a job the scheduler has "pending" is "starting"
// in Tessera. The three ends are the served job states of the same names (model/job_state.h).
enum class ExternalState { kPending, kRunning, kSuspended, kSucceeded, kFailed, kCancelled };
// "pending", "running", "suspended", "succeeded", "failed", "cancelled".
const char* ExternalStateName(ExternalState s);
// The name back; InvalidArgument naming the text for any other.
Result<ExternalState> ParseExternalState(std::string_view name);
// The served state a Tessera job ends in when its scheduler's job ended so (succeeded, failed,
// cancelled); nullopt while it has not ended.
std::optional<JobState> EndStateOf(ExternalState s);

// What the scheduler says about one job.
struct ExternalJob {
  std::string external_id;
  std::string name;
  std::string native_state;  // the scheduler's word: PENDING, RUNNING, COMPLETED, R, F ...
  std::string state;         // ExternalStateName(): pending, running, suspended, succeeded, ...
  std::string reason;        // the scheduler's reason, when it gives one
  std::optional<int> exit_code;
  int signal = 0;
  std::string node;          // where it runs (first node)
  std::string user;          // the account it runs as, where the scheduler says ("": unknown)
  std::vector<int> devices;  // GPU indices on that node, when reported
  std::string gres;          // the scheduler's allocation text, e.g. "gpu:testgpu(IDX:0)"
  bool suspended =
      false;  // Kubernetes: the Job is suspended (state "suspended" once its pods are gone)
  bool unschedulable = false;  // Kubernetes: its pod cannot be scheduled (reason says why)
  // How long it has run, or ran, as its scheduler says (seconds; -1: it does not say). A job
  // that ends between two polls is never seen running: its start is this long before its end.
  int64_t run_s = -1;
};

// The GPUs a scheduler has for Tessera's jobs, in thousandths of a card (negative: unknown,
// not bounded), with what it is made of for people.
struct Capacity {
  int64_t gpu_milli = -1;
  std::string detail;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;
  // The batch script for `job` (the template with its placeholders filled).
  virtual Result<std::string> Render(const JobRequest& job) const = 0;
  // Submits `script`; returns the scheduler's job id.
  virtual Result<std::string> Submit(const JobRequest& job, const std::string& script) = 0;
  virtual Status Cancel(const std::string& external_id) = 0;
  // The state of each of `ids` the scheduler still knows; ids it does not know are absent.
  virtual Result<std::map<std::string, ExternalJob>> Poll(const std::vector<std::string>& ids) = 0;
  // Every job the scheduler knows whose name starts with `prefix` (reconciliation).
  virtual Result<std::vector<ExternalJob>> List(const std::string& prefix) = 0;

  // Schedulers whose jobs can be suspended and resumed keeping their identity (Kubernetes:
  // spec.suspend). The engine then suspends a preempted or reclaimed job instead of cancelling
  // it, and resumes it when the cycle admits it again (with the queue's scheduling directives).
  virtual bool Suspends() const { return false; }
  virtual Status Suspend(const std::string& external_id) {
    return Status::FailedPrecondition(Name() + " cannot suspend job " + external_id);
  }
  virtual Status Resume(const std::string& external_id, const JobRequest& job) {
    (void)job;
    return Status::FailedPrecondition(Name() + " cannot resume job " + external_id);
  }
  // What the scheduler has for Tessera's jobs (Kubernetes: allocatable GPUs of ready nodes, less
  // what pods Tessera does not manage request); unknown by default.
  virtual Result<Capacity> GpuCapacity() { return Capacity{}; }
  // Called once a job's end is recorded: a scheduler that keeps ended jobs as objects (Kubernetes)
  // deletes it here, so no labelled object is left behind.
  virtual Status Forget(const std::string& external_id) {
    (void)external_id;
    return Status::Ok();
  }
};

struct CommandResult;

// A Kubernetes cluster and how to reach its API: kubeconfig files (':'-separated; "" :
// $KUBECONFIG, else ~/.kube/config) and context ("" : the current-context), or in_cluster (the
// pod's service account); ns, the default namespace ("" : the context's, else "default").
struct KubeCluster {
  std::string kubeconfig;
  std::string context;
  bool in_cluster = false;
  std::string ns;
};

struct BackendOptions {
  std::string bin_dir;  // where the scheduler's commands live; empty: found on PATH
  int64_t command_timeout_ms = 30000;
  // The scheduler's commands run this much nicer than the engine (0-19), so a burst of API
  // submissions is acknowledged first and handed to the scheduler as CPU allows.
  int command_nice = 10;
  // When set, runs the scheduler's commands instead of starting processes (argv[0] the bare
  // name): for the fuzz targets, which feed the backends' parsers in-process.
  std::function<CommandResult(const std::vector<std::string>& argv, const std::string& input)>
      runner;
  // Kubernetes: the cluster's name (the tessera.io/cluster label) and how to reach its API.
  std::string cluster = "tessera";
  KubeCluster kube;
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendOptions&)>;

// Backends by name. Registration is explicit: RegisterBuiltins() adds "slurm", "pbs" and
// "kubernetes".
class Registry {
 public:
  void Register(const std::string& name, BackendFactory factory);
  bool Has(const std::string& name) const { return factories_.count(name) > 0; }
  std::vector<std::string> Names() const;
  Result<std::unique_ptr<Backend>> Make(const std::string& name,
                                        const BackendOptions& options) const;

 private:
  std::map<std::string, BackendFactory> factories_;
};

// The process-wide registry with the built-in backends registered ("slurm", "pbs").
const Registry& BuiltinRegistry();
void RegisterBuiltins(Registry& r);
std::unique_ptr<Backend> MakeSlurmBackend(const BackendOptions& options);
std::unique_ptr<Backend> MakePbsBackend(const BackendOptions& options);
std::unique_ptr<Backend> MakeKubernetesBackend(const BackendOptions& options);

// --- helpers shared by the backends (exposed for tests) ---

// Output of a finished command.
struct CommandResult {
  int exit_code = -1;  // -1: could not run or timed out
  std::string out;
  std::string err;
};
// Runs argv (argv[0] looked up on PATH unless it has a '/'), feeding `input` on stdin, at
// `nice` (added to the caller's niceness); kills it after timeout_ms. Never throws. Thread-safe.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input,
                         int64_t timeout_ms, int nice = 0);

// Runs one of the scheduler's commands as `o` says (found in bin_dir, within the timeout, at its
// niceness), argv[0] being the bare name, after the commands of `wrapper` when given (e.g.
// SubmitWrapper's). Its stdout, or FailedPrecondition "NAME: what it said" (stderr, else stdout,
// trimmed).
Result<std::string> RunSchedulerCommand(const BackendOptions& o, std::vector<std::string> argv,
                                        const std::string& input = "",
                                        const std::vector<std::string>& wrapper = {});

// The Unix account a job is submitted as (JobRequest::run_as), read from this host's accounts.
struct SubmitAccount {
  bool other = false;  // false: the server's own account (no run_as, or the server's): as before
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;              // its primary group
  std::vector<gid_t> groups;  // its groups, the primary included
  std::string home;
  std::string work_dir;  // where its job starts: its home, or /tmp when that is no directory
};
// Resolves `run_as` for a server running as `server_uid` (geteuid()). An account this host lacks,
// or another account than the server's while the server is not root, is an error naming the
// account: such a job is refused rather than run under the server's account. `backend` names the
// scheduler in the message.
Result<SubmitAccount> ResolveSubmitAccount(const std::string& backend, const std::string& run_as,
                                           uid_t server_uid);
// `job` as it is rendered for its account: HOME, USER and LOGNAME are the account's (as the agent
// sets them) when it is another than the server's. An account that cannot be used is an error,
// which fails the job (a refused account is not retried).
Result<JobRequest> ForSubmitAccount(const std::string& backend, const JobRequest& job);
// Makes the job's output file usable by another `account`: every directory above it must be
// searchable by the account (an error names the first that is not), and the file is created
// when missing (never through a symbolic link) and given to the account, mode 0600. The
// directory stays the server's, so the account cannot swap the file for a link to something the
// server would then read back as the job's output.
Status PrepareOutputFor(const SubmitAccount& account, const std::string& path);
// The commands a scheduler's submission command runs behind for another `account`: a fresh
// environment (PATH, LANG, LC_*, TZ and the scheduler's own SLURM_* / SBATCH_* / PBS_* settings
// of the server's environment, then HOME, USER and LOGNAME of the account) and the account's
// work_dir as the current directory (`env -i -C`); with `switch_user`, first `setpriv` to the
// account's uid, primary gid and groups. Empty for the server's own account.
std::vector<std::string> SubmitWrapper(const SubmitAccount& account, bool switch_user);
// `s` without leading and trailing spaces and line breaks.
std::string TrimSpace(std::string s);
// The job id a submission command (`command`, e.g. "qsub") printed: its `output` trimmed, and
// up to `end` when given (sbatch --parsable prints "id;cluster" on multi-cluster setups); an
// error when there is none, or when the command failed.
Result<std::string> PrintedJobId(const Result<std::string>& output, const std::string& command,
                                 char end = '\0');

// The queue's template file (job.mapping.template_path), or `default_text` when it names none.
Result<std::string> TemplateText(const JobRequest& job, const char* default_text);
// Replaces each {{key}} in `text` by vars[key]; an unknown key is an error naming it.
Result<std::string> RenderTemplate(const std::string& text,
                                   const std::map<std::string, std::string>& vars);
// A batch-script template of `backend` ("slurm": #SBATCH, "pbs": #PBS; any other: no check)
// whose directives all come before its first command, and whose {{env}} and {{command}} (which
// expand to commands) are not in a comment: sbatch and qsub read no directive after the first
// command. An error names the line.
Status CheckScriptTemplate(const std::string& text, const std::string& backend);
// Single-quotes `s` for a POSIX shell.
std::string ShellQuote(const std::string& s);
// Replaces {gpus}/{type}/{shards}/{profile} in a GRES pattern.
std::string ExpandGres(std::string pattern, int gpus, const std::string& type, int64_t shards,
                       const std::string& profile = "");
// "0-2,5" -> {0,1,2,5}; bad text -> empty.
std::vector<int> ParseIndexList(const std::string& text);
// A duration as schedulers print one, in seconds: "MM:SS", "HH:MM:SS" (Slurm's TimeUsed, PBS's
// walltime), "D-HH", "D-HH:MM", "D-HH:MM:SS" (Slurm, with days). -1 for anything else
// ("INVALID", "UNLIMITED", a bare number, a minute or second past 59).
int64_t ClockSeconds(const std::string& text);
// Seconds as "HH:MM:SS", the hours past 24 as they come (Slurm's --time, PBS's walltime).
std::string ClockText(int64_t seconds);

// Slurm's listings: one line of `squeue -h -t all -O JobID:|,State:|,NodeList:|,Reason:|,
// exit_code:|,TimeUsed:|,Name:|` (nullopt when malformed), and one line of `scontrol show job -d
// -o`.
std::optional<ExternalJob> ParseSqueueLine(const std::string& line);
ExternalJob ParseScontrolLine(const std::string& line);

// The GRES string a job asks for under `mapping` (empty: no GPU), or an error.
Result<std::string> GresFor(const JobRequest& job);
// The variables every template can use (job_name, partition, cpus, memory_mib, output, env,
// command, gres, gpus, gpu_memory_mib, shards, job_id, walltime: HH:MM:SS or empty); an environment
// variable whose name is not a shell name is refused (it would be written into the script
// unquoted).
Result<std::map<std::string, std::string>> CommonVars(const JobRequest& job);

// A batch scheduler driven by commands on a rendered script (Slurm, PBS). Render: the job as
// rendered for its account (ForSubmitAccount), the queue's template (TemplateText, else the
// scheduler's default) filled with CommonVars and what OwnVars adds (its error fails the render,
// before CommonVars is read). Submit: the job's run_as account resolved (ResolveSubmitAccount),
// its output file made for it (PrepareOutputFor), then the scheduler's SubmitCommandFor it run
// with the script on stdin behind SubmitWrapper, and the id it printed (PrintedJobId). Cancel
// runs `cancel_command ID`; List filters the full Listing by name.
class ScriptBackend : public Backend {
 public:
  ScriptBackend(BackendOptions options, std::string name, const char* default_template,
                std::string cancel_command);
  std::string Name() const override { return name_; }
  Result<std::string> Render(const JobRequest& request) const override;
  Result<std::string> Submit(const JobRequest& job, const std::string& script) override;
  Status Cancel(const std::string& external_id) override;
  Result<std::vector<ExternalJob>> List(const std::string& prefix) override;

 protected:
  using ScriptVars = std::map<std::string, std::string>;
  // The scheduler's own template variables for `job` (as rendered for its account).
  virtual Result<ScriptVars> OwnVars(const JobRequest& job) const = 0;
  // Every job the scheduler holds, by id.
  virtual Result<std::map<std::string, ExternalJob>> Listing() = 0;
  struct SubmitCommand {
    std::vector<std::string> argv;  // argv[0] names the command in errors
    bool switch_user = false;       // SubmitWrapper's: the command runs as another account
    char id_end = '\0';             // PrintedJobId's
  };
  // How a job of `account` is submitted.
  virtual SubmitCommand SubmitCommandFor(const SubmitAccount& account) const = 0;

  const BackendOptions opt_;

 private:
  const std::string name_;
  const char* const default_template_;
  const std::string cancel_command_;
};

}  // namespace tessera::backends
