// The Slurm backend: sbatch --parsable (script on stdin), scontrol show job -d -o (one line per
// job, with the node and the GRES indices it got), sacct as a fallback for jobs scontrol has
// forgotten (when accounting is on), scancel. Debian 12 ships Slurm 22.05, whose --json output
// needs extra plugins not always installed, so the one-line text form is parsed instead.
#include <fstream>
#include <sstream>

#include "backends/backend.h"

namespace tessera::backends {
namespace {

const char* kDefaultSlurmTemplate = R"(#!/bin/bash
#SBATCH --job-name={{job_name}}
{{sbatch_partition}}#SBATCH --cpus-per-task={{cpus}}
#SBATCH --mem={{memory_mib}}M
#SBATCH --output={{output}}
{{sbatch_gres}}{{env}}
{{command}}
)";

// Tessera's state for a Slurm job state.
std::string MapSlurmState(const std::string& s) {
  if (s == "PENDING" || s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "REQUEUE_FED" || s == "RESV_DEL_HOLD") return "pending";
  if (s == "RUNNING" || s == "CONFIGURING" || s == "COMPLETING" || s == "SUSPENDED" || s == "STOPPED" ||
      s == "RESIZING" || s == "SIGNALING" || s == "STAGE_OUT") {
    return "running";
  }
  if (s == "COMPLETED") return "succeeded";
  if (s.rfind("CANCELLED", 0) == 0) return "cancelled";
  return "failed";  // FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, PREEMPTED
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

// One line of `scontrol show job -d -o`.
ExternalJob ParseScontrolLine(const std::string& line) {
  ExternalJob j;
  std::stringstream ss(line);
  std::string tok;
  while (ss >> tok) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos) continue;
    std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    if (k == "JobId") j.external_id = v;
    else if (k == "JobName") j.name = v;
    else if (k == "JobState") j.native_state = v;
    else if (k == "Reason" && v != "None") j.reason = v;
    else if (k == "ExitCode") ParseExit(v, j);
    else if (k == "NodeList" && v != "(null)") j.node = v;
    else if (k == "GRES" && !v.empty()) {
      j.gres = v;
      size_t idx = v.find("(IDX:");
      if (idx != std::string::npos) {
        size_t end = v.find(')', idx);
        j.devices = ParseIndexList(v.substr(idx + 5, end == std::string::npos ? std::string::npos : end - idx - 5));
      }
    }
  }
  j.state = MapSlurmState(j.native_state);
  if (j.state == "pending" || j.state == "running") j.exit_code.reset();
  return j;
}

class SlurmBackend : public Backend {
 public:
  explicit SlurmBackend(BackendOptions o) : opt_(std::move(o)) {}
  std::string Name() const override { return "slurm"; }

  Result<std::string> Render(const JobRequest& job) const override {
    std::string text = kDefaultSlurmTemplate;
    if (!job.mapping.template_path.empty()) {
      std::ifstream in(job.mapping.template_path);
      if (!in) return Status::NotFound("cannot read template '" + job.mapping.template_path + "'");
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    auto gres = GresFor(job);
    if (!gres.ok()) return gres.status();
    auto vars = CommonVars(job);
    vars["sbatch_partition"] = job.mapping.partition.empty() ? "" : "#SBATCH --partition=" + job.mapping.partition + "\n";
    vars["sbatch_gres"] = gres->empty() ? "" : "#SBATCH --gres=" + *gres + "\n";
    return RenderTemplate(text, vars);
  }

  Result<std::string> Submit(const JobRequest&, const std::string& script) override {
    CommandResult r = RunCommand({Bin("sbatch"), "--parsable"}, script, opt_.command_timeout_ms, opt_.command_nice);
    if (r.exit_code != 0) return Status::FailedPrecondition("sbatch: " + Trim(r.err.empty() ? r.out : r.err));
    std::string id = Trim(r.out);
    size_t semi = id.find(';');  // "id;cluster" on multi-cluster setups
    if (semi != std::string::npos) id = id.substr(0, semi);
    if (id.empty()) return Status::Internal("sbatch printed no job id");
    return id;
  }

  Status Cancel(const std::string& external_id) override {
    CommandResult r = RunCommand({Bin("scancel"), external_id}, "", opt_.command_timeout_ms, opt_.command_nice);
    if (r.exit_code != 0) return Status::FailedPrecondition("scancel: " + Trim(r.err));
    return Status::Ok();
  }

  Result<std::map<std::string, ExternalJob>> Poll(const std::vector<std::string>& ids) override {
    auto all = All();
    if (!all.ok()) return all.status();
    std::map<std::string, ExternalJob> out;
    std::vector<std::string> missing;
    for (const std::string& id : ids) {
      auto it = all->find(id);
      if (it != all->end()) {
        out[id] = it->second;
      } else {
        missing.push_back(id);
      }
    }
    if (!missing.empty()) {
      // Jobs scontrol no longer holds (older than MinJobAge): ask accounting, where it is on.
      std::string list;
      for (const auto& id : missing) list += (list.empty() ? "" : ",") + id;
      CommandResult r = RunCommand({Bin("sacct"), "-n", "-P", "-X", "-j", list, "-o", "JobID,JobName,State,ExitCode,NodeList"},
                                   "", opt_.command_timeout_ms, opt_.command_nice);
      if (r.exit_code == 0) {
        std::stringstream ss(r.out);
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
          j.state = MapSlurmState(j.native_state);
          ParseExit(f[3], j);
          j.node = f[4] == "None assigned" ? "" : f[4];
          out[j.external_id] = j;
        }
      }
    }
    return out;
  }

  Result<std::vector<ExternalJob>> List(const std::string& prefix) override {
    auto all = All();
    if (!all.ok()) return all.status();
    return JobsNamed(*all, prefix);
  }

 private:
  std::string Bin(const std::string& name) const { return opt_.bin_dir.empty() ? name : opt_.bin_dir + "/" + name; }
  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    while (!s.empty() && (s.front() == ' ' || s.front() == '\n')) s.erase(s.begin());
    return s;
  }
  Result<std::map<std::string, ExternalJob>> All() {
    CommandResult r = RunCommand({Bin("scontrol"), "show", "job", "-d", "-o"}, "", opt_.command_timeout_ms, opt_.command_nice);
    if (r.exit_code != 0) return Status::FailedPrecondition("scontrol: " + Trim(r.err.empty() ? r.out : r.err));
    std::map<std::string, ExternalJob> out;
    std::stringstream ss(r.out);
    std::string line;
    while (std::getline(ss, line)) {
      if (line.rfind("JobId=", 0) != 0) continue;
      ExternalJob j = ParseScontrolLine(line);
      if (!j.external_id.empty()) out[j.external_id] = j;
    }
    return out;
  }

  BackendOptions opt_;
};

}  // namespace

std::unique_ptr<Backend> MakeSlurmBackend(const BackendOptions& options) { return std::make_unique<SlurmBackend>(options); }

}  // namespace tessera::backends
