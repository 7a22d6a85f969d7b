// The Slurm backend: sbatch --parsable (script on stdin); squeue with a narrow format to follow
// every job slurmctld still holds (state, node, reason, wait status) each poll; scontrol show job
// -d -o only for a job newly seen running, to read the GRES indices it got (Slurm reports them
// nowhere else, and only while it runs); sacct as a fallback for jobs slurmctld has forgotten
// (when accounting is on); scancel. Debian 12 ships Slurm 22.05, whose --json output needs extra
// plugins not always installed, so the text forms are parsed instead.

#include <set>
#include <sstream>

#include "backends/backend.h"

namespace tessera::backends {
namespace {

const char* kDefaultSlurmTemplate = R"(#!/bin/bash
#SBATCH --job-name={{job_name}}
{{sbatch_partition}}{{sbatch_time}}#SBATCH --cpus-per-task={{cpus}}
#SBATCH --mem={{memory_mib}}M
#SBATCH --output={{output}}
{{sbatch_gres}}{{env}}
{{command}}
)";

// Tessera's word for a Slurm job state.
ExternalState MapSlurmState(const std::string& s) {
  if (s == "PENDING" || s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "REQUEUE_FED" ||
      s == "RESV_DEL_HOLD")
    return ExternalState::kPending;
  if (s == "RUNNING" || s == "CONFIGURING" || s == "COMPLETING" || s == "SUSPENDED" ||
      s == "STOPPED" || s == "RESIZING" || s == "SIGNALING" || s == "STAGE_OUT") {
    return ExternalState::kRunning;
  }
  if (s == "COMPLETED") return ExternalState::kSucceeded;
  // REVOKED: a federation sibling removed, its job started on another cluster.
  if (s.rfind("CANCELLED", 0) == 0 || s == "REVOKED") return ExternalState::kCancelled;
  if (s == "FAILED" || s == "TIMEOUT" || s == "NODE_FAIL" || s == "OUT_OF_MEMORY" ||
      s == "BOOT_FAIL" || s == "DEADLINE" || s == "PREEMPTED") {
    return ExternalState::kFailed;
  }
  // SPECIAL_EXIT (requeued and held), or a state this release does not know: followed as
  // waiting (its name in the job's reason), not ended while it may still run. A job that leaves
  // Slurm's listing is handled as any that does.
  return ExternalState::kPending;
}

// "3:0" -> code 3, signal 0.
void ParseExit(const std::string& text, ExternalJob& j) {
  size_t colon = text.find(':');
  try {
    j.exit_code = std::stoi(text.substr(0, colon));
    if (colon != std::string::npos) j.signal = std::stoi(text.substr(colon + 1));
  } catch (...) {
  }
}

}  // namespace

// One line of `squeue -h -t all -O JobID:|,State:|,NodeList:|,Reason:|,exit_code:|,TimeUsed:|,
// UserName:|,Name:|`: the name comes last so that a '|' in it cannot shift the other fields;
// exit_code is the raw wait status (768 = exit 3); TimeUsed how long it has run
// ([D-][HH:]MM:SS); UserName the account it runs as (any account may name a job as Tessera does).
std::optional<ExternalJob> ParseSqueueLine(const std::string& line) {
  std::vector<std::string> f;
  size_t start = 0;
  for (int k = 0; k < 7; ++k) {
    size_t bar = line.find('|', start);
    if (bar == std::string::npos) return std::nullopt;
    f.push_back(line.substr(start, bar - start));
    start = bar + 1;
  }
  std::string name = line.substr(start);
  if (!name.empty() && name.back() == '|') name.pop_back();
  ExternalJob j;
  j.external_id = f[0];
  j.native_state = f[1];
  j.node = f[2] == "(null)" ? "" : f[2];
  if (f[3] != "None") j.reason = f[3];
  j.name = name;
  j.run_s = ClockSeconds(f[5]);
  j.user = f[6];
  const ExternalState state = MapSlurmState(j.native_state);
  j.state = ExternalStateName(state);
  if (j.external_id.empty() || j.native_state.empty()) return std::nullopt;
  if (EndStateOf(state)) {
    try {
      const int status = std::stoi(f[4]);
      j.exit_code = (status >> 8) & 0xff;
      j.signal = status & 0x7f;
    } catch (...) {
    }
  }
  return j;
}

