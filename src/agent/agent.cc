// The node agent: its entry point (RunAgent), the main loop, the order watch and shutdown.
#include "agent/agent.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "agent/agent_internal.h"
#include "common/log.h"
#include "net/http_client.h"

namespace tessera::agent {
namespace {

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

}  // namespace

namespace internal {

void Say(const AgentOptions& options, log::Level level, const std::string& line,
         log::Fields fields) {
  if (options.log) return options.log(line);
  AgentLog().Log(level, line, fields);
}

Agent::Agent(const AgentOptions& options, Inventory inventory, std::vector<std::string> urls)
    : options_(options),
      inventory_(std::move(inventory)),
      launcher_(LauncherOptions{options.work_dir, options.cgroup_root, options.cgroup_parent,
                                options.capgpu_preload, options.region_dir, true,
                                options.swap_ram_bytes, options.swap_dir,
                                options.max_output_bytes}),
      urls_(std::move(urls)),
      heartbeat_ms_(std::max(1, options.default_heartbeat_ms)),
      backoff_ms_(heartbeat_ms_),
      state_(options.work_dir, launcher_.owns_work_dir()) {
  if (!options.mps_control.empty())
    mps_ = std::make_unique<MpsDaemons>(MpsOptions{
        options.mps_control, std::filesystem::absolute(options.work_dir).string() + "/mps"});
  if (inventory_.source == "nvml") {
    auto sampler = NvmlSampler::Open(options.nvml_library);
    if (sampler.ok()) nvml_ = std::move(*sampler);
    auto health = NvmlHealth::Open(options.nvml_library);
    if (health.ok()) {
      health_ = std::move(*health);
    } else {
      Warn("device health is not read: " + health.status().message());
    }
  } else if (inventory_.source == "amdsmi") {
    std::vector<std::string> uuids;
    for (const DiscoveredDevice& d : inventory_.devices) uuids.push_back(d.uuid);
    auto health = AmdSmiHealth::Open(options.amdsmi_library, std::move(uuids));
    if (health.ok()) {
      health_ = std::move(*health);
    } else {
      Warn("device health is not read: " + health.status().message());
    }
  }
  Connect();
}

int Agent::Run() {
  Info("node " + inventory_.node + ": " + std::to_string(inventory_.devices.size()) +
       " device(s) from " + inventory_.source +
       (inventory_.note.empty() ? "" : " (" + inventory_.note + ")") + "; " +
       launcher_.cgroups_status());
  // Each device as registered: what tests/gpu/all_checks.sh compares with nvidia-smi.
  for (const DiscoveredDevice& d : inventory_.devices) {
    Info("device " + std::to_string(d.index) + ": " + d.model + " " + d.uuid +
             (d.amd_mode.empty() ? std::string(", MIG ") + (d.mig_enabled ? "on" : "off")
                                 : ", modes " + d.amd_mode) +
             ", isolation " + d.isolation +
             (health_ == nullptr ? "" : ", health read (" + health_->Reads() + ")"),
         {{"device", std::to_string(d.index)}});
  }
  if (!launcher_.owns_work_dir()) {
    Warn("another agent uses the work directory " + options_.work_dir +
         ": jobs this one starts are not listed there, and are not stopped if it dies; their "
         "exits are not kept on disk, and it keeps no leader epoch across restarts");
  }
  if (!launcher_.leftovers().empty()) {
    std::string ids;
    for (const std::string& id : launcher_.leftovers()) ids += (ids.empty() ? "" : ", ") + id;
    Warn("stopped " + std::to_string(launcher_.leftovers().size()) +
         " job(s) an earlier run of this agent left running (it did not stop cleanly): " + ids);
  }
  LoadState();
  Clock::time_point next_contact = Clock::now();
  std::thread watcher([this] { WatchLoop(); });
  while (!StopRequested() && !refused_) {
    for (JobExit& e : launcher_.Poll()) RecordExit(e);
    CheckPartition();
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
        backoff_ms_ = std::min<int64_t>(backoff_ms_ * 2,
                                        std::max(heartbeat_ms_, int64_t{options_.max_backoff_ms}));
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

bool Agent::StopRequested() const {
  return g_signal_stop != 0 || (options_.stop != nullptr && options_.stop->load());
}

void Agent::RecordExit(const JobExit& e) {
  Info("job " + e.id + " ended: exit " + std::to_string(e.exit_code) +
           (e.signal != 0 ? " (signal " + std::to_string(e.signal) + ")" : "") +
           (e.cancelled ? ", stopped" : "") + ", " + std::to_string(e.output_bytes) +
           " output bytes" +
           (e.output_cut ? " (cut at the node's limit: the rest was dropped)" : ""),
       {{"job", e.id}, {"exit_code", e.exit_code}});
  // Stopped by this agent for a partition (CheckPartition) or as it stops (Shutdown): the leader
  // requeues it, as a lost node's, rather than take the signal for the job's own end.
  const bool partition = partition_stopped_.erase(e.id) != 0;
  const bool shutdown = shutdown_stopped_.erase(e.id) != 0;
  FinishedReport report{e.id, e.exit_code, e.signal, e.output_bytes,
                        partition  ? kStoppedByPartition
                        : shutdown ? kStoppedByShutdown
                                   : ""};
  report.run_ms = e.run_ms;
  KeepExit(report);
  partitions_.Release(e.id);
  for (auto& [device, manager] : swap_) manager->Remove(e.id);
  wake_.store(true);  // reported now, not at the end of the period: its devices free up sooner
}

void Agent::WatchLoop() {
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
    auto res = watch_client_->Get(OrdersWatchPath(inventory_.node, after, kWatchMs));
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

void Agent::StopWatching() {
  watch_stop_.store(true);
  std::lock_guard<std::mutex> g(watch_mu_);
  if (watch_client_) watch_client_->stop();  // a long poll in progress returns now
}

void Agent::Pause(milliseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until && !StopRequested() && !watch_stop_.load()) {
    std::this_thread::sleep_for(milliseconds(50));
  }
}

void Agent::Connect() {
  client_ = net::NewHttpClient(urls_[current_], options_.tls);
  auto timeout = milliseconds(std::max(1, options_.request_timeout_ms));
  client_->set_connection_timeout(timeout);
  client_->set_read_timeout(timeout);
  client_->set_write_timeout(timeout);
  client_->set_keep_alive(true);
  if (!options_.token.empty()) client_->set_bearer_token_auth(options_.token);
}

void Agent::Failover() {
  if (urls_.size() < 2) return;
  seen_seq_.store(-1);           // another server's sequence is not comparable
  finished_in_register_ = true;  // another server may take them
  {
    std::lock_guard<std::mutex> g(watch_mu_);
    current_ = (current_ + 1) % urls_.size();
  }
  Warn("trying the control plane at " + urls_[current_]);
  Connect();
}

bool Agent::Failed(const std::string& what) {
  if (!down_) Warn(what + "; retrying with backoff (jobs keep running)");
  down_ = true;
  return false;
}

void Agent::Shutdown() {
  stopping_ = true;
  std::vector<RunningJob> running = launcher_.Running();
  if (!running.empty()) Info("stopping " + std::to_string(running.size()) + " job(s)");
  for (const RunningJob& r : running) {
    // NotFound: it ended since Running(); WaitAll below collects its exit either way.
    Status st = launcher_.Cancel(r.id, milliseconds(options_.stop_grace_ms));
    if (st.ok()) shutdown_stopped_.insert(r.id);  // its exit says so (RecordExit)
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

}  // namespace internal

using internal::Agent;
using internal::Say;

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
    auto checked = net::ServerUrl(u);
    if (!checked.ok()) {
      fail("control plane " + checked.status().message());
      return 2;
    }
    urls.push_back(*checked);
    start = comma + 1;
  }
  Result<Inventory> inventory =
      DiscoverInventory(node, options.simulate, options.nvml_library, options.amdsmi_library);
  if (!inventory.ok()) {
    fail(inventory.status().message());
    return inventory.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  inventory->pool = options.pool;
  // The cap library is claimed ("preload") and preloaded only where it is one.
  AgentOptions checked = options;
  if (!checked.capgpu_preload.empty()) {
    if (Status st = CheckCapLibrary(checked.capgpu_preload); !st.ok()) {
      Say(options, log::Level::kWarn, st.message() + ": shares run uncapped (isolation none)");
      checked.capgpu_preload.clear();
    }
  }
  // MPS for sm-sharing shares where the control program is found (issue 38).
  checked.mps_control = FindMpsControl(options.mps_control);
  for (DiscoveredDevice& d : inventory->devices) {
    d.isolation = IsolationGrade(d, !checked.capgpu_preload.empty());
    d.mps = !checked.mps_control.empty() && OffersMps(d.model, d.mig_enabled);
  }
  // What swapped-out share memory may take on this node: --swap-ram (else half the host's
  // memory) plus --swap-disk. The scheduler keeps swapping shares' overcommit within it.
  inventory->swap_mib =
      (options.swap_ram_bytes > 0 ? options.swap_ram_bytes >> 20 : inventory->host.memory_mib / 2) +
      (options.swap_disk_bytes >> 20);
  SignalScope signals(options.handle_signals);
  Agent agent(checked, std::move(inventory).value(), std::move(urls));
  return agent.Run();
}

}  // namespace tessera::agent
