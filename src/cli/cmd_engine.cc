// The engine's commands: `serve` (control plane), `up` (control plane + agent on this host),
// and the user commands that talk to a server (submit, jobs, job, cancel, queues, groups,
// nodes, events, whoami).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/agent.h"
#include "api/server.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/log.h"
#include "model/quantity.h"
#include "store/store.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// The server's own log lines (its request log is the component "http": net/http_server.h).
const log::Logger& ServeLog() {
  static const log::Logger logger("serve");
  return logger;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
  std::printf("%s: ok: %zu group(s), %zu pool(s), %zu profile(s), %zu queue(s), %zu identity(ies), placement %s\n",
              config_path.c_str(), c.policy.groups.size(), c.policy.pools.size(), c.policy.profiles.size(),
              c.policy.queues.size(), c.identities.size(), c.policy.placement.c_str());
  for (const api::QueueRoute& r : c.routes) {
    std::printf("  queue %s -> %s\n", r.queue.c_str(), r.backend.c_str());
  }
  return kExitOk;
}

// Waits as a standby until this server holds the store's leader lease (answering health and
// naming the leader meanwhile). False when stopped by a signal first.
bool AwaitLead(store::Store& store, const std::string& advertise, const std::string& host, int port) {
  auto lead = store.TryLead(advertise);
  if (!lead.ok()) {
    ServeLog().Error(lead.status().message());
    return false;
  }
  if (*lead) return true;
  api::ApiServerOptions options;
  options.stop_on_signals = true;
  api::StandbyServer standby(&store, options);
  auto bound = standby.Bind(host, port);
  if (!bound.ok()) {
    ServeLog().Error(bound.status().message());
    return false;
  }
  auto now = store.Leader();
  const std::string leader = now.ok() ? now->holder : "another server";
  ServeLog().Info("standby on http://" + host + ":" + std::to_string(*bound) + ": " + leader + " leads " +
                      store.Describe() + "; waiting for the lease",
                  {{"port", *bound}, {"leader", leader}});
  std::atomic<bool> done{false}, leading{false};
  std::thread poll([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      auto l = store.TryLead(advertise);
      if (l.ok() && *l) {
        leading.store(true);
        standby.Stop();
        return;
      }
    }
  });
  standby.Run();
  done.store(true);
  poll.join();
  return leading.load();
}

// Runs the control plane until SIGINT/SIGTERM. `on_ready(port)` runs once it listens.
int Serve(const std::string& config_path, const std::string& data, const std::string& listen,
          const std::string& store_url, const std::string& advertise_url, const std::function<void(int)>& on_ready) {
  auto config = api::LoadConfig(config_path);
  if (!config.ok()) {
    ServeLog().Error(config.status().message());
    return kExitBadInput;
  }
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
  const std::string url = store_url.empty() ? data + "/tessera.db" : store_url;
  auto store = store::Store::Open(url);
  if (!store.ok()) {
    ServeLog().Error("store: " + store.status().message());
    return kExitBadInput;
  }
  // Several servers may share one store: one leads, the others wait as standbys.
  const std::string advertise = advertise_url.empty() ? "http://" + listen : advertise_url;
  store::Store* lease = store->get();
  if (!AwaitLead(*lease, advertise, host, port)) return kExitOk;
  auto engine = api::Engine::Open(std::move(*config), std::move(*store), data, NowMs);
  if (!engine.ok()) {
    ServeLog().Error(engine.status().message());
    return 1;
  }
  api::ApiServerOptions options;
  options.stop_on_signals = true;  // SIGINT/SIGTERM end Run(), handled on the event loop
  options.lease_check = [lease] { return lease->CheckLease(); };  // owned by the engine, which outlives the server
  api::ApiServer server(engine->get(), options);
  auto bound = server.Bind(host, port);
  if (!bound.ok()) {
    ServeLog().Error(bound.status().message());
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  // The store as it describes itself: a PostgreSQL URL's password is not logged.
  ServeLog().Info("listening on http://" + host + ":" + std::to_string(*bound) + " (store " + lease->Describe() +
                      "), leading as " + advertise,
                  {{"port", *bound}, {"log_level", log::LevelName(log::CurrentLevel())}});
  if (on_ready) on_ready(*bound);
  server.Run();
  if (!server.deposed().ok()) return kExitDeposed;
  return kExitOk;
}

// The example configuration `tessera up` writes: queues for notebooks (shares), inference and
// training over the local simulated node.
std::string ExampleConfig(const std::string& admin, const std::string& user, const std::string& agent) {
  return R"(# Written by `tessera up`. Tokens are stored as SHA-256 hashes only.
cluster: local
heartbeat_timeout: 10s
cancel_grace: 5s
identities:
  - {name: admin, role: admin, token_sha256: )" + api::Sha256Hex(admin) + R"(}
  - {name: alice, role: user, groups: [research], token_sha256: )" + api::Sha256Hex(user) + R"(}
  - {name: local-agent, role: agent, token_sha256: )" + api::Sha256Hex(agent) + R"(}
groups:
  - name: research
    reservation: {gpu: 1}
    limit: {gpu: 3, cpu: 16, memory: 64GiB}
  - name: production
    reservation: {gpu: 1}
    limit: {gpu: 2}
grace: 10s
pools:
  - {name: default, forms: [whole, partition, share]}
profiles:
  - {name: notebook, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, max_gpu_memory: 16GiB, cpu: 500m, memory: 1GiB, forms: [share]}
  - {name: inference, gpus: 1, gpu_fraction: 0.1, gpu_memory: 20GiB, max_gpu_memory: 40GiB, cpu: 500m, memory: 2GiB, forms: [partition, share, whole]}
  - {name: training, gpus: 1, max_gpus: 2, cpu: 500m, memory: 2GiB, forms: [whole]}
class_forms:
  inference: [partition, share, whole]
queues:
  - {name: notebooks, profile: notebook, groups: [research], priority: 10, class: interactive, preemptible: true}
  - {name: inference, profile: inference, groups: [research, production], priority: 20, class: inference}
  - {name: training, profile: training, groups: [research], priority: 5, class: training, preemptible: true}
)";
}

