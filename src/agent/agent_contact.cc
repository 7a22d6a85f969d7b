// The node agent's exchanges with the control plane: registration, heartbeats, the orders they
// bring (start, cancel, may_run) and output uploads.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <set>

#include "agent/agent_internal.h"

namespace tessera::agent::internal {

bool Agent::Contact() {
  if (!registered_ && !Register()) return false;
  if (!Heartbeat()) return false;
  launcher_.CapOutputs();
  UploadOutputs(Clock::now() + milliseconds(heartbeat_ms_ / 2));
  return true;
}

bool Agent::Register() {
  // Exits not yet acked (kept on disk across a restart): the control plane takes them before it
  // reconciles `running`, so that a job that ended meanwhile is not taken for lost.
  std::vector<FinishedReport> finished;
  if (finished_in_register_) {
    for (const auto& [id, f] : finished_) finished.push_back(f);
  }
  TakeStoppedByOff(&finished);
  CheckHealth(nullptr);  // the devices' health as of now goes with the inventory
  auto res = client_->Post(
      "/v1/agent/register",
      RegisterBody(inventory_, launcher_.cgroups_available(), launcher_.Running(), finished),
      "application/json");
  if (!res) return Failover(), Failed("register: " + httplib::to_string(res.error()));
  if (res->status == 503) Failover();  // a standby (or a server that cannot serve now)
  if (std::optional<std::string> refused = ProtocolRefusal(res->status, res->body)) {
    // The server does not serve this agent's protocol version: no retry can help.
    Say(options_, log::Level::kError, "register refused: " + *refused, {});
    refused_ = true;
    return false;
  }
  if (res->status == 400 && !finished.empty() &&
      res->body.find("unknown field 'finished'") != std::string::npos) {
    // A server from before the field: register without it, the exits go in heartbeats.
    Warn("this control plane takes no exits in registrations: they are reported in heartbeats");
    finished_in_register_ = false;
    return Register();
  }
  if (res->status == 400 && StoppedByRefused(res->body)) return Register();
  if (res->status / 100 != 2)
    return Failed("register: HTTP " + std::to_string(res->status) + " " + res->body);
  Result<RegisterReply> reply = ParseRegisterReplyFields(res->body, heartbeat_ms_);
  if (!reply.ok()) return Failed(reply.status().message());
  if (Stale(reply->epoch)) return Failover(), false;
  heartbeat_ms_ = reply->heartbeat_ms;
  partition_stop_ms_ = reply->partition_stop_ms;
  registered_ = true;
  Reached();
  seen_seq_.store(-1);  // until a heartbeat reply says where this node's orders stand
  Info(
      "registered with the control plane; heartbeat every " + std::to_string(heartbeat_ms_) + " ms",
      {{"node", inventory_.node}, {"server", urls_[current_]}});
  return true;
}

bool Agent::UploadOutputs(Clock::time_point deadline) {
  std::vector<std::string> ids;
  for (const auto& [id, f] : finished_) ids.push_back(id);
  for (const RunningJob& r : launcher_.Running()) {
    if (!finished_.count(r.id)) ids.push_back(r.id);
  }
  for (const std::string& id : ids) {
    if (!UploadOutput(id, deadline)) return false;
    if (Clock::now() >= deadline) break;
  }
  return true;
}

bool Agent::UploadOutput(const std::string& id, Clock::time_point deadline) {
  if (ValidateJobId(id).ok() == false) return true;  // never started: no output file
  int64_t& offset = uploaded_[id];
  const auto fin = finished_.find(id);
  if (given_up_.count(id) != 0) {
    // Refused for good: what is left counts as sent, so that the finished report goes.
    if (fin != finished_.end()) offset = std::max(offset, fin->second.output_bytes);
    return true;
  }
  // Never past the node's limit (the file is cut there; while the job runs, not into where the
  // cut's note would go).
  const int64_t limit = launcher_.UploadableBytes(id);
  if (!ConfirmOutput(id, &offset)) return false;  // a new leader: does it hold what was sent?
  if (offset >= limit) return true;
  std::ifstream in(launcher_.OutputPath(id), std::ios::binary);
  // A finished job's output that is gone or ends early (a tmp cleaner, a full disk) will not
  // grow: say so and let its finished report go, rather than hold it (and its devices) forever.
  auto lost = [&](const char* how) {
    if (fin == finished_.end() || offset >= fin->second.output_bytes) return;
    Warn("output of job " + id + " " + how + " at byte " + std::to_string(offset) + " of " +
             std::to_string(fin->second.output_bytes) + ": the rest is lost",
         {{"job", id}});
    offset = fin->second.output_bytes;
  };
  if (!in) {
    struct stat st {};
    if (stat(launcher_.OutputPath(id).c_str(), &st) != 0 && errno == ENOENT) {
      lost("is missing");  // other errors (EMFILE, EACCES...) are tried again later
    }
    return true;
  }
  std::string chunk(static_cast<size_t>(std::max<int64_t>(1, options_.upload_chunk_bytes)), '\0');
  while (Clock::now() < deadline && offset < limit) {
    in.clear();
    in.seekg(offset);
    in.read(chunk.data(),
            static_cast<std::streamsize>(std::min<int64_t>(chunk.size(), limit - offset)));
    std::streamsize n = in.gcount();
    if (n <= 0) {
      lost("ends");
      return true;
    }
    auto res = client_->Put(OutputPath(id, offset), chunk.data(), static_cast<size_t>(n),
                            "application/octet-stream");
    if (!res)
      return Failover(),
             Failed("output upload for job " + id + ": " + httplib::to_string(res.error()));
    if (res->status == 409 && Rewind(id, res->body, &offset)) continue;  // a new leader
    if (res->status / 100 == 4 && res->status != 429) {  // 429: a limit of the moment
      // Refused for good (e.g. the job is no longer this node's, or its output is past the
      // server's max_output): give the rest of this output up rather than hold back the job's
      // finished report forever.
      Warn("output upload for job " + id + " refused: HTTP " + std::to_string(res->status) + " " +
           res->body + "; the rest of its output is not sent");
      given_up_.insert(id);
      in.clear();
      in.seekg(0, std::ios::end);
      offset = std::max<int64_t>(offset, static_cast<int64_t>(in.tellg()));
      if (fin != finished_.end()) offset = std::max(offset, fin->second.output_bytes);
      return true;
    }
    if (res->status / 100 != 2) {
      Warn("output upload for job " + id + ": HTTP " + std::to_string(res->status) +
           "; retried later");
      return true;  // the heartbeat still goes out; the finished report waits for the bytes
    }
    offset += n;
    recheck_.erase(id);
    launcher_.CapOutputs();  // a job printing fast while this one uploads
  }
  return true;
}

bool Agent::Heartbeat() {
  std::vector<FinishedReport> finished;
  for (const auto& [id, f] : finished_) {
    // Only once the control plane holds all of its output.
    if ((uploaded_[id] >= f.output_bytes && recheck_.count(id) == 0) || !ValidateJobId(id).ok())
      finished.push_back(f);
  }
  TakeStoppedByOff(&finished);
  std::vector<RunningJob> running = launcher_.Running(true);
  for (RunningJob& r : running) r.swap_ordered = swap_ordered_.count(r.id) > 0;
  std::vector<DeviceTelemetry> devices = Telemetry(running);
  CheckHealth(&devices);
  auto res =
      client_->Post("/v1/agent/heartbeat",
                    HeartbeatBody(inventory_.node, running, finished, devices), "application/json");
  if (!res) return Failover(), Failed("heartbeat: " + httplib::to_string(res.error()));
  if (res->status == 503) Failover();
  if (res->status == 404) {
    registered_ = false;
    seen_seq_.store(-1);
    return Failed("heartbeat: HTTP 404 (node unknown), registering again");
  }
  if (res->status == 400 && StoppedByRefused(res->body)) return Heartbeat();
  const bool readings =
      !devices.empty() || std::any_of(running.begin(), running.end(), [](auto& r) {
        return r.gpu_memory_used_bytes >= 0 || r.swapped_bytes > 0 || !r.swap_state.empty();
      });
  if (res->status == 400 && readings) {
    // A reading it will not take must not cost the node its liveness and its orders: once more
    // without the readings (the same refused body, sent for good, lost the node while its jobs
    // ran on: the red team). Said once a minute at most.
    if (Clock::now() - readings_refused_ >= std::chrono::minutes(1)) {
      Warn("heartbeat refused for a reading: HTTP 400 " + res->body +
           "; sent again without the devices' and jobs' readings");
      readings_refused_ = Clock::now();
    }
    for (RunningJob& r : running)
      r.gpu_memory_used_bytes = -1, r.swapped_bytes = 0, r.swap_state = "";
    devices.clear();
    res = client_->Post("/v1/agent/heartbeat",
                        HeartbeatBody(inventory_.node, running, finished, devices),
                        "application/json");
    if (!res) return Failover(), Failed("heartbeat: " + httplib::to_string(res.error()));
  }
  if (res->status / 100 != 2)
    return Failed("heartbeat: HTTP " + std::to_string(res->status) + " " + res->body);
  Result<HeartbeatReply> reply = ParseHeartbeatReply(res->body);
  if (!reply.ok()) return Failed(reply.status().message());
  // A deposed leader's reply: none of it is applied (no start, cancel, may_run or ack).
  if (Stale(reply->epoch)) return Failover(), false;
  if (down_) Info("control plane reachable again");
  down_ = false;
  Reached();
  Apply(*reply);
  if (reply->seq >= 0) {
    int64_t seen = seen_seq_.load();
    while (reply->seq > seen && !seen_seq_.compare_exchange_weak(seen, reply->seq)) {
    }
  }
  return true;
}

void Agent::Apply(const HeartbeatReply& reply) {
  // Devices an administrator returned: their health starts over from what they report now.
  for (int index : reply.health_reset) {
    if (health_ != nullptr && health_->Reset(index))
      Info("device " + std::to_string(index) + ": returned by an administrator; health read anew",
           {{"device", std::to_string(index)}});
  }
  for (const std::string& id : reply.ack) {
    // Reported to an old leader, acked by a new one that may not hold its output: kept until it
    // does (ConfirmOutput), then reported again.
    if (recheck_.count(id) != 0) continue;
    // Acked: the control plane holds its output (a finished job is reported only once all of
    // it was uploaded, or given up), so the node's copy goes.
    if (finished_.count(id) != 0 && !launcher_.IsRunning(id) && ValidateJobId(id).ok()) {
      unlink(launcher_.OutputPath(id).c_str());
    }
    if (finished_.count(id) != 0) state_.Remove(id);
    finished_.erase(id);
    uploaded_.erase(id);
    given_up_.erase(id);
    recheck_.erase(id);
  }
  if (stopping_) return;  // the last report on the way out: start nothing new
  std::set<std::string> starting;
  for (const JobSpec& spec : reply.start) {
    starting.insert(spec.id);
    if (launcher_.IsRunning(spec.id)) continue;                 // a repeated start: already running
    if (finished_.erase(spec.id) != 0) state_.Remove(spec.id);  // a new run under an old id
    uploaded_[spec.id] = 0;
    given_up_.erase(spec.id);
    JobSpec bound = spec;
    Status s = Status::Ok();
    // A root agent runs no job as root by default: an order must name the account (the
    // server names root itself only for a queue with run_as_root).
    if (spec.run_as.empty() && geteuid() == 0) {
      s = Status::FailedPrecondition(
          "the order names no account to run the job under, and this agent runs as root: it runs "
          "no job as "
          "root unless its queue says run_as_root (a server older than this agent?)");
    }
    for (DeviceBinding& d : bound.devices) {
      if (!s.ok()) break;
      if (d.slot.empty()) {
        auto left = partitions_.Use(spec.id, d.index, d.mode);
        if (!left.ok()) {
          s = left.status();
        } else if (!left->empty()) {
          Info("device " + std::to_string(d.index) + ": " + *left + " -> " + d.mode + " for job " +
                   spec.id,
               {{"job", spec.id}});
        }
        continue;
      }
      auto got = partitions_.Acquire(spec.id, d.index, d.slot, d.mode);
      if (!got.ok()) {
        s = got.status();
        continue;
      }
      d.mig = got->mig;
      d.amd_index = got->amd_index;
      Info("job " + spec.id + ": partition " + d.slot + " on device " + std::to_string(d.index) +
               (d.mig.empty() ? " (logical GPU " + std::to_string(d.amd_index) + ")"
                              : " as " + d.mig),
           {{"job", spec.id}});
    }
    if (s.ok()) s = BindMpsClient(mps_.get(), &bound);  // sm-sharing: its device's MPS daemon
    if (s.ok()) s = launcher_.Start(bound);
    if (!s.ok()) partitions_.Release(spec.id);
    wake_.store(true);  // the next heartbeat says at once that it runs (or could not start)
    if (s.ok() && bound.swap && bound.gpu_memory_limit_bytes > 0 && bound.devices.size() == 1) {
      WatchSwap(bound);
    }
    if (s.ok()) {
      Info("job " + spec.id + " started: " + spec.command[0], {{"job", spec.id}});
    } else {
      Warn("job " + spec.id + " could not start: " + s.message(), {{"job", spec.id}});
      // The reason is the job's output, so that its submitter reads it (tessera job ID).
      const std::string why = "tessera-agent: job " + spec.id + " could not start on node " +
                              inventory_.node + ": " + s.message() + "\n";
      int64_t bytes = 0;
      if (ValidateJobId(spec.id).ok()) {
        std::ofstream out(launcher_.OutputPath(spec.id), std::ios::binary | std::ios::trunc);
        out << why;
        out.close();
        if (out) bytes = static_cast<int64_t>(why.size());  // not written (a full disk): no output
      }
      uploaded_[spec.id] = 0;
      KeepExit(FinishedReport{spec.id, 127, 0, bytes, ""});
    }
  }
  for (const CancelOrder& c : reply.cancel) {
    const bool again = launcher_.Cancelling(c.job);  // the order repeats until the job is gone
    if (launcher_.Cancel(c.job, milliseconds(c.grace_ms)).ok() && !again) {
      Info("job " + c.job + " cancelled (grace " + std::to_string(c.grace_ms) + " ms)");
    }
  }
  for (auto& [device, manager] : swap_) manager->OrdersNow(reply.swap);
  swap_ordered_.clear();
  for (const auto& [job, order] : reply.swap) swap_ordered_.insert(job);
  for (const auto& [job, order] : reply.swap) ApplySwapOrder(job, order);
  if (reply.may_run) {
    std::set<std::string> may(reply.may_run->begin(), reply.may_run->end());
    for (const RunningJob& r : launcher_.Running()) {
      if (may.count(r.id) != 0 || starting.count(r.id) != 0) continue;
      const bool again = launcher_.Cancelling(r.id);
      if (launcher_.Cancel(r.id, milliseconds(options_.stop_grace_ms)).ok() && !again) {
        Info("job " + r.id + " is not in may_run: stopping it", {{"job", r.id}});
      }
    }
  }
}

}  // namespace tessera::agent::internal
