// The PBS Pro / OpenPBS backend: qsub (script on stdin; prints "ID.SERVER"), qstat -x -f -F json
// (finished jobs too, JSON per PBS's reference guide), qdel.

#include <limits>
#include <nlohmann/json.hpp>

#include "backends/backend.h"

namespace tessera::backends {
namespace {

const char* kDefaultPbsTemplate = R"(#!/bin/bash
#PBS -N {{job_name}}
{{pbs_queue}}{{pbs_walltime}}#PBS -l select=1:ncpus={{cpus}}:ngpus={{gpus}}:mem={{memory_mib}}mb
#PBS -j oe
#PBS -o {{output}}
{{env}}
{{command}}
)";

class PbsBackend : public ScriptBackend {
 public:
  explicit PbsBackend(BackendOptions o)
      : ScriptBackend(std::move(o), "pbs", kDefaultPbsTemplate, "qdel") {}

  // A job of another account (run_as) is submitted by running qsub as that account (setpriv to
  // its uid, primary gid and groups, in its home, with its HOME/USER/LOGNAME): PBS takes the job's
  // owner from qsub's credentials and runs the job as it. Its output file is made for the account
  // first. qdel, as root (a PBS manager on the server host), still deletes it. No PBS server is
  // packaged by Debian: tests/backends/pbs_test.cc checks this against stand-in commands.
  SubmitCommand SubmitCommandFor(const SubmitAccount&) const override {
    return {{"qsub"}, /*switch_user=*/true, /*id_end=*/'\0'};
  }

  Result<std::map<std::string, ExternalJob>> Poll(const std::vector<std::string>& ids) override {
    auto all = Listing();
    if (!all.ok()) return all.status();
    std::map<std::string, ExternalJob> out;
    for (const auto& id : ids) {
      auto it = all->find(id);
      if (it != all->end()) out[id] = it->second;
    }
    return out;
  }

 private:
  Result<ScriptVars> OwnVars(const JobRequest& job) const override {
    if (job.form == "partition")
      return Status::InvalidArgument("the PBS backend maps no MIG instances");
    const std::string& queue = job.mapping.partition;
    return ScriptVars{
        {"pbs_queue", queue.empty() ? "" : "#PBS -q " + queue + "\n"},
        {"pbs_walltime",
         job.walltime_s > 0 ? "#PBS -l walltime=" + ClockText(job.walltime_s) + "\n" : ""}};
  }

  Result<std::map<std::string, ExternalJob>> Listing() override {
    auto listing = RunSchedulerCommand(opt_, {"qstat", "-x", "-f", "-F", "json"});
    if (!listing.ok()) return listing.status();
    nlohmann::json doc = nlohmann::json::parse(*listing, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) return Status::Internal("qstat printed no JSON");
    std::map<std::string, ExternalJob> out;
    const nlohmann::json jobs = doc.value("Jobs", nlohmann::json::object());
    if (!jobs.is_object()) return Status::Internal("qstat: 'Jobs' is not an object");
    for (const auto& [id, v] : jobs.items()) {
      if (!v.is_object()) continue;
      // A field of another type than PBS documents reads as absent (json::value would throw).
      auto text = [&job = v](const char* key) {
        auto it = job.find(key);
        return it != job.end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      ExternalJob j;
      j.external_id = id;
      j.name = text("Job_Name");
      j.native_state = text("job_state");
      j.reason = text("comment");
      const std::string& s = j.native_state;
      if (s == "Q" || s == "H" || s == "W" || s == "T" || s == "S" || s == "U") {
        j.state = ExternalStateName(ExternalState::kPending);
      } else if (s == "R" || s == "E" || s == "B" || s == "X") {
        j.state = ExternalStateName(ExternalState::kRunning);
      } else if (s == "F") {
        // Exit_status: the script's code; 256+N: killed by signal N; negative: PBS could not run
        // it.
        int code = -1;
        auto status = v.find("Exit_status");
        if (status != v.end() && status->is_number_integer() &&
            status->get<int64_t>() >= std::numeric_limits<int>::min() &&
            status->get<int64_t>() <= std::numeric_limits<int>::max()) {
          code = static_cast<int>(status->get<int64_t>());
        }
        j.exit_code = code;
        if (code > 256) j.signal = code - 256;
        j.state = ExternalStateName(code == 0                      ? ExternalState::kSucceeded
                                    : (code == 271 || code == 265) ? ExternalState::kCancelled
                                                                   : ExternalState::kFailed);
      } else {
        j.state = ExternalStateName(ExternalState::kPending);
      }
      // How long it has run: resources_used.walltime, "HH:MM:SS".
      if (auto used = v.find("resources_used"); used != v.end() && used->is_object()) {
        auto wall = used->find("walltime");
        if (wall != used->end() && wall->is_string())
          j.run_s = ClockSeconds(wall->get<std::string>());
      }
      // exec_host "node1/0*2"; exec_vnode "(node1:ngpus=1:ncpus=2)".
      std::string host = text("exec_host");
      j.node = host.substr(0, host.find('/'));
      j.gres = text("exec_vnode");
      out[id] = j;
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Backend> MakePbsBackend(const BackendOptions& options) {
  return std::make_unique<PbsBackend>(options);
}

}  // namespace tessera::backends