// One line of `scontrol show job -d -o`.
ExternalJob ParseScontrolLine(const std::string& line) {
  ExternalJob j;
  std::stringstream ss(line);
  std::string tok;
  while (ss >> tok) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos) continue;
    std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    if (k == "JobId")
      j.external_id = v;
    else if (k == "JobName")
      j.name = v;
    else if (k == "JobState")
      j.native_state = v;
    else if (k == "Reason" && v != "None")
      j.reason = v;
    else if (k == "ExitCode")
      ParseExit(v, j);
    else if (k == "NodeList" && v != "(null)")
      j.node = v;
    else if (k == "GRES" && !v.empty()) {
      j.gres = v;
      size_t idx = v.find("(IDX:");
      if (idx != std::string::npos) {
        size_t end = v.find(')', idx);
        j.devices = ParseIndexList(
            v.substr(idx + 5, end == std::string::npos ? std::string::npos : end - idx - 5));
      }
    }
  }
  const ExternalState state = MapSlurmState(j.native_state);
  j.state = ExternalStateName(state);
  if (!EndStateOf(state)) j.exit_code.reset();
  return j;
}

namespace {

class SlurmBackend : public ScriptBackend {
 public:
  explicit SlurmBackend(BackendOptions o)
      : ScriptBackend(std::move(o), "slurm", kDefaultSlurmTemplate, "scancel") {}

  // A job of another account (run_as) is submitted by root for it: `sbatch --uid --gid` (root
  // only), so slurmctld records it as the account's job (squeue, scontrol, accounting) and slurmd
  // runs it with the account's uid and groups; it starts in the account's home (the work
  // directory sbatch takes from its current one, which a template may still set) and writes its
  // output into a file Tessera made for the account. scancel, as root, still cancels it.
  SubmitCommand SubmitCommandFor(const SubmitAccount& account) const override {
    SubmitCommand c{{"sbatch", "--parsable"}, /*switch_user=*/false, /*id_end=*/';'};
    if (account.other) {
      c.argv.push_back("--uid=" + std::to_string(account.uid));
      c.argv.push_back("--gid=" + std::to_string(account.gid));
    }
    return c;
  }

