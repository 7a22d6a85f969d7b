// The engine's commands: `serve` (control plane, or a standby), `agent`, `up` (control plane +
// agent on this host). The user commands that talk to a server are in cmd_client.cc.
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "agent/agent.h"
#include "agent/discovery.h"
#include "api/server.h"
#include "cli/choices.h"
#include "cli/client.h"
#include "cli/cmd_engine_leader.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "cli/up_config.h"
#include "common/log.h"
#include "common/read_file.h"
#include "model/quantity.h"
#include "net/client_tls.h"
#include "net/tls.h"
#include "sim/scenario.h"
#include "sim/usage_api.h"
#include "store/store.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

bool SplitListen(const std::string& listen, std::string* host, int* port) {
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  *host = listen.substr(0, colon);
  auto p = ParseNonNegativeInt(listen.substr(colon + 1));
  if (!p.ok() || *p > 65535) return false;
  *port = static_cast<int>(*p);
  return !host->empty();
}

// `tessera serve --check-config`: the config parsed and validated as serve would, nothing opened.
int CheckConfig(const std::string& config_path) {
  auto config = api::LoadConfig(config_path);
  if (!config.ok()) {
    std::cerr << "tessera serve: " << config.status().message() << "\n";
    return kExitBadInput;
  }
  const api::EngineConfig& c = *config;
  std::printf(
      "%s: ok: %zu group(s), %zu pool(s), %zu profile(s), %zu queue(s), %zu identity(ies), "
      "placement %s\n",
      config_path.c_str(), c.policy.groups.size(), c.policy.pools.size(), c.policy.profiles.size(),
      c.policy.queues.size(), c.identities.size(), c.policy.placement.c_str());
  for (const api::QueueRoute& r : c.routes) {
    std::printf("  queue %s -> %s%s\n", r.queue.c_str(), r.backend.c_str(),
                r.run_as_root ? " (jobs as root)" : "");
  }
  for (const std::string& w : c.warnings) std::printf("warning: %s\n", w.c_str());
  for (const std::string& w : api::ExpiredTokenWarnings(c, NowMs()))
    std::printf("warning: %s\n", w.c_str());
  return kExitOk;
}

// What `tessera up` needs of Serve besides its flags.
struct ServeHooks {
  std::function<void(int)> on_ready;  // once it listens, with the port
  // Given a function that stops the server once there is one (before it serves), and an empty
  // one before it goes.
  std::function<void(std::function<void()>)> on_stopper;
};

