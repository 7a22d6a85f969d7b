// The node agent under control-plane faults (issue 33; docs/agent-protocol.md, "Faults"): exits
// kept on disk until acked, the leader epoch that fences a deposed leader's replies, and the
// partition self-stop.
#include <algorithm>
#include <chrono>
#include <string>

#include "agent/agent_internal.h"

namespace tessera::agent::internal {

void Agent::KeepExit(const FinishedReport& f) {
  finished_[f.job] = f;
  const int64_t now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  auto up = uploaded_.find(f.job);
  Status saved = state_.Save(ExitRecord{f, now_ms, up == uploaded_.end() ? 0 : up->second});
  if (!saved.ok()) {
    Warn("job " + f.job + ": its exit is not kept on disk (" + saved.message() +
             "): an agent restarted before it is acked cannot report it",
         {{"job", f.job}});
  }
}

void Agent::TakeStoppedByOff(std::vector<FinishedReport>* finished) const {
  if (stopped_by_taken_) return;
  for (FinishedReport& f : *finished) f.stopped_by.clear();
}

bool Agent::StoppedByRefused(const std::string& body) {
  if (!stopped_by_taken_ || body.find("unknown field 'stopped_by'") == std::string::npos)
    return false;
  Warn(
      "this control plane takes no 'stopped_by' in exits (a server before the field): jobs "
      "stopped for a partition are reported without it, and it may record them failed");
  stopped_by_taken_ = false;
  return true;
}

void Agent::LoadState() {
  std::string error;
  epoch_ = state_.LoadEpoch(&error);
  if (!error.empty()) Warn(error + ": starting without a known leader epoch");
  std::vector<std::string> corrupt;
  std::vector<ExitRecord> records = state_.Load(&corrupt);
  for (const std::string& path : corrupt) {
    Warn("exit record " + path + " cannot be read: skipped (the job's exit is not reported)");
  }
  if (records.empty()) return;
  std::string ids;
  for (const ExitRecord& r : records) {
    finished_[r.report.job] = r.report;
    uploaded_[r.report.job] = r.uploaded;
    ids += (ids.empty() ? "" : ", ") + r.report.job;
  }
  Info("reporting " + std::to_string(records.size()) +
       " job exit(s) kept on disk by an earlier run of this agent and not acknowledged: " + ids);
}

bool Agent::Stale(int64_t epoch) {
  if (epoch < 0) return false;  // a server without fencing: applied as before
  if (epoch < epoch_) {
    if (stale_warned_ != std::pair<int64_t, int64_t>{epoch, epoch_}) {
      stale_warned_ = {epoch, epoch_};
      Warn("ignoring replies of leader epoch " + std::to_string(epoch) +
               ": this agent has heard from epoch " + std::to_string(epoch_) +
               " (a deposed leader); nothing they order is done",
           {{"epoch", epoch}, {"known_epoch", epoch_}});
    }
    return true;
  }
  if (epoch > epoch_) {
    // A new leader: what the old one held of each job's output is asked again (ConfirmOutput).
    if (epoch_ >= 0) {
      for (const auto& [id, held] : uploaded_) {
        if (held > 0) recheck_.insert(id);
      }
    }
    epoch_ = epoch;
    Status saved = state_.SaveEpoch(epoch);
    if (!saved.ok())
      Warn("leader epoch " + std::to_string(epoch) + " not kept on disk: " + saved.message());
  }
  return false;
}

int64_t Agent::OutputHeld(const std::string& body) {
  // The control plane's 409 for an upload past its copy's end: "... continues at byte K, not N".
  const std::string mark = "continues at byte ";
  size_t at = body.find(mark);
  if (at == std::string::npos) return -1;
  at += mark.size();
  int64_t held = -1;
  for (; at < body.size() && body[at] >= '0' && body[at] <= '9'; ++at) {
    if (held > (int64_t{1} << 50)) return -1;  // no output is that large
    held = std::max<int64_t>(held, 0) * 10 + (body[at] - '0');
  }
  return held;
}

bool Agent::Rewind(const std::string& id, const std::string& body, int64_t* offset) {
  const int64_t held = OutputHeld(body);
  recheck_.erase(id);
  if (held < 0 || held >= *offset) return false;
  Info("the control plane holds " + std::to_string(held) + " of the " + std::to_string(*offset) +
           " output bytes of job " + id + " it was sent (a new leader): sending the rest again",
       {{"job", id}});
  *offset = held;
  return true;
}

bool Agent::ConfirmOutput(const std::string& id, int64_t* offset) {
  if (recheck_.count(id) == 0) return true;
  auto res = client_->Put(OutputPath(id, *offset), "", 0, "application/octet-stream");
  if (!res)
    return Failover(),
           Failed("output check for job " + id + ": " + httplib::to_string(res.error()));
  if (res->status == 409) {
    Rewind(id, res->body, offset);
  } else if (res->status / 100 != 5) {
    recheck_.erase(id);  // 2xx: it holds them all; another 4xx: the upload itself says so
  }
  return true;
}

void Agent::Reached() {
  last_ok_ = Clock::now();
  reached_ = true;
  if (cut_off_) {
    Info("reached the control plane again after the partition: reporting the jobs stopped");
    cut_off_ = false;
  }
}

void Agent::CheckPartition() {
  if (partition_stop_ms_ <= 0 || !reached_ || cut_off_ || stopping_) return;
  if (Clock::now() - last_ok_ < milliseconds(partition_stop_ms_)) return;
  cut_off_ = true;
  std::vector<RunningJob> running = launcher_.Running();
  Warn("no reply from the control plane for " + std::to_string(partition_stop_ms_) +
           " ms (its partition_stop_ms): stopping " + std::to_string(running.size()) +
           " job(s), which the leader may now run elsewhere; their exits are reported once it "
           "answers again",
       {{"partition_stop_ms", partition_stop_ms_}});
  for (const RunningJob& r : running) {
    Status st = launcher_.Cancel(r.id, milliseconds(options_.stop_grace_ms));
    if (st.ok()) partition_stopped_.insert(r.id);  // its exit says so (RecordExit)
    if (!st.ok() && st.code() != StatusCode::kNotFound)
      Warn("stopping job " + r.id + ": " + st.message(), {{"job", r.id}});
  }
}

}  // namespace tessera::agent::internal