std::string ReadOrMakeToken(const std::string& path) {
  std::ifstream in(path);
  std::string t;
  if (in && std::getline(in, t) && !t.empty()) return t;
  t = api::NewToken();
  std::ofstream out(path);
  out << t << "\n";
  chmod(path.c_str(), 0600);
  return t;
}

int Up(const std::string& data, const std::string& listen, const std::string& simulate, const std::string& log_level,
       const std::string& log_format) {
  std::error_code ec;
  std::filesystem::create_directories(data, ec);
  const std::string admin = ReadOrMakeToken(data + "/admin.token");
  const std::string user = ReadOrMakeToken(data + "/alice.token");
  const std::string agent = ReadOrMakeToken(data + "/agent.token");
  const std::string config = data + "/config.yaml";
  {
    std::ofstream out(config);
    out << ExampleConfig(admin, user, agent);
  }
  pid_t agent_pid = -1;
  auto on_ready = [&](int port) {
    const std::string url = "http://127.0.0.1:" + std::to_string(port);
    std::printf("Tessera is up.\n  URL:          %s\n  admin token:  %s\n  user 'alice': %s\n  dashboard:    %s/#token=%s\n",
                url.c_str(), admin.c_str(), user.c_str(), url.c_str(), admin.c_str());
    std::printf("Try:\n  export TESSERA_URL=%s TESSERA_TOKEN=%s\n"
                "  tessera submit --queue notebooks --gpu-memory 8GiB -- sh -c 'echo hello from a share; "
                "echo $CUDA_VISIBLE_DEVICES'\n  tessera jobs\nCtrl-C stops it.\n",
                url.c_str(), user.c_str());
    std::fflush(stdout);
    agent_pid = fork();
    if (agent_pid == 0) {
      std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
      execl(self.c_str(), self.c_str(), "agent", "--server", url.c_str(), "--token", agent.c_str(), "--node",
            "local", "--simulate", simulate.c_str(), "--work", (data + "/agent").c_str(), "--log-level",
            log_level.c_str(), "--log-format", log_format.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  };
  int rc = Serve(config, data, listen, "", "", on_ready);
  if (agent_pid > 0) {
    kill(agent_pid, SIGTERM);
    waitpid(agent_pid, nullptr, 0);
  }
  return rc;
}

// ---- user commands ----

struct ClientOptions {
  std::string url;
  std::string token;
  bool json = false;
};

void AddClientFlags(CLI::App* cmd, ClientOptions* o) {
  cmd->add_option("--url", o->url, "server URL (default: $TESSERA_URL)");
  cmd->add_option("--token", o->token, "bearer token (default: $TESSERA_TOKEN)");
  cmd->add_flag("--json", o->json, "print JSON for scripts");
}

bool Resolve(ClientOptions* o) {
  if (o->url.empty() && std::getenv("TESSERA_URL")) o->url = std::getenv("TESSERA_URL");
  if (o->token.empty() && std::getenv("TESSERA_TOKEN")) o->token = std::getenv("TESSERA_TOKEN");
  if (o->url.empty()) {
    std::cerr << "tessera: no server: set TESSERA_URL or pass --url\n";
    return false;
  }
  if (o->token.empty()) {
    std::cerr << "tessera: no token: set TESSERA_TOKEN or pass --token\n";
    return false;
  }
  return true;
}

// Calls the server; prints errors; returns the parsed body or a discarded JSON.
Json Call(const ClientOptions& o, const std::string& method, const std::string& path, int* exit_code,
          const std::string& body = "") {
  ClientReply r = HttpCall(o.url, o.token, method, path, body);
  if (r.status == 0 || r.status >= 400) {
    std::cerr << "tessera: " << r.error << (r.status ? " (HTTP " + std::to_string(r.status) + ")" : "") << "\n";
    *exit_code = r.status >= 400 && r.status < 500 ? kExitBadInput : 1;
    return Json(Json::value_t::discarded);
  }
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded()) j = r.body;
  return j;
}

std::string Age(int64_t since_ms) {
  int64_t s = (NowMs() - since_ms) / 1000;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  return std::to_string(s / 3600) + "h";
}


// "gpu-0:1" or "gpu-0:0[1g.10gb@6]", gang parts joined by "+".
std::string Placement(const Json& j) {
  if (!j.contains("placement")) return "-";
  const Json& p = j["placement"];
  std::string out, node;
  for (const auto& d : p["devices"]) {
    const std::string n = d.value("node", p["node"].get<std::string>());
    if (n != node) out += (out.empty() ? "" : "+") + n + ":";
    else out += ",";
    node = n;
    out += std::to_string(d["index"].get<int>());
    if (d.contains("partition")) out += "[" + d["partition"].get<std::string>() + "]";
  }
  return out.empty() ? p["node"].get<std::string>() : out;
}

std::vector<std::string> JobRow(const Json& j) {
  const Json& s = j["spec"];
  const std::string form = j.contains("placement") ? j["placement"].value("form", "") : s.value("form", "");
  const int gpus = s.value("gpus", 0);
  const MiB mem = s.value("gpu_memory_mib", int64_t{0});
  std::string need = gpus == 0               ? "cpu"
                     : form == "share"       ? "share " + FormatMiB(mem)
                     : form == "partition"   ? "partition " + FormatMiB(mem)
                     : form == "whole"       ? std::to_string(gpus) + " whole"
                                             : std::to_string(gpus) + " gpu" + (mem > 0 ? " " + FormatMiB(mem) : "");
  return {j["id"], j["state"], j["queue"], j["group"], need, Placement(j), Age(j["submit_ms"].get<int64_t>()),
          j.value("reason", "")};
}

// The cap library next to this binary: in a build tree (build/src/cli/tessera ->
// build/src/capgpu/libtessera_capgpu.so) or where the package installs it (/usr/bin/tessera ->
// /usr/lib/tessera/libtessera_capgpu.so); "" when it is in neither place.
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
  cmd->add_option("--log-level", f->level, "debug, info, warn or error (default info)")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  cmd->add_option("--log-format", f->format, "text or json: one JSON object per line (default text)")
      ->check(CLI::IsMember({"text", "json"}));
}