// Runs the control plane until SIGINT/SIGTERM. `on_ready(port)` runs once it listens.
int Serve(const ServeFlags& flags, const ServeHooks& hooks) {
  const std::string& data = flags.data;
  const std::string& listen = flags.listen;
  const std::string& store_url = flags.store;
  auto config = api::LoadConfig(flags.config);
  if (!config.ok()) {
    ServeLog().Error(config.status().message());
    return kExitBadInput;
  }
  for (const std::string& w : config->warnings) ServeLog().Warn("config: " + w);
  for (const std::string& w : api::ExpiredTokenWarnings(*config, NowMs()))
    ServeLog().Warn("config: " + w);
  std::string host;
  int port = 0;
  if (!SplitListen(listen, &host, &port)) {
    ServeLog().Error("bad --listen '" + listen + "' (HOST:PORT)");
    return kExitBadInput;
  }
  std::error_code ec;
  std::filesystem::create_directories(data, ec);
  if (ec) {
    ServeLog().Error("cannot create data directory '" + data + "': " + ec.message());
    return kExitBadInput;
  }
  // The data directory holds the store (commands, environments), tokens and output: its owner's
  // alone (0700). With Slurm or PBS queues, their jobs write output under it as their own
  // accounts, so others may pass through it (0711) but still list and read nothing (its files
  // are 0600).
  bool batch = false;
  for (const api::QueueRoute& r : config->routes) {
    for (const std::string& t : r.backend_types) batch = batch || t == "slurm" || t == "pbs";
  }
  if (chmod(data.c_str(), batch ? 0711 : 0700) != 0) {
    ServeLog().Warn("cannot make the data directory '" + data +
                    "' private: " + std::strerror(errno));
  }
  const std::string url = store_url.empty() ? data + "/tessera.db" : store_url;
  auto store = store::Store::Open(url);
  if (!store.ok()) {
    ServeLog().Error("store: " + store.status().message());
    return kExitBadInput;
  }
  // Several servers may share one store: one leads, the others wait as standbys.
  const std::string advertise = flags.advertise.empty() ? flags.Scheme() + listen : flags.advertise;
  store::Store* lease = store->get();
  int listener = -1;
  switch (AwaitLead(*lease, advertise, host, port, flags, &listener)) {
    case Lead::kLeads:
      break;
    case Lead::kStopped:
      return kExitOk;
    case Lead::kRefused:
      return 1;
  }
  config->whatif.replay = sim::WhatIfReport;             // GET /v1/whatif: the simulator replays
  config->whatif.usage = sim::usage::WhatIfUsageReport;  // POST /v1/whatif/usage
  auto engine = api::Engine::Open(std::move(*config), std::move(*store), data, NowMs);
  if (!engine.ok()) {
    ServeLog().Error(engine.status().message());
    return 1;
  }
  api::ApiServerOptions options = flags.ServerOptions();
  // The store is owned by the engine, which outlives the server.
  options.lease_check = [lease] { return lease->CheckLease(); };
  options.lease_fresh = [lease] { return lease->LeaseFresh(); };
  api::ApiServer server(engine->get(), options);
  struct Stopper {
    const ServeHooks& hooks;
    ~Stopper() {
      if (hooks.on_stopper) hooks.on_stopper(nullptr);
    }
  } stopper{hooks};
  if (hooks.on_stopper) hooks.on_stopper([&server] { server.Stop(); });
  auto bound = listener >= 0 ? server.Adopt(listener) : server.Bind(host, port);
  if (!bound.ok()) {
    ServeLog().Error(bound.status().message());
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  // The store as it describes itself: a PostgreSQL URL's password is not logged.
  ServeLog().Info("listening on " + flags.Scheme() + host + ":" + std::to_string(*bound) +
                      " (store " + lease->Describe() + "), leading as " + advertise,
                  {{"port", *bound}, {"log_level", log::LevelName(log::CurrentLevel())}});
  if (hooks.on_ready) hooks.on_ready(*bound);
  server.Run();
  if (!server.deposed().ok()) return kExitDeposed;
  return kExitOk;
}

// `tessera up --tls` (the default): a self-signed certificate for this host, made once under
// DATA/tls and kept, so that clients trusting it (TESSERA_CA) keep working across restarts.
Status LocalCertificate(const std::string& data, const std::string& listen, ServeFlags* f) {
  std::error_code ec;
  std::filesystem::create_directories(data + "/tls", ec);
  f->tls_cert = data + "/tls/cert.pem";
  f->tls_key = data + "/tls/key.pem";
  if (std::filesystem::exists(f->tls_cert, ec) && std::filesystem::exists(f->tls_key, ec))
    return Status::Ok();
  std::vector<std::string> hosts = {"localhost", "127.0.0.1", "::1"};
  std::string host;
  int port = 0;
  if (SplitListen(listen, &host, &port) &&
      std::find(hosts.begin(), hosts.end(), host) == hosts.end() && host != "0.0.0.0") {
    hosts.push_back(host);
  }
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') hosts.push_back(name);
  return net::WriteSelfSigned(f->tls_cert, f->tls_key, hosts);
}

int Up(const std::string& data, const std::string& listen, const std::string& simulate,
       const std::string& log_level, const std::string& log_format, bool tls) {
  // Checked before the data directory and its tokens are made for a server that never starts.
  std::string listen_host;
  int listen_port = 0;
  if (!SplitListen(listen, &listen_host, &listen_port)) {
    ServeLog().Error("bad --listen '" + listen + "' (HOST:PORT)");
    return 2;
  }
  // The agent's inventory too: refused by the agent alone, it was started again every second
  // after "Tessera is up." (a new user).
  if (!simulate.empty()) {
    auto devices = agent::ParseSimulatedInventory(simulate, "local", partition::Catalog::BuiltIn());
    if (!devices.ok()) {
      ServeLog().Error("bad --simulate '" + simulate + "': " + devices.status().message());
      return 2;
    }
  }
  // Owner-only before anything is written in it (serve tightens it too, but only later).
  std::error_code ec;
  std::filesystem::create_directories(data, ec);
  if (::chmod(data.c_str(), 0700) != 0) {
    ServeLog().Error("cannot make " + data + " owner-only: " + std::strerror(errno));
    return 1;
  }
  ServeFlags flags;
  flags.data = data;
  flags.listen = listen;
  flags.sole = true;
  flags.stop_on_signals = false;  // the watch below stops the agent first
  // Its jobs run on the host it serves from: a job holding every connection from 127.0.0.1
  // locked out every other client, the CLI included, as long as it liked (the red team).
  flags.limit_loopback_peers = true;
  if (tls) {
    Status st = LocalCertificate(data, listen, &flags);
    if (!st.ok()) {
      ServeLog().Error("tls: " + st.message());
      return 1;
    }
  }
  const std::string config = flags.config = data + "/config.yaml";
  // Tokens made anew (a token file removed) do not match the config written with the old ones.
  bool made_token = false;
  for (const char* t : {"/admin.token", "/alice.token", "/agent.token"})
    made_token = made_token || !std::filesystem::exists(data + t);
  std::string tokens[3];
  for (int i = 0; i < 3; ++i) {
    const char* names[] = {"/admin.token", "/alice.token", "/agent.token"};
    auto t = ReadOrMakeSecret(data + names[i], api::NewToken());
    if (!t.ok()) {
      ServeLog().Error(t.status().message());
      return 1;
    }
    tokens[i] = *t;
  }
  const std::string &admin = tokens[0], &user = tokens[1], &agent = tokens[2];
  // The default config is written where there is none; an existing one (its owner's edits) is
  // served as it is: it was written over at every start, edits gone without a word.
  const bool kept = std::filesystem::exists(config);
  if (!kept) {
    std::ofstream out(config);
    out << ExampleConfig(admin, user, agent);
  }
  // A kept config may accept none of the token files (their tokens made anew, or a config
  // brought from elsewhere): with no agent token it accepts, its agent retried its 401 for good
  // while `up` printed tokens every call refused (a new user). Refused at start, saying what to
  // do; a person's token it refuses is not printed as one.
  std::string shown[2] = {admin, user};
  if (kept) {
    auto c = api::LoadConfig(config);
    auto accepts = [&](const std::string& token, api::Role role) {
      const std::string hash = api::Sha256Hex(token);
      return std::any_of(c->identities.begin(), c->identities.end(), [&](const api::Identity& i) {
        return i.token_sha256 == hash && i.role == role;
      });
    };
    if (c.ok() && !accepts(agent, api::Role::kAgent)) {
      ServeLog().Error("the kept config " + config + " accepts no agent token from " + data +
                       "/agent.token" + (made_token ? " (a token file was made anew)" : "") +
                       ": remove the config for the default, or write the token of one of its "
                       "agent identities into that file");
      return 2;
    }
    const char* names[] = {"admin", "user"};
    const api::Role roles[] = {api::Role::kAdmin, api::Role::kUser};
    for (int i = 0; c.ok() && i < 2; ++i) {
      if (!accepts(shown[i], roles[i]))
        shown[i] = std::string("(the kept config accepts no ") + names[i] + " token from " + data +
                   (i == 0 ? "/admin.token)" : "/alice.token)");
    }
  }
  std::atomic<pid_t> agent_pid{-1};
  // The agent's watch (started with it): reaps it, and starts it again when it died while `up`
  // runs (a crash, a kill -9: it stayed a zombie and the node lost for good). The one place that
  // waits for the agent; it ends once `agent_stopping` is set and the agent has gone.
  std::atomic<bool> agent_stopping{false};
  std::thread agent_watch;
  // SIGINT (Ctrl-C) or SIGTERM: the agent is stopped first, and the server serves until it has
  // gone, so that it reports how its jobs ended (its stopped jobs are recorded, never run again
  // from scratch after a restart); a second signal stops the server at once.
  std::mutex stop_mu;
  std::function<void()> stop_server;  // guarded by stop_mu; empty while there is none
  bool stop_asked = false;            // guarded by stop_mu
  std::atomic<bool> stop_now{false};
  std::thread stopping;  // guarded by stop_mu: stops the agent, then the server
  auto stop = [&] {
    std::lock_guard<std::mutex> l(stop_mu);
    stop_asked = true;
    if (stop_server) stop_server();
  };
  std::optional<api::SignalWatch> signals;
  signals.emplace([&](int sig) {
    std::lock_guard<std::mutex> l(stop_mu);
    if (stopping.joinable()) {  // again: at once
      stop_now.store(true);
      stop_asked = true;
      if (stop_server) stop_server();
      return;
    }
    stopping = std::thread([&, sig] {
      agent_stopping.store(true);  // not started again
      const pid_t child_pid = agent_pid.load();
      if (child_pid > 0) {
        ServeLog().Info(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") +
                        ": stopping the agent first, so that it reports how its jobs ended "
                        "(again: stop at once)");
        kill(child_pid, SIGTERM);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
        while (!stop_now.load() && std::chrono::steady_clock::now() < deadline &&
               agent_pid.load() > 0) {  // the watch reaps it
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
      stop();
    });
  });
  ServeHooks hooks;
  hooks.on_stopper = [&](std::function<void()> f) {
    std::lock_guard<std::mutex> l(stop_mu);
    stop_server = std::move(f);
    if (stop_server && stop_asked) stop_server();
  };
  hooks.on_ready = [&](int port) {
    const std::string url = flags.Scheme() + "127.0.0.1:" + std::to_string(port);
    std::printf(
        "Tessera is up.\n  URL:          %s\n  admin token:  %s\n  user 'alice': %s\n  dashboard:  "
        "  %s/#token=%s\n",
        url.c_str(), shown[0].c_str(), shown[1].c_str(), url.c_str(),
        shown[0] == admin ? admin.c_str() : "ADMIN-TOKEN");
    std::printf("  config:       %s (%s)\n", config.c_str(),
                kept ? "kept as it was; remove it for the default"
                     : "the default; edit it and start again");
    if (tls) {
      std::printf("  certificate:  %s (self-signed for this host: browsers ask once)\n",
                  flags.tls_cert.c_str());
    }
    const std::string ca = tls ? " TESSERA_CA=" + flags.tls_cert : "";
    std::printf("Try:\n  export TESSERA_URL=%s TESSERA_TOKEN_FILE=%s/alice.token%s\n", url.c_str(),
                data.c_str(), ca.c_str());
    // A kept config has its own queues: the example's notebooks queue may not be one of them.
    std::printf("%s  tessera jobs\nCtrl-C stops it.\n",
                kept ? "  tessera queues    # your config's; then tessera submit --queue Q -- CMD\n"
                     : "  tessera submit --queue notebooks --gpu-memory 8GiB -- sh -c 'echo hello "
                       "from a share; echo $CUDA_VISIBLE_DEVICES'\n");
    std::fflush(stdout);
    // Everything the child needs is made before fork: the server is multi-threaded, and between
    // fork and exec the child may only make async-signal-safe calls (no allocation).
    std::error_code exe_error;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", exe_error).string();
    // The token by file, never on the command line (where ps shows it).
    const std::string token_file = data + "/agent.token";
    const std::string ca_file = tls ? flags.tls_cert : "";
    const std::string work = data + "/agent";
    const pid_t parent = getpid();
    // Forked from the watch's thread, which lives until the agent has gone for good: the agent
    // goes when `tessera up` goes, however it goes (SIGKILL, an OOM kill).
    auto start_agent = [=] {
      const pid_t child = fork();
      if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(0);  // gone already, before the line above
        execl(self.c_str(), self.c_str(), "agent", "--server", url.c_str(), "--token-file",
              token_file.c_str(), "--ca", ca_file.c_str(), "--node", "local", "--simulate",
              simulate.c_str(), "--work", work.c_str(), "--log-level", log_level.c_str(),
              "--log-format", log_format.c_str(), static_cast<char*>(nullptr));
        _exit(127);
      }
      return child;
    };
    agent_watch = std::thread([&agent_pid, &agent_stopping, start_agent] {
      agent_pid.store(start_agent());
      auto started = std::chrono::steady_clock::now();
      while (true) {
        const pid_t pid = agent_pid.load();
        int status = 0;
        if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
          agent_pid.store(-1);
          if (agent_stopping.load()) return;
          const std::string how = WIFSIGNALED(status)
                                      ? "killed by signal " + std::to_string(WTERMSIG(status))
                                      : "exit status " + std::to_string(WEXITSTATUS(status));
          // Not at once when it dies as soon as it starts (a broken host): once a second at most.
          const bool soon = std::chrono::steady_clock::now() - started < std::chrono::seconds(1);
          ServeLog().Error("the agent (pid " + std::to_string(pid) + ") ended, " + how +
                           ": starting it again" + (soon ? " in 1 s" : ""));
          if (soon) std::this_thread::sleep_for(std::chrono::seconds(1));
          if (agent_stopping.load()) return;
          agent_pid.store(start_agent());
          started = std::chrono::steady_clock::now();
        }
        if (pid <= 0 && agent_stopping.load()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  };
  int rc = Serve(flags, hooks);
  signals.reset();  // no more signals handled here: the stopping thread is the last
  if (stopping.joinable()) stopping.join();
  agent_stopping.store(true);
  if (const pid_t child_pid = agent_pid.load(); child_pid > 0) kill(child_pid, SIGTERM);
  if (agent_watch.joinable()) agent_watch.join();  // it reaps the agent, then ends
  return rc;
}

std::string DefaultCapLibrary() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const auto prefix = self.parent_path().parent_path();
  for (const auto& lib : {prefix / "capgpu" / "libtessera_capgpu.so",
                          prefix / TESSERA_PRIVATE_LIBDIR / "libtessera_capgpu.so"}) {
    if (std::filesystem::exists(lib, ec)) return lib.string();
  }
  return "";
}

// ---- command registration ----

// --log-level and --log-format, for the long-running commands.
struct LogFlags {
  std::string level = "info";
  std::string format = "text";
};

void AddLogFlags(CLI::App* cmd, LogFlags* f) {
  Choices(cmd->add_option("--log-level", f->level, "debug, info, warn or error (default info)"),
          "log level", {"debug", "info", "warn", "error"});
  Choices(cmd->add_option("--log-format", f->format,
                          "text or json: one JSON object per line (default text)"),
          "log format", {"text", "json"});
}

void ApplyLogFlags(const LogFlags& f) {
  log::Configure(*log::ParseLevel(f.level), *log::ParseFormat(f.format));
}

// The agent's sizes as given (made bytes of agent::AgentOptions by SizeBytes) and its log flags.
struct AgentFlags {
  std::string swap_ram, max_output, swap_disk;
  LogFlags log;
};

// A size flag such as 64GiB, from min_mib MiB up, into *bytes; false where it is none. A plain
// 0 needs no unit (--max-output 0: no limit).
bool SizeBytes(const std::string& text, MiB min_mib, int64_t* bytes) {
  Result<MiB> mib = text == "0" ? Result<MiB>(MiB{0}) : ParseMemoryMiB(text);
  if (!mib.ok() || *mib < min_mib || *mib > (INT64_MAX >> 20)) return false;
  *bytes = *mib * 1024 * 1024;
  return true;
}

void RegisterAgentCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("agent",
                                 "Run a node agent: register, heartbeat, run the jobs placed here");
  auto o = std::make_shared<agent::AgentOptions>();
  auto token_file = std::make_shared<std::string>();
  auto f = std::make_shared<AgentFlags>();
  cmd->add_option("--server", o->control_plane_url,
                  "control plane URL(s), http:// or https:// (default $TESSERA_URL)");
  // A token on the command line is readable by every process on the host (/proc/PID/cmdline),
  // jobs included: refused, with the way to pass it.
  auto token_flag = std::make_shared<std::string>();
  cmd->add_option("--token", *token_flag, "refused: use --token-file or $TESSERA_TOKEN_FILE")
      ->group("");
  cmd->add_option("--token-file", *token_file,
                  "file holding the agent token (default $TESSERA_TOKEN_FILE)");
  cmd->add_option("--ca", o->tls.ca_file,
                  "CA file that signed the server's certificate (default $TESSERA_CA)");
  cmd->add_option("--tls-cert", o->tls.cert_file,
                  "client certificate (PEM) for a server that asks for one");
  cmd->add_option("--tls-key", o->tls.key_file, "private key of --tls-cert");
  cmd->add_option("--node", o->node_name, "node name (default: host name)");
  cmd->add_option("--pool", o->pool, "scheduling pool the node joins (default: default)");
  cmd->add_option("--simulate", o->simulate,
                  "simulated devices where there is no GPU, e.g. 2xH100-80GB");
  cmd->add_option("--nvml-library", o->nvml_library,
                  "NVML library the agent loads (default libnvidia-ml.so.1)");
  cmd->add_option("--amd-smi-library", o->amdsmi_library,
                  "AMD SMI library loaded where NVML finds no device (default libamd_smi.so; "
                  "ROCm installs it in /opt/rocm/lib)");
  cmd->add_option("--work", o->work_dir, "directory for job output files");
  cmd->add_option("--capgpu", o->capgpu_preload, "libtessera_capgpu.so to preload into shares");
  cmd->add_option("--cgroup-root", o->cgroup_root, "cgroup v2 mount (\"\" disables cgroups)");
  cmd->add_option(
      "--mps-control", o->mps_control,
      "MPS control program for sm-sharing shares (nvidia-cuda-mps-control; \"\": none)");
  cmd->add_option(
      "--swap-ram", f->swap_ram,
      "host RAM per swapping share for swapped-out memory, e.g. 64GiB (default: unlimited)");
  cmd->add_option("--swap-dir", o->swap_dir,
                  "directory for swapped-out memory past --swap-ram (default: none)");
  cmd->add_option("--max-output", f->max_output,
                  "most output kept and uploaded per job on this node, e.g. 64MiB (default 64MiB; "
                  "0: no limit)");
  cmd->add_option(
      "--swap-disk", f->swap_disk,
      "space under --swap-dir the node offers swapped-out memory, e.g. 500GiB (default 0)");
  cmd->add_option("--swap-idle", o->swap_idle_ms,
                  "ms a share must be idle before it is swapped out ahead of need, to keep room "
                  "for the next wake (30000; under pressure 2000 or this, if shorter)");
  cmd->add_option("--swap-slice", o->swap_slice_ms,
                  "ms an active share may hold the device before it is swapped out for a share "
                  "waiting for memory when no idle one can make room (0, the default: the share "
                  "waits for an active one to go idle)")
      ->check(CLI::Range(0, 86'400'000));
  AddLogFlags(cmd, &f->log);
  cmd->callback([o, token_file, token_flag, f, &ctx] {
    ApplyLogFlags(f->log);
    auto bad = [&](const std::string& what) {
      std::cerr << "tessera agent: " << what << "\n";
      ctx.exit_code = kExitBadInput;
    };
    if (!token_flag->empty()) {
      return bad(
          "--token puts the token where every process on this host reads it "
          "(/proc/PID/cmdline); use --token-file FILE (mode 0600) or $TESSERA_TOKEN_FILE");
    }
    agent::AgentOptions opts = *o;
    if (!f->swap_ram.empty() && !SizeBytes(f->swap_ram, 1, &opts.swap_ram_bytes)) {
      return bad("--swap-ram: expected a size such as 64GiB, not '" + f->swap_ram + "'");
    }
    if (!f->max_output.empty() && !SizeBytes(f->max_output, 0, &opts.max_output_bytes)) {
      return bad("--max-output: expected a size such as 64MiB, not '" + f->max_output + "'");
    }
    if (!f->swap_disk.empty() &&
        (!SizeBytes(f->swap_disk, 0, &opts.swap_disk_bytes) || opts.swap_dir.empty())) {
      return bad("--swap-disk: expected a size such as 500GiB, with --swap-dir");
    }
    auto env = [](const char* name) {
      return std::getenv(name) ? std::string(std::getenv(name)) : std::string();
    };
    if (Status st = net::ResolveCredentials(*token_file, &opts.token, &opts.tls); !st.ok()) {
      return bad(st.message());
    }
    if (!env("TESSERA_URL").empty() && opts.control_plane_url == "http://127.0.0.1:8080") {
      opts.control_plane_url = env("TESSERA_URL");
    }
    if (opts.capgpu_preload.empty()) opts.capgpu_preload = DefaultCapLibrary();
    // A control plane that closes a connection mid-write (a restart, an early 4xx to an output
    // upload) is an error on that request, not a signal that ends the agent.
    signal(SIGPIPE, SIG_IGN);
    ctx.exit_code = agent::RunAgent(opts);
  });
}

void RegisterServeCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("serve", "Run the control plane");
  auto f = std::make_shared<ServeFlags>();
  auto check = std::make_shared<bool>(false);
  cmd->add_option("--config", f->config, "configuration (YAML)")->required();
  cmd->add_option("--data", f->data,
                  "data directory (SQLite store, job output); required unless --check-config");
  cmd->add_option("--listen", f->listen, "HOST:PORT to listen on (port 0: any)");
  cmd->add_option("--store", f->store, "postgresql://... to keep state in PostgreSQL");
  cmd->add_option(
      "--advertise", f->advertise,
      "the URL clients reach this server at, recorded while it leads (default http(s)://LISTEN)");
  cmd->add_option("--tls-cert", f->tls_cert, "PEM certificate chain: serve HTTPS (with --tls-key)");
  cmd->add_option("--tls-key", f->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-client-ca", f->tls_client_ca,
                  "PEM CA: every client must present a certificate it signed");
  cmd->add_option(
         "--max-connections", f->max_connections,
         "open connections at most (default: the open-file limit less 1024, at most 50000)")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  cmd->add_option(
         "--max-connections-per-peer", f->max_connections_per_peer,
         "open connections at most from one address, loopback not counted (default 512; 0: no cap)")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  cmd->add_flag(
      "--limit-loopback-peers", f->limit_loopback_peers,
      "count loopback addresses in --max-connections-per-peer too (local users not trusted)");
  cmd->add_option("--threads", f->threads,
                  "threads running the API's event loops (default: one per core; routes that may "
                  "wait run on a separate pool)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--check-config", *check,
                "check the configuration, say what it declares, and exit");
  auto log_flags = std::make_shared<LogFlags>();
  AddLogFlags(cmd, log_flags.get());
  cmd->callback([=, &ctx] {
    ApplyLogFlags(*log_flags);
    if (*check) {
      ctx.exit_code = CheckConfig(f->config);
    } else if (f->data.empty()) {
      std::cerr << "tessera serve: --data is required\n";
      ctx.exit_code = kExitBadInput;
    } else if (f->tls_cert.empty() != f->tls_key.empty() ||
               (!f->tls_client_ca.empty() && f->tls_cert.empty())) {
      std::cerr << "tessera serve: --tls-cert and --tls-key go together (and --tls-client-ca needs "
                   "them)\n";
      ctx.exit_code = kExitBadInput;
    } else {
      ctx.exit_code = Serve(*f, {});
    }
  });
}

void RegisterUpCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd =
      app.add_subcommand("up", "Control plane and an agent on this host, with an example config");
  auto data = std::make_shared<std::string>(".tessera");
  auto listen = std::make_shared<std::string>("127.0.0.1:8080");
  auto simulate = std::make_shared<std::string>("2xH100-80GB");
  auto tls = std::make_shared<bool>(true);
  cmd->add_option("--data", *data, "data directory (default .tessera)");
  cmd->add_option("--listen", *listen, "HOST:PORT (default 127.0.0.1:8080)");
  cmd->add_option("--simulate", *simulate,
                  "simulated devices where there is no GPU (default 2xH100-80GB)");
  // Two plain flags: one "--tls,!--no-tls" read "--tls,--no-tls{false}" in the help.
  cmd->add_flag_callback(
      "--tls", [tls] { *tls = true; },
      "HTTPS with a self-signed certificate made under DATA/tls (the default)");
  cmd->add_flag_callback(
      "--no-tls", [tls] { *tls = false; }, "plain HTTP instead of HTTPS");
  auto log_flags = std::make_shared<LogFlags>();
  AddLogFlags(cmd, log_flags.get());
  cmd->callback([=, &ctx] {
    ApplyLogFlags(*log_flags);  // the server's; the agent it starts is given the same flags
    ctx.exit_code = Up(*data, *listen, *simulate, log_flags->level, log_flags->format, *tls);
  });
}

}  // namespace

void RegisterEngineCommands(CLI::App& app, CommandContext& ctx) {
  RegisterAgentCommand(app, ctx);
  RegisterServeCommand(app, ctx);
  RegisterUpCommand(app, ctx);
  RegisterUserCommands(app, ctx);
  RegisterHistoryCommands(app, ctx);
}

}  // namespace tessera::cli
