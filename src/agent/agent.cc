#include "agent/agent.h"

#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "agent/discovery.h"
#include "agent/launcher.h"
#include "agent/partitions.h"
#include "agent/protocol.h"
#include "agent/swap_manager.h"
#include "common/log.h"
#include "net/http_client.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

volatile std::sig_atomic_t g_signal_stop = 0;
extern "C" void OnStopSignal(int) { g_signal_stop = 1; }

// Installs SIGINT/SIGTERM handlers for its lifetime.
class SignalScope {
 public:
  explicit SignalScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    g_signal_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalScope() {
    if (!enabled_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  bool enabled_;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

const log::Logger& AgentLog() {
  static const log::Logger logger("agent");
  return logger;
}

// One line of the agent's log: to options.log when set, else to the structured log (stderr).
void Say(const AgentOptions& options, log::Level level, const std::string& line,
         log::Fields fields = {}) {
  if (options.log) return options.log(line);
  AgentLog().Log(level, line, fields);
}

// The agent's state and its loop. One thread.
class Agent {
 public:
  Agent(const AgentOptions& options, Inventory inventory, std::vector<std::string> urls)
      : options_(options),
        inventory_(std::move(inventory)),
        launcher_(LauncherOptions{options.work_dir, options.cgroup_root, options.cgroup_parent,
                                  options.capgpu_preload, options.region_dir, true,
                                  options.swap_ram_bytes, options.swap_dir,
                                  options.max_output_bytes}),
        urls_(std::move(urls)),
        heartbeat_ms_(std::max(1, options.default_heartbeat_ms)),
        backoff_ms_(heartbeat_ms_) {
    if (inventory_.source == "nvml") {
      auto sampler = NvmlSampler::Open(options.nvml_library);
      if (sampler.ok()) nvml_ = std::move(*sampler);
    }
    Connect();
  }

  int Run() {
    Info("node " + inventory_.node + ": " + std::to_string(inventory_.devices.size()) +
         " device(s) from " + inventory_.source +
         (inventory_.note.empty() ? "" : " (" + inventory_.note + ")") + "; " +
         launcher_.cgroups_status());
    if (!launcher_.owns_work_dir()) {
      Warn("another agent uses the work directory " + options_.work_dir +
           ": jobs this one starts are not listed there, and are not stopped if it dies");
    }
    if (!launcher_.leftovers().empty()) {
      std::string ids;
      for (const std::string& id : launcher_.leftovers()) ids += (ids.empty() ? "" : ", ") + id;
      Warn("stopped " + std::to_string(launcher_.leftovers().size()) +
           " job(s) an earlier run of this agent left running (it did not stop cleanly): " + ids);
    }
    Clock::time_point next_contact = Clock::now();
    std::thread watcher([this] { WatchLoop(); });
    while (!StopRequested() && !refused_) {
      for (JobExit& e : launcher_.Poll()) RecordExit(e);
      partitions_.RetryDestroys();
      TickSwap();
      if (wake_.exchange(false)) next_contact = std::min(next_contact, Clock::now());
      if (Clock::now() >= next_contact) {
        // The period counts from the heartbeat, not from the end of the uploads after it: output
        // never stretches the interval between heartbeats.
        const Clock::time_point started = Clock::now();
        bool ok = Contact();
        if (ok) {
          backoff_ms_ = heartbeat_ms_;
          next_contact = std::max(started + milliseconds(heartbeat_ms_),
                                  Clock::now() + milliseconds(heartbeat_ms_ / 4));
        } else {
          next_contact = Clock::now() + milliseconds(backoff_ms_);
          backoff_ms_ = std::min<int64_t>(
              backoff_ms_ * 2, std::max(heartbeat_ms_, int64_t{options_.max_backoff_ms}));
        }
      }
      auto wait = std::min(milliseconds(std::max(1, options_.poll_ms)),
                           std::chrono::duration_cast<milliseconds>(next_contact - Clock::now()));
      if (wait.count() > 0) std::this_thread::sleep_for(wait);
    }
    // A long poll begun just after a stop() would wait out its time: stop() again until the
    // watcher has returned.
    StopWatching();
    while (!watch_done_.load()) {
      StopWatching();
      std::this_thread::sleep_for(milliseconds(20));
    }
    watcher.join();
    Shutdown();
    return refused_ ? 1 : 0;
  }

 private:
  void Info(const std::string& line, log::Fields fields = {}) const {
    Say(options_, log::Level::kInfo, line, fields);
  }
  void Warn(const std::string& line, log::Fields fields = {}) const {
    Say(options_, log::Level::kWarn, line, fields);
  }

  bool StopRequested() const {
    return g_signal_stop != 0 || (options_.stop != nullptr && options_.stop->load());
  }

  // Swapping shares: one manager per device keeps their resident memory within the device.
  void WatchSwap(const JobSpec& spec) {
    const int index = spec.devices[0].index;
    if (index < 0 || index >= static_cast<int>(inventory_.devices.size())) return;
    auto& manager = swap_[index];
    if (manager == nullptr) {
      const uint64_t bytes = static_cast<uint64_t>(inventory_.devices[index].memory_mib) << 20;
      manager =
          std::make_unique<SwapManager>(SwapManager::Options{.device_memory = bytes,
                                                             .idle_ms = options_.swap_idle_ms,
                                                             .slice_ms = options_.swap_slice_ms});
    }
    std::string region;
    uid_t owner = 0;
    if (!launcher_.ShareRegion(spec.id, &region, &owner)) return;
    Status s = manager->Add(spec.id, region, NowMs(), owner);
    if (!s.ok()) Warn("job " + spec.id + ": " + s.message(), {{"job", spec.id}});
  }

  void TickSwap() {
    if (swap_.empty()) return;
    const int64_t now = NowMs();
    if (now - last_swap_tick_ms_ < 100) return;
    last_swap_tick_ms_ = now;
    // The node's swap RAM budget, the same the agent reports: shared by every device's shares.
    const uint64_t budget = options_.swap_ram_bytes > 0
                                ? static_cast<uint64_t>(options_.swap_ram_bytes)
                                : static_cast<uint64_t>(inventory_.host.memory_mib / 2) << 20;
    uint64_t held = 0;
    for (auto& [device, manager] : swap_) held += manager->HostBytes();
    uint64_t left = budget > held ? budget - held : 0;
    for (auto& [device, manager] : swap_) {
      for (const std::string& line : manager->Tick(now, &left)) {
        Info("device " + std::to_string(device) + ": " + line);
      }
    }
  }

  static int64_t NowMs() {
    return std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
  }

  void RecordExit(const JobExit& e) {
    Info("job " + e.id + " ended: exit " + std::to_string(e.exit_code) +
             (e.signal != 0 ? " (signal " + std::to_string(e.signal) + ")" : "") +
             (e.cancelled ? ", stopped" : "") + ", " + std::to_string(e.output_bytes) +
             " output bytes" +
             (e.output_cut ? " (cut at the node's limit: the rest was dropped)" : ""),
         {{"job", e.id}, {"exit_code", e.exit_code}});
    finished_[e.id] = FinishedReport{e.id, e.exit_code, e.signal, e.output_bytes};
    partitions_.Release(e.id);
    for (auto& [device, manager] : swap_) manager->Remove(e.id);
    wake_.store(true);  // reported now, not at the end of the period: its devices free up sooner
  }

  // The order watch: a long poll (GET /v1/agent/orders) on a connection of its own, answered as
  // soon as the control plane has new orders for this node, so that the main loop heartbeats at
  // once instead of at the end of its period (a start or a stop reaches the node in milliseconds;
  // heartbeats stay at their period for liveness). Watches only once a heartbeat reply gave the
  // node's order sequence (seen_seq_ >= 0); a control plane without watches is polled as before.
  void WatchLoop() {
    struct Done {
      std::atomic<bool>& done;
      ~Done() { done.store(true); }
    } done{watch_done_};
    std::string url;
    while (!StopRequested() && !watch_stop_.load()) {
      const int64_t after = seen_seq_.load();
      std::string now_url;
      {
        std::lock_guard<std::mutex> g(watch_mu_);
        now_url = urls_[current_];
        if (after >= 0 && (watch_client_ == nullptr || now_url != url)) {
          watch_client_ = net::NewHttpClient(now_url, options_.tls);
          watch_client_->set_connection_timeout(
              milliseconds(std::max(1, options_.request_timeout_ms)));
          watch_client_->set_read_timeout(
              milliseconds(kWatchMs + std::max(1, options_.request_timeout_ms)));
          watch_client_->set_keep_alive(true);
          if (!options_.token.empty()) watch_client_->set_bearer_token_auth(options_.token);
          url = now_url;
        }
      }
      if (after < 0) {
        Pause(milliseconds(100));
        continue;
      }
      auto res = watch_client_->Get("/v1/agent/orders?node=" + Encoded(inventory_.node) +
                                    "&after=" + std::to_string(after) +
                                    "&wait_ms=" + std::to_string(kWatchMs));
      if (!res || res->status != 200) {
        // Down, a standby, unknown node (registering again), or a control plane without watches.
        Pause(milliseconds(res && res->status == 404 ? 5000 : 1000));
        continue;
      }
      Result<OrdersWake> w = ParseOrdersWake(res->body);
      if (!w.ok() || !w->wake) continue;
      int64_t seen = seen_seq_.load();
      while (seen >= 0 && w->seq > seen && !seen_seq_.compare_exchange_weak(seen, w->seq)) {
      }
      wake_.store(true);
    }
  }

  void StopWatching() {
    watch_stop_.store(true);
    std::lock_guard<std::mutex> g(watch_mu_);
    if (watch_client_) watch_client_->stop();  // a long poll in progress returns now
  }

  // Sleeps `d`, or less when the agent stops.
  void Pause(milliseconds d) {
    const auto until = Clock::now() + d;
    while (Clock::now() < until && !StopRequested() && !watch_stop_.load()) {
      std::this_thread::sleep_for(milliseconds(50));
    }
  }

  static std::string Encoded(const std::string& s) {
    static const char* kHex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
        out += static_cast<char>(c);
      } else {
        out += '%';
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    return out;
  }

  // One exchange with the control plane: register if needed, heartbeat, then upload output for
  // at most half a heartbeat period, so that output, however fast a job prints, never delays the
  // next heartbeat (the rest goes next time; a finished report waits for its job's bytes).
  bool Contact() {
    if (!registered_ && !Register()) return false;
    if (!Heartbeat()) return false;
    launcher_.CapOutputs();
    UploadOutputs(Clock::now() + milliseconds(heartbeat_ms_ / 2));
    return true;
  }

  bool Register() {
    auto res =
        client_->Post("/v1/agent/register",
                      RegisterBody(inventory_, launcher_.cgroups_available(), launcher_.Running()),
                      "application/json");
    if (!res) return Failover(), Failed("register: " + httplib::to_string(res.error()));
    if (res->status == 503) Failover();  // a standby (or a server that cannot serve now)
    if (std::optional<std::string> refused = ProtocolRefusal(res->status, res->body)) {
      // The server does not serve this agent's protocol version: no retry can help.
      Say(options_, log::Level::kError, "register refused: " + *refused, {});
      refused_ = true;
      return false;
    }
    if (res->status / 100 != 2)
      return Failed("register: HTTP " + std::to_string(res->status) + " " + res->body);
    Result<int64_t> hb = ParseRegisterReply(res->body, heartbeat_ms_);
    if (!hb.ok()) return Failed(hb.status().message());
    heartbeat_ms_ = *hb;
    registered_ = true;
    seen_seq_.store(-1);  // until a heartbeat reply says where this node's orders stand
    Info("registered with the control plane; heartbeat every " + std::to_string(heartbeat_ms_) +
             " ms",
         {{"node", inventory_.node}, {"server", urls_[current_]}});
    return true;
  }

  // A client for the current server URL.
  void Connect() {
    client_ = net::NewHttpClient(urls_[current_], options_.tls);
    auto timeout = milliseconds(std::max(1, options_.request_timeout_ms));
    client_->set_connection_timeout(timeout);
    client_->set_read_timeout(timeout);
    client_->set_write_timeout(timeout);
    client_->set_keep_alive(true);
    if (!options_.token.empty()) client_->set_bearer_token_auth(options_.token);
  }

  // The server did not answer, or is a standby: the next attempt goes to the next URL given.
  void Failover() {
    if (urls_.size() < 2) return;
    seen_seq_.store(-1);  // another server's sequence is not comparable
    {
      std::lock_guard<std::mutex> g(watch_mu_);
      current_ = (current_ + 1) % urls_.size();
    }
    Warn("trying the control plane at " + urls_[current_]);
    Connect();
  }

  // Logs a failure once per outage (not on every retry).
  bool Failed(const std::string& what) {
    if (!down_) Warn(what + "; retrying with backoff (jobs keep running)");
    down_ = true;
    return false;
  }

  // Uploads the new bytes of every running or unacked job until `deadline`, finished jobs first
  // (their reports wait for them), then the job least uploaded. False when the control plane
  // failed.
  bool UploadOutputs(Clock::time_point deadline) {
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

  bool UploadOutput(const std::string& id, Clock::time_point deadline) {
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
      if (res->status / 100 == 4) {
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
      launcher_.CapOutputs();  // a job printing fast while this one uploads
    }
    return true;
  }

  bool Heartbeat() {
    std::vector<FinishedReport> finished;
    for (const auto& [id, f] : finished_) {
      // Only once the control plane holds all of its output.
      if (uploaded_[id] >= f.output_bytes || !ValidateJobId(id).ok()) finished.push_back(f);
    }
    std::vector<RunningJob> running = launcher_.Running(true);
    std::vector<DeviceTelemetry> devices = Telemetry(running);
    auto res = client_->Post("/v1/agent/heartbeat",
                             HeartbeatBody(inventory_.node, running, finished, devices),
                             "application/json");
    if (!res) return Failover(), Failed("heartbeat: " + httplib::to_string(res.error()));
    if (res->status == 503) Failover();
    if (res->status == 404) {
      registered_ = false;
      seen_seq_.store(-1);
      return Failed("heartbeat: HTTP 404 (node unknown), registering again");
    }
    if (res->status / 100 != 2)
      return Failed("heartbeat: HTTP " + std::to_string(res->status) + " " + res->body);
    Result<HeartbeatReply> reply = ParseHeartbeatReply(res->body);
    if (!reply.ok()) return Failed(reply.status().message());
    if (down_) Info("control plane reachable again");
    down_ = false;
    Apply(*reply);
    if (reply->seq >= 0) {
      int64_t seen = seen_seq_.load();
      while (reply->seq > seen && !seen_seq_.compare_exchange_weak(seen, reply->seq)) {
      }
    }
    return true;
  }

  void Apply(const HeartbeatReply& reply) {
    for (const std::string& id : reply.ack) {
      // Acked: the control plane holds its output (a finished job is reported only once all of
      // it was uploaded, or given up), so the node's copy goes.
      if (finished_.count(id) != 0 && !launcher_.IsRunning(id) && ValidateJobId(id).ok()) {
        unlink(launcher_.OutputPath(id).c_str());
      }
      finished_.erase(id);
      uploaded_.erase(id);
      given_up_.erase(id);
    }
    if (stopping_) return;  // the last report on the way out: start nothing new
    std::set<std::string> starting;
    for (const JobSpec& spec : reply.start) {
      starting.insert(spec.id);
      if (launcher_.IsRunning(spec.id)) continue;  // a repeated start: already running
      finished_.erase(spec.id);                    // a new run under an old id
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
            Info("device " + std::to_string(d.index) + ": " + *left + " -> " + d.mode +
                     " for job " + spec.id,
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
          if (out)
            bytes = static_cast<int64_t>(why.size());  // not written (a full disk): no output
        }
        finished_[spec.id] = FinishedReport{spec.id, 127, 0, bytes};
        uploaded_[spec.id] = 0;
      }
    }
    for (const CancelOrder& c : reply.cancel) {
      if (launcher_.Cancel(c.job, milliseconds(c.grace_ms)).ok()) {
        Info("job " + c.job + " cancelled (grace " + std::to_string(c.grace_ms) + " ms)");
      }
    }
    if (reply.may_run) {
      std::set<std::string> may(reply.may_run->begin(), reply.may_run->end());
      for (const RunningJob& r : launcher_.Running()) {
        if (may.count(r.id) != 0 || starting.count(r.id) != 0) continue;
        if (launcher_.Cancel(r.id, milliseconds(options_.stop_grace_ms)).ok()) {
          Info("job " + r.id + " is not in may_run: stopping it", {{"job", r.id}});
        }
      }
    }
  }

  void Shutdown() {
    stopping_ = true;
    std::vector<RunningJob> running = launcher_.Running();
    if (!running.empty()) Info("stopping " + std::to_string(running.size()) + " job(s)");
    for (const RunningJob& r : running) {
      // NotFound: it ended since Running(); WaitAll below collects its exit either way.
      Status st = launcher_.Cancel(r.id, milliseconds(options_.stop_grace_ms));
      if (!st.ok() && st.code() != StatusCode::kNotFound)
        Warn("stopping job " + r.id + ": " + st.message(), {{"job", r.id}});
    }
    for (JobExit& e : launcher_.WaitAll(milliseconds(options_.stop_grace_ms + 2000))) RecordExit(e);
    if (registered_ && !finished_.empty()) {
      auto timeout = milliseconds(std::min(1000, std::max(1, options_.request_timeout_ms)));
      client_->set_connection_timeout(timeout);
      client_->set_read_timeout(timeout);
      // Best effort: the last output (for a few seconds at most), then how they ended.
      if (UploadOutputs(Clock::now() + milliseconds(3000))) Heartbeat();
    }
    Info("stopped");
  }

  // Activity since the last heartbeat: a job whose processes used CPU time is active (the
  // stand-in for GPU activity until per-process NVML sampling is wired; see docs/telemetry.md).
  // On a simulated node the devices' utilization is synthesized from the same figures: the CPU
  // share of the jobs on each device (capped at 100%), and their charged share memory.
  std::vector<DeviceTelemetry> Telemetry(std::vector<RunningJob>& running) {
    const auto now = Clock::now();
    const int64_t elapsed_ms =
        last_telemetry_ == Clock::time_point{}
            ? 0
            : std::chrono::duration_cast<milliseconds>(now - last_telemetry_).count();
    last_telemetry_ = now;
    static const long kTicksPerSecond = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
    std::map<int, int64_t> util_milli, memory_mib;  // by device
    std::map<std::string, uint64_t> seen;
    std::map<std::string, int64_t> launches;
    for (RunningJob& r : running) {
      auto prev = cpu_ticks_.find(r.id);
      const uint64_t delta =
          prev == cpu_ticks_.end() || r.cpu_ticks < prev->second ? 0 : r.cpu_ticks - prev->second;
      r.active = prev == cpu_ticks_.end() || delta > 0 ? 1 : 0;  // its first report: just started
      seen[r.id] = r.cpu_ticks;
      // A share whose processes launched kernels since the last heartbeat (its region counts them).
      if (r.gpu_launches >= 0) {
        auto pl = launches_.find(r.id);
        if (pl != launches_.end() && r.gpu_launches > pl->second) r.active = 1;
        launches[r.id] = r.gpu_launches;
      }
      for (int d : r.devices) {
        if (elapsed_ms > 0)
          util_milli[d] +=
              static_cast<int64_t>(delta) * 1000 * 1000 / (kTicksPerSecond * elapsed_ms);
        if (r.gpu_memory_used_bytes >= 0)
          memory_mib[d] += (r.gpu_memory_used_bytes + (1 << 20) - 1) >> 20;
      }
    }
    cpu_ticks_ = std::move(seen);
    launches_ = std::move(launches);
    std::vector<DeviceTelemetry> out;
    if (nvml_) {
      // Real devices: NVML's utilization and memory; a job with compute processes on a busy
      // device is active, and its processes' device memory is what it uses.
      std::map<int, NvmlSample> by_index;
      for (NvmlSample& d : nvml_->Sample()) by_index[d.index] = std::move(d);
      for (RunningJob& r : running) {
        int64_t used = 0;
        bool seen_on_device = false, busy = false;
        for (int d : r.devices) {
          auto it = by_index.find(d);
          if (it == by_index.end()) continue;
          for (const auto& [pid, bytes] : it->second.processes) {
            if (SessionOf(pid) != r.pid) continue;
            seen_on_device = true;
            used += bytes;
            busy = busy || it->second.util_pct > 0;
          }
        }
        if (seen_on_device && r.gpu_memory_used_bytes < 0) r.gpu_memory_used_bytes = used;
        if (busy) r.active = 1;
      }
      for (const auto& [index, d] : by_index) {
        out.push_back({index, d.util_pct,
                       d.memory_used_bytes < 0 ? -1 : (d.memory_used_bytes + (1 << 20) - 1) >> 20});
      }
      return out;
    }
    if (!inventory_.simulated || elapsed_ms == 0) return out;
    for (const DiscoveredDevice& d : inventory_.devices) {
      const int64_t u = util_milli.count(d.index) ? util_milli[d.index] : 0;
      out.push_back({d.index, static_cast<int>(std::min<int64_t>(100, u / 10)),
                     memory_mib.count(d.index) ? memory_mib[d.index] : 0});
    }
    return out;
  }

  // The session (the job's process tree: each job is a session leader) of `pid`; 0 when gone.
  static pid_t SessionOf(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(in, line) || line.rfind(')') == std::string::npos) return 0;
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    std::string state;
    long long ppid = 0, pgrp = 0, session = 0;
    rest >> state >> ppid >> pgrp >> session;
    return rest ? static_cast<pid_t>(session) : 0;
  }

  const AgentOptions& options_;
  std::unique_ptr<NvmlSampler> nvml_;  // real NVIDIA devices: their telemetry
  Clock::time_point last_telemetry_{};
  std::map<std::string, uint64_t> cpu_ticks_;  // each running job's CPU time at the last heartbeat
  std::map<std::string, int64_t> launches_;    // each share's kernel launches at the last heartbeat
  Inventory inventory_;
  Partitions partitions_{inventory_, options_.nvml_library};
  Launcher launcher_;
  std::map<int, std::unique_ptr<SwapManager>> swap_;  // device index -> its swapping shares
  int64_t last_swap_tick_ms_ = 0;
  std::vector<std::string> urls_;  // the control plane's servers; one leads
  size_t current_ = 0;             // written by the main thread under watch_mu_
  // The order watch (WatchLoop, its own thread and connection).
  static constexpr int64_t kWatchMs = 25000;
  std::mutex watch_mu_;
  std::unique_ptr<httplib::Client> watch_client_;
  std::atomic<int64_t> seen_seq_{-1};  // the node's order sequence the agent knows; -1: none yet
  std::atomic<bool> wake_{false};      // new orders: heartbeat now
  std::atomic<bool> watch_stop_{false};
  std::atomic<bool> watch_done_{false};  // WatchLoop has returned
  std::unique_ptr<httplib::Client> client_;
  int64_t heartbeat_ms_;
  int64_t backoff_ms_;
  bool registered_ = false;
  bool refused_ = false;  // the control plane refused this agent's protocol version: exit 1
  bool down_ = false;
  bool stopping_ = false;
  std::map<std::string, FinishedReport> finished_;  // ended, not yet acked
  std::map<std::string, int64_t> uploaded_;         // output bytes the control plane holds
  std::set<std::string> given_up_;                  // output uploads refused for good
};

}  // namespace

int RunAgent(const AgentOptions& options) {
  auto fail = [&options](const std::string& line) { Say(options, log::Level::kError, line); };
  // The token is in this process's memory (and its environment when given as TESSERA_TOKEN): not
  // dumpable, /proc/PID/environ and /proc/PID/mem are root's alone, so that jobs running under
  // the agent's own account (a non-root agent's) cannot read it there. The variable is dropped
  // too, so that nothing started later inherits it.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  unsetenv("TESSERA_TOKEN");
  std::string node = options.node_name;
  if (node.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
      fail("cannot read this host's name; pass a node name");
      return 2;
    }
    node = host;
  }
  if (Status named = ValidateNodeName(node); !named.ok()) {
    fail(named.message());
    return 2;
  }
  // One URL, or several (comma-separated) servers sharing one store.
  std::vector<std::string> urls;
  for (size_t start = 0; start <= options.control_plane_url.size();) {
    size_t comma = options.control_plane_url.find(',', start);
    if (comma == std::string::npos) comma = options.control_plane_url.size();
    std::string u = options.control_plane_url.substr(start, comma - start);
    while (!u.empty() && u.front() == ' ') u.erase(u.begin());
    while (!u.empty() && u.back() == ' ') u.pop_back();
    if (!net::IsHttpUrl(u)) {
      fail("control plane URL '" + u + "' must look like http://host:port or https://host:port");
      return 2;
    }
    urls.push_back(u);
    start = comma + 1;
  }
  Result<Inventory> inventory = DiscoverInventory(node, options.simulate, options.nvml_library);
  if (!inventory.ok()) {
    fail(inventory.status().message());
    return inventory.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  inventory->pool = options.pool;
  // What swapped-out share memory may take on this node: --swap-ram (else half the host's
  // memory) plus --swap-disk. The scheduler keeps swapping shares' overcommit within it.
  inventory->swap_mib =
      (options.swap_ram_bytes > 0 ? options.swap_ram_bytes >> 20 : inventory->host.memory_mib / 2) +
      (options.swap_disk_bytes >> 20);
  SignalScope signals(options.handle_signals);
  Agent agent(options, std::move(inventory).value(), std::move(urls));
  return agent.Run();
}

}  // namespace tessera::agent