void ApplyLogFlags(const LogFlags& f) { log::Configure(*log::ParseLevel(f.level), *log::ParseFormat(f.format)); }

void RegisterAgentCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("agent", "Run a node agent: register, heartbeat, run the jobs placed here");
  auto o = std::make_shared<agent::AgentOptions>();
  cmd->add_option("--server", o->control_plane_url, "control plane URL (default $TESSERA_URL)");
  cmd->add_option("--token", o->token, "agent token (default $TESSERA_TOKEN)");
  cmd->add_option("--node", o->node_name, "node name (default: host name)");
  cmd->add_option("--pool", o->pool, "scheduling pool the node joins (default: default)");
  cmd->add_option("--simulate", o->simulate, "simulated devices where there is no GPU, e.g. 2xH100-80GB");
  cmd->add_option("--work", o->work_dir, "directory for job output files");
  cmd->add_option("--capgpu", o->capgpu_preload, "libtessera_capgpu.so to preload into shares");
  cmd->add_option("--cgroup-root", o->cgroup_root, "cgroup v2 mount (\"\" disables cgroups)");
  auto log_flags = std::make_shared<LogFlags>();
  AddLogFlags(cmd, log_flags.get());
  cmd->callback([o, log_flags, &ctx] {
    ApplyLogFlags(*log_flags);
    agent::AgentOptions opts = *o;
    if (opts.token.empty() && std::getenv("TESSERA_TOKEN")) opts.token = std::getenv("TESSERA_TOKEN");
    if (std::getenv("TESSERA_URL") && opts.control_plane_url == "http://127.0.0.1:8080") {
      opts.control_plane_url = std::getenv("TESSERA_URL");
    }
    if (opts.capgpu_preload.empty()) opts.capgpu_preload = DefaultCapLibrary();
    ctx.exit_code = agent::RunAgent(opts);
  });
}

void RegisterServeCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("serve", "Run the control plane");
  auto config = std::make_shared<std::string>();
  auto data = std::make_shared<std::string>();
  auto listen = std::make_shared<std::string>("127.0.0.1:8080");
  auto store = std::make_shared<std::string>();
  auto check = std::make_shared<bool>(false);
  auto advertise = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "configuration (YAML)")->required();
  cmd->add_option("--data", *data, "data directory (SQLite store, job output); required unless --check-config");
  cmd->add_option("--listen", *listen, "HOST:PORT to listen on (port 0: any)");
  cmd->add_option("--store", *store, "postgresql://... to keep state in PostgreSQL");
  cmd->add_option("--advertise", *advertise,
                  "the URL clients reach this server at, recorded while it leads (default http://LISTEN)");
  cmd->add_flag("--check-config", *check, "check the configuration, say what it declares, and exit");
  auto log_flags = std::make_shared<LogFlags>();
  AddLogFlags(cmd, log_flags.get());
  cmd->callback([=, &ctx] {
    ApplyLogFlags(*log_flags);
    if (*check) {
      ctx.exit_code = CheckConfig(*config);
    } else if (data->empty()) {
      std::cerr << "tessera serve: --data is required\n";
      ctx.exit_code = kExitBadInput;
    } else {
      ctx.exit_code = Serve(*config, *data, *listen, *store, *advertise, nullptr);
    }
  });
}

void RegisterUpCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("up", "Control plane and an agent on this host, with an example config");
  auto data = std::make_shared<std::string>(".tessera");
  auto listen = std::make_shared<std::string>("127.0.0.1:8080");
  auto simulate = std::make_shared<std::string>("2xH100-80GB");
  cmd->add_option("--data", *data, "data directory (default .tessera)");
  cmd->add_option("--listen", *listen, "HOST:PORT (default 127.0.0.1:8080)");
  cmd->add_option("--simulate", *simulate, "simulated devices where there is no GPU (default 2xH100-80GB)");
  auto log_flags = std::make_shared<LogFlags>();
  AddLogFlags(cmd, log_flags.get());
  cmd->callback([=, &ctx] {
    ApplyLogFlags(*log_flags);  // the server's; the agent it starts is given the same flags
    ctx.exit_code = Up(*data, *listen, *simulate, log_flags->level, log_flags->format);
  });
}

struct SubmitOptions {
  ClientOptions client;
  std::string queue;
  std::string gpu_memory;
  std::string cpu;
  std::string memory;
  std::string job_class;
  std::string form;
  std::string name;
  int gpus = -1;
  std::string walltime;
  std::string gpu_fraction;
  std::vector<std::string> env;
  std::vector<std::string> command;
};