  Result<std::map<std::string, ExternalJob>> Poll(const std::vector<std::string>& ids) override {
    auto all = Listing();
    if (!all.ok()) return all.status();
    std::map<std::string, ExternalJob> out;
    std::vector<std::string> missing;
    std::set<std::string> polled(ids.begin(), ids.end());
    for (auto it = gres_.begin(); it != gres_.end();)
      it = polled.count(it->first) ? std::next(it) : gres_.erase(it);
    // Jobs newly seen running: where exactly (GRES indices), read once per job; one scontrol call
    // each, or one listing of every job when many started at once.
    std::vector<std::string> started;
    for (const std::string& id : ids) {
      auto it = all->find(id);
      if (it != all->end() && MapSlurmState(it->second.native_state) == ExternalState::kRunning &&
          !gres_.count(id))
        started.push_back(id);
    }
    if (started.size() > kScontrolEach) {
      auto listing = RunSchedulerCommand(opt_, {"scontrol", "-a", "show", "job", "-d", "-o"});
      std::set<std::string> wanted(started.begin(), started.end());
      std::stringstream ss(listing.ok() ? *listing : "");
      std::string line;
      while (std::getline(ss, line)) {
        if (line.rfind("JobId=", 0) != 0) continue;
        ExternalJob d = ParseScontrolLine(line);
        if (wanted.count(d.external_id)) gres_[d.external_id] = {d.gres, d.devices};
      }
    } else {
      for (const std::string& id : started) {
        auto line = RunSchedulerCommand(opt_, {"scontrol", "-a", "show", "job", "-d", "-o", id});
        if (line.ok() && line->rfind("JobId=", 0) == 0) {
          ExternalJob d = ParseScontrolLine(line->substr(0, line->find('\n')));
          gres_[id] = {d.gres, d.devices};
        }
      }
    }
    for (const std::string& id : ids) {
      auto it = all->find(id);
      if (it == all->end()) {
        missing.push_back(id);
        continue;
      }
      ExternalJob& j = it->second;
      if (auto g = gres_.find(id); g != gres_.end()) {
        j.gres = g->second.first;
        j.devices = g->second.second;
      }
      out[id] = j;
    }
    if (!missing.empty()) {
      // Jobs scontrol no longer holds (older than MinJobAge): ask accounting, where it is on.
      std::string list;
      for (const auto& id : missing) list += (list.empty() ? "" : ",") + id;
      auto acct = RunSchedulerCommand(opt_, {"sacct", "-n", "-P", "-X", "-j", list, "-o",
                                             "JobID,JobName,State,ExitCode,NodeList,ElapsedRaw"});
      if (acct.ok()) {
        std::stringstream ss(*acct);
        std::string line;
        while (std::getline(ss, line)) {
          std::vector<std::string> f;
          std::stringstream ls(line);
          std::string part;
          while (std::getline(ls, part, '|')) f.push_back(part);
          if (f.size() < 5) continue;
          ExternalJob j;
          j.external_id = f[0];
          j.name = f[1];
          j.native_state = f[2].substr(0, f[2].find(' '));
          j.state = ExternalStateName(MapSlurmState(j.native_state));
          ParseExit(f[3], j);
          j.node = f[4] == "None assigned" ? "" : f[4];
          if (f.size() > 5 && !f[5].empty() && f[5].size() <= 12 &&
              f[5].find_first_not_of("0123456789") == std::string::npos)
            j.run_s = std::stoll(f[5]);  // ElapsedRaw: seconds
          out[j.external_id] = j;
        }
      }
    }
    return out;
  }

 private:
  Result<ScriptVars> OwnVars(const JobRequest& job) const override {
    auto gres = GresFor(job);
    if (!gres.ok()) return gres.status();
    const std::string& partition = job.mapping.partition;
    return ScriptVars{
        {"sbatch_partition", partition.empty() ? "" : "#SBATCH --partition=" + partition + "\n"},
        {"sbatch_gres", gres->empty() ? "" : "#SBATCH --gres=" + *gres + "\n"},
        {"sbatch_time",
         job.walltime_s > 0 ? "#SBATCH --time=" + ClockText(job.walltime_s) + "\n" : ""}};
  }

  // Every job slurmctld still holds, by id.
  Result<std::map<std::string, ExternalJob>> Listing() override {
    auto listing =
        RunSchedulerCommand(opt_, {"squeue", "-a", "-h", "-t", "all", "-O",
                                   "JobID:|,State:|,NodeList:|,Reason:|,exit_code:|,TimeUsed:|,"
                                   "UserName:|,Name:|"});
    if (!listing.ok()) return listing.status();
    std::map<std::string, ExternalJob> out;
    std::set<std::string> twice;
    std::stringstream ss(*listing);
    std::string line;
    while (std::getline(ss, line)) {
      auto j = ParseSqueueLine(line);
      if (!j) continue;
      // A job's name may hold a newline and then a line of its own making: an id said twice is
      // believed neither time.
      if (!out.emplace(j->external_id, *j).second) twice.insert(j->external_id);
    }
    for (const std::string& id : twice) out.erase(id);
    return out;
  }

  static constexpr size_t kScontrolEach = 8;  // more jobs started at once: one full listing
  // GRES text and indices of the polled jobs seen running (read once per job).
  std::map<std::string, std::pair<std::string, std::vector<int>>> gres_;
};

}  // namespace

std::unique_ptr<Backend> MakeSlurmBackend(const BackendOptions& options) {
  return std::make_unique<SlurmBackend>(options);
}

}  // namespace tessera::backends