// The POST /v1/jobs body; false (after printing why) on a malformed --env.
bool SubmitBody(const SubmitOptions& s, Json* body) {
  *body = {{"queue", s.queue}, {"command", s.command}};
  if (s.gpus >= 0) (*body)["gpus"] = s.gpus;
  if (!s.gpu_memory.empty()) (*body)["gpu_memory"] = s.gpu_memory;
  if (!s.cpu.empty()) (*body)["cpu"] = s.cpu;
  if (!s.memory.empty()) (*body)["memory"] = s.memory;
  if (!s.job_class.empty()) (*body)["class"] = s.job_class;
  if (!s.form.empty()) (*body)["form"] = s.form;
  if (!s.gpu_fraction.empty()) (*body)["gpu_fraction"] = s.gpu_fraction;
  if (!s.walltime.empty()) (*body)["walltime"] = s.walltime;
  if (!s.name.empty()) (*body)["name"] = s.name;
  if (!s.env.empty()) {
    Json e = Json::object();
    for (const auto& kv : s.env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "tessera submit: --env wants NAME=VALUE, got '" << kv << "'\n";
        return false;
      }
      e[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    (*body)["env"] = e;
  }
  return true;
}

void Submit(const SubmitOptions& s, int* exit_code) {
  ClientOptions co = s.client;
  if (!Resolve(&co)) {
    *exit_code = kExitBadInput;
    return;
  }
  Json body;
  if (!SubmitBody(s, &body)) {
    *exit_code = kExitBadInput;
    return;
  }
  Json j = Call(co, "POST", "/v1/jobs", exit_code, body.dump());
  if (j.is_discarded()) return;
  if (co.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << j["id"].get<std::string>() << " " << j["state"].get<std::string>() << "\n";
  }
}

void RegisterSubmitCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("submit", "Submit a job: tessera submit --queue Q [needs] -- COMMAND...");
  auto o = std::make_shared<SubmitOptions>();
  AddClientFlags(cmd, &o->client);
  cmd->add_option("--queue", o->queue, "execution queue")->required();
  cmd->add_option("--gpus", o->gpus, "number of GPUs");
  cmd->add_option("--gpu-memory", o->gpu_memory, "GPU memory, e.g. 8GiB (a share's cap)");
  cmd->add_option("--cpu", o->cpu, "CPU cores, e.g. 2 or 500m");
  cmd->add_option("--memory", o->memory, "host memory, e.g. 4GiB");
  cmd->add_option("--class", o->job_class, "training, inference, interactive, ci, batch");
  cmd->add_option("--gpu-fraction", o->gpu_fraction, "compute share of one GPU, e.g. 0.25");
  cmd->add_option("--form", o->form, "whole, partition or share (if the queue's policy allows it)");
  cmd->add_option("--walltime", o->walltime, "declared run time, e.g. 2h (lets it backfill)");
  cmd->add_option("--name", o->name, "a name for people");
  cmd->add_option("--env", o->env, "NAME=VALUE for the job's environment (repeatable)");
  cmd->add_option("command", o->command, "the command after --")->required();
  cmd->callback([o, &ctx] { Submit(*o, &ctx.exit_code); });
}

// ---- jobs / job / cancel / queues / groups / nodes / whoami ----

void ListJobs(const ClientOptions& co, const std::string& state, int* exit_code) {
  Json j = Call(co, "GET", "/v1/jobs" + (state.empty() ? "" : "?state=" + state), exit_code);
  if (j.is_discarded()) return;
  if (co.json) return void(std::cout << j.dump(2) << "\n");
  std::vector<std::vector<std::string>> rows = {
      {"ID", "STATE", "QUEUE", "GROUP", "NEEDS", "PLACEMENT", "AGE", "REASON"}};
  for (const auto& job : j["jobs"]) rows.push_back(JobRow(job));
  PrintTable(rows);
}

void ShowJob(const ClientOptions& co, const std::string& id, int* exit_code) {
  Json j = Call(co, "GET", "/v1/jobs/" + id, exit_code);
  if (j.is_discarded()) return;
  if (co.json) return void(std::cout << j.dump(2) << "\n");
  PrintTable({{"ID", "STATE", "QUEUE", "GROUP", "NEEDS", "PLACEMENT", "AGE", "REASON"}, JobRow(j)});
  if (j.contains("exit_code")) std::cout << "exit code: " << j["exit_code"] << "\n";
  ClientReply out = HttpCall(co.url, co.token, "GET", "/v1/jobs/" + id + "/output");
  if (out.status == 200 && !out.body.empty()) std::cout << "--- output ---\n" << out.body;
}

void CancelJob(const ClientOptions& co, const std::string& id, int* exit_code) {
  Json j = Call(co, "POST", "/v1/jobs/" + id + "/cancel", exit_code);
  if (j.is_discarded()) return;
  if (co.json) return void(std::cout << j.dump(2) << "\n");
  std::cout << j["id"].get<std::string>() << " " << j["state"].get<std::string>() << "\n";
}

void ListQueues(const ClientOptions& co, const std::string&, int* exit_code) {
  Json j = Call(co, "GET", "/v1/queues", exit_code);
  if (j.is_discarded()) return;
  if (co.json) return void(std::cout << j.dump(2) << "\n");
  std::vector<std::vector<std::string>> rows = {{"QUEUE", "PRIORITY", "CLASS", "FORMS", "GROUPS", "PREEMPTIBLE"}};
  for (const auto& q : j["queues"]) {
    std::string forms, groups;
    for (const auto& f : q["forms"]) forms += (forms.empty() ? "" : ",") + f.get<std::string>();
    for (const auto& g : q["groups"]) groups += (groups.empty() ? "" : ",") + g.get<std::string>();
    rows.push_back({q["name"], std::to_string(q["priority"].get<int>()), q["class"], forms, groups,
                    q["preemptible"].get<bool>() ? "yes" : "no"});
  }
  PrintTable(rows);
}

void ListGroups(const ClientOptions& co, const std::string&, int* exit_code) {
  Json j = Call(co, "GET", "/v1/groups", exit_code);
  if (j.is_discarded()) return;
  if (co.json) return void(std::cout << j.dump(2) << "\n");
  std::vector<std::vector<std::string>> rows = {{"GROUP", "GPU USED", "RESERVED", "LIMIT", "CPU USED", "CPU LIMIT"}};
  for (const auto& g : j["groups"]) {
    auto lim = [](int64_t v) { return v == 0 ? std::string("-") : FormatMilli(v); };
    rows.push_back({g["name"], FormatMilli(g["usage"]["gpu_milli"]), FormatMilli(g["reservation"]["gpu_milli"]),
                    lim(g["limit"]["gpu_milli"]), FormatMilli(g["usage"]["cpu_milli"]), lim(g["limit"]["cpu_milli"])});
  }
  PrintTable(rows);
}

// "job(form[ partition][,identity])" per holder, space-separated.
std::string DeviceHolders(const Json& d) {
  std::string holders;
  for (const auto& h : d["holders"]) {
    holders += (holders.empty() ? "" : " ") + h["job"].get<std::string>() + "(" + h["form"].get<std::string>() +
               (h.contains("partition") ? " " + h["partition"].get<std::string>() : "") +
               (h.contains("identity") ? "," + h["identity"].get<std::string>() : "") + ")";
  }
  return holders;
}

// The partition layout: MIG instances (free ones too), the AMD mode, or "whole".
std::string DeviceLayout(const Json& d) {
  std::string layout;
  for (const auto& p : d.value("partitions", Json::array())) {
    layout += (layout.empty() ? "" : ",") + p["name"].get<std::string>();
  }
  if (layout.empty()) layout = d.value("mig", false) ? "MIG (empty)" : d.value("amd_mode", "");
  if (layout.empty()) layout = "-";
  if (d.value("draining", false)) layout += " draining";
  return layout;
}

void ListNodes(const ClientOptions& co, const std::string&, int* exit_code) {
  Json j = Call(co, "GET", "/v1/nodes", exit_code);
  if (j.is_discarded()) return;
  if (co.json) return void(std::cout << j.dump(2) << "\n");
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "STATE", "DEVICE", "MODEL", "LAYOUT", "USED", "MEMORY USED", "HOLDERS"}};
  for (const auto& n : j["nodes"]) {
    std::string state = n["state"].get<std::string>() + (n["simulated"].get<bool>() ? " (simulated)" : "");
    if (n["devices"].empty()) rows.push_back({n["name"], state, "-", "-", "-", "-", "-", "-"});
    for (const auto& d : n["devices"]) {
      std::string holders = DeviceHolders(d);
      std::string layout = DeviceLayout(d);
      rows.push_back({n["name"], state, std::to_string(d["index"].get<int>()),
                      d["model"].get<std::string>() + (d["simulated"].get<bool>() ? "*" : ""), layout,
                      FormatMilli(d["gpu_milli_used"]),
                      FormatMiB(d["gpu_memory_mib_used"]) + "/" + FormatMiB(d["memory_mib"]),
                      holders.empty() ? "-" : holders});
    }
  }
  PrintTable(rows);
}

void WhoAmI(const ClientOptions& co, const std::string&, int* exit_code) {
  Json j = Call(co, "GET", "/v1/whoami", exit_code);
  if (j.is_discarded()) return;
  std::cout << (co.json ? j.dump(2) : j["name"].get<std::string>() + " (" + j["role"].get<std::string>() + ")") << "\n";
}

using ClientRun = void (*)(const ClientOptions& co, const std::string& arg, int* exit_code);

// A client command with at most one string argument, which `add_arg` declares.
void RegisterClientCommand(CLI::App& app, CommandContext& ctx, const char* name, const char* help,
                           void (*add_arg)(CLI::App*, std::string*), ClientRun run) {
  auto* cmd = app.add_subcommand(name, help);
  auto o = std::make_shared<ClientOptions>();
  AddClientFlags(cmd, o.get());
  auto arg = std::make_shared<std::string>();
  add_arg(cmd, arg.get());
  cmd->callback([o, arg, &ctx, run] {
    ClientOptions co = *o;
    if (!Resolve(&co)) {
      ctx.exit_code = kExitBadInput;
      return;
    }
    run(co, *arg, &ctx.exit_code);
  });
}

void RegisterClientCommands(CLI::App& app, CommandContext& ctx) {
  auto no_arg = [](CLI::App*, std::string*) {};
  auto id_arg = [](CLI::App* c, std::string* a) { c->add_option("id", *a)->required(); };
  RegisterClientCommand(app, ctx, "jobs", "List jobs (of your groups)", [](CLI::App* c, std::string* a) {
    c->add_option("--state", *a, "only jobs in this state");
  }, ListJobs);
  RegisterClientCommand(app, ctx, "job", "Show one job and its output", id_arg, ShowJob);
  RegisterClientCommand(app, ctx, "cancel", "Cancel a job", id_arg, CancelJob);
  RegisterClientCommand(app, ctx, "queues", "List the queues you may use", no_arg, ListQueues);
  RegisterClientCommand(app, ctx, "groups", "Groups with reservation, limit and usage", no_arg, ListGroups);
  RegisterClientCommand(app, ctx, "nodes", "Nodes, devices, and who holds them", no_arg, ListNodes);
  RegisterClientCommand(app, ctx, "whoami", "Who the token belongs to", no_arg, WhoAmI);
}

// ---- events ----

struct EventsOptions {
  ClientOptions client;
  bool follow = false;
  std::string kind;
  int64_t after = 0;
};

void PrintEvent(const Json& e, bool json) {
  if (json) {
    std::cout << e.dump() << "\n";
  } else {
    std::cout << e["seq"] << "  " << e["kind"].get<std::string>() << "  " << e["subject"].get<std::string>()
              << "  by " << e["actor"].get<std::string>()
              << (e["reason"].get<std::string>().empty() ? "" : "  (" + e["reason"].get<std::string>() + ")") << "\n";
  }
}

void Events(const EventsOptions& o, int* exit_code) {
  ClientOptions co = o.client;
  if (!Resolve(&co)) {
    *exit_code = kExitBadInput;
    return;
  }
  int64_t cursor = o.after;
  do {
    Json j = Call(co, "GET", "/v1/events?after=" + std::to_string(cursor) + "&limit=500" +
                                 (o.kind.empty() ? "" : "&kind=" + o.kind),
                  exit_code);
    if (j.is_discarded()) return;
    for (const auto& e : j["events"]) PrintEvent(e, co.json);
    std::cout.flush();
    bool more = j["next"].get<int64_t>() > cursor;
    cursor = j["next"].get<int64_t>();
    if (!o.follow && !more) break;
    if (!more) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } while (true);
}

void RegisterEventsCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand("events", "The event log (--follow to keep watching)");
  auto o = std::make_shared<EventsOptions>();
  AddClientFlags(cmd, &o->client);
  cmd->add_flag("--follow,-f", o->follow, "keep printing new events");
  cmd->add_option("--kind", o->kind, "only events whose kind starts with this (e.g. job.)");
  cmd->add_option("--after", o->after, "only events after this sequence number");
  cmd->callback([o, &ctx] { Events(*o, &ctx.exit_code); });
}

}  // namespace

void RegisterEngineCommands(CLI::App& app, CommandContext& ctx) {
  RegisterAgentCommand(app, ctx);
  RegisterServeCommand(app, ctx);
  RegisterUpCommand(app, ctx);
  RegisterSubmitCommand(app, ctx);
  RegisterClientCommands(app, ctx);
  RegisterEventsCommand(app, ctx);
}

}  // namespace tessera::cli
