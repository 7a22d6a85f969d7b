// The user commands that talk to a server: submit, jobs, job, cancel, queues, groups, nodes,
// events, whoami (TESSERA_URL may list several servers: cli/client.h).
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/choices.h"
#include "cli/client.h"
#include "cli/cluster_views.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/text.h"
#include "model/duration.h"
#include "model/job_state.h"
#include "model/quantity.h"
#include "sched/quota/policy_model.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// ---- user commands ----

std::vector<std::string> ClassNames() {
  std::vector<std::string> out;
  for (int c = 0; c < quota::kClassCount; ++c)
    out.push_back(quota::WorkloadClassName(static_cast<quota::WorkloadClass>(c)));
  return out;
}

// The state names of model/job_state.h, the only ones a job has.
std::vector<std::string> JobStateNames() {
  std::vector<std::string> out;
  for (JobState st : kJobStates) out.push_back(JobStateName(st));
  return out;
}

const std::vector<std::string> kJobColumns = {"ID",        "NAME",    "STATE",    "QUEUE",
                                              "GROUP",     "NEEDS",   "GPUS",     "PLACEMENT",
                                              "SUBMITTED", "STARTED", "DURATION", "REASON"};

// A time of the job's for people: "14:32 UTC (5m ago)" (HumanTimes's clock); "-" when absent.
std::string JobTime(const Json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_number_integer()) return "-";
  return HumanTimes("t=" + std::to_string(j[field].get<int64_t>() / 1000) + "s", NowMs());
}

// How long it has run (to its end, or now), or waited when it never started: "1h30m".
std::string JobDuration(const Json& j) {
  if (!j.contains("start_ms")) return "-";
  const int64_t end = j.contains("end_ms") ? j["end_ms"].get<int64_t>() : NowMs();
  return HumanDuration((end - j["start_ms"].get<int64_t>()) / 1000);
}

// GPUs held (placed: "0.5", "2"), else asked for.
std::string JobGpus(const Json& j) {
  if (j.contains("placement") && j["placement"].value("gpu_milli", Json()).is_number_integer())
    return FormatMilli(j["placement"]["gpu_milli"].get<int64_t>());
  const Json& s = j["spec"];
  const int gpus = s.value("gpus", 0);
  const int64_t milli = s.value("gpu_milli", int64_t{1000});
  return gpus == 1 && milli < 1000 ? FormatMilli(milli) : std::to_string(gpus);
}

// A waiting job's reason, and when it is expected to start (the server's forecast).
std::string JobReason(const Json& j) {
  std::string reason = HumanTimes(j.value("reason", ""), NowMs());
  const Json f = j.value("forecast", Json::object());
  if (f.is_object() && f.contains("position")) {
    reason += std::string(reason.empty() ? "" : "; ") + "position " +
              std::to_string(f["position"].get<int>());
    if (f.contains("expected_start_ms"))
      reason += ", expected to start " + JobTime(f, "expected_start_ms");
  }
  return reason;
}

// "gpu-0:1" or "gpu-0:0[1g.10gb@6]", gang parts joined by "+".
std::string Placement(const Json& j) {
  if (!j.contains("placement")) return "-";
  const Json& p = j["placement"];
  std::string out, node;
  for (const auto& d : p["devices"]) {
    const std::string n = d.value("node", p["node"].get<std::string>());
    if (n != node)
      out += (out.empty() ? "" : "+") + n + ":";
    else
      out += ",";
    node = n;
    out += std::to_string(d["index"].get<int>());
    if (d.contains("partition")) out += "[" + d["partition"].get<std::string>() + "]";
  }
  return out.empty() ? p["node"].get<std::string>() : out;
}

std::vector<std::string> JobRow(const Json& j) {
  const Json& s = j["spec"];
  const std::string form =
      j.contains("placement") ? j["placement"].value("form", "") : s.value("form", "");
  const int gpus = s.value("gpus", 0);
  const MiB mem = s.value("gpu_memory_mib", int64_t{0});
  // Asked for, before a form is chosen: "0.1 gpu 8GiB" for a fraction of one, as JobGpus.
  const std::string asked = gpus == 1 && s.value("gpu_milli", int64_t{1000}) < 1000
                                ? FormatMilli(s["gpu_milli"].get<int64_t>())
                                : std::to_string(gpus);
  std::string need = gpus == 0             ? "cpu"
                     : form == "share"     ? "share " + FormatMiB(mem)
                     : form == "partition" ? "partition " + FormatMiB(mem)
                     : form == "whole"     ? std::to_string(gpus) + " whole"
                                           : asked + " gpu" + (mem > 0 ? " " + FormatMiB(mem) : "");
  const std::string name = s.value("name", "");
  return {j["id"],
          name.empty() ? "-" : name,
          j["state"],
          j["queue"],
          j["group"],
          need,
          JobGpus(j),
          Placement(j),
          JobTime(j, "submit_ms"),
          JobTime(j, "start_ms"),
          JobDuration(j),
          JobReason(j)};
}

struct SubmitOptions {
  ClientOptions client;
  std::string queue;
  std::string group;  // "": the caller's first group the queue takes
  std::string gpu_memory;
  std::string cpu;
  std::string memory;
  std::string job_class;
  std::string form;
  std::string name;
  std::optional<int> gpus;
  std::optional<std::string> walltime;  // given empty, it is refused like any bad duration
  std::string gpu_fraction;
  std::vector<std::string> env;
  std::vector<std::string> command;
};

// The POST /v1/jobs body; false (after printing why) on a malformed --env, quantity or walltime.
// Quantities and the walltime are read here with the server's own parsers (model/quantity.h, the
// duration grammar of model/duration.h) so that a mistake is named before any call.
bool SubmitBody(const SubmitOptions& s, Json* body) {
  if (s.gpus && *s.gpus < 0) {
    std::cerr << "tessera submit: --gpus: '" << *s.gpus
              << "' is negative (a number of GPUs is 0 or more)\n";
    return false;
  }
  struct Flag {
    const char* name;
    const std::string* text;
    bool memory;
  };
  for (const Flag& f :
       {Flag{"--gpu-memory", &s.gpu_memory, true}, Flag{"--memory", &s.memory, true},
        Flag{"--cpu", &s.cpu, false}, Flag{"--gpu-fraction", &s.gpu_fraction, false}}) {
    if (f.text->empty()) continue;
    Status st = f.memory ? ParseMemoryMiB(*f.text).status() : ParseMilli(*f.text).status();
    if (!st.ok()) {
      std::cerr << "tessera submit: " << f.name << ": " << st.message() << "\n";
      return false;
    }
  }
  if (s.walltime) {
    if (Status st = ParseDurationSeconds(*s.walltime).status(); !st.ok()) {
      std::cerr << "tessera submit: --walltime: " << st.message() << "\n";
      return false;
    }
  }
  // The body is JSON, whose strings are UTF-8 text: bytes that are not (a Latin-1 file name) are
  // named here, before any call, rather than failing the body's rendering.
  const auto text = [](const std::string& what, const std::string& value) {
    if (IsValidUtf8(value)) return true;
    std::cerr << "tessera submit: " << what << " ('" << EscapeForTerminal(value)
              << "') is not UTF-8 text, and the API carries only text\n";
    return false;
  };
  if (!text("--queue", s.queue) || !text("--name", s.name) || !text("--group", s.group))
    return false;
  for (size_t i = 0; i < s.command.size(); ++i) {
    if (!text("the command's argument " + std::to_string(i + 1), s.command[i])) return false;
  }
  *body = {{"queue", s.queue}, {"command", s.command}};
  if (!s.group.empty()) (*body)["group"] = s.group;
  if (s.gpus) (*body)["gpus"] = *s.gpus;
  if (!s.gpu_memory.empty()) (*body)["gpu_memory"] = s.gpu_memory;
  if (!s.cpu.empty()) (*body)["cpu"] = s.cpu;
  if (!s.memory.empty()) (*body)["memory"] = s.memory;
  if (!s.job_class.empty()) (*body)["class"] = s.job_class;
  if (!s.form.empty()) (*body)["form"] = s.form;
  if (!s.gpu_fraction.empty()) (*body)["gpu_fraction"] = s.gpu_fraction;
  if (s.walltime) (*body)["walltime"] = *s.walltime;
  if (!s.name.empty()) (*body)["name"] = s.name;
  if (!s.env.empty()) {
    Json e = Json::object();
    for (const auto& kv : s.env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "tessera submit: --env wants NAME=VALUE, got '" << kv << "'\n";
        return false;
      }
      if (!text("--env " + EscapeForTerminal(kv.substr(0, eq)), kv)) return false;
      e[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    (*body)["env"] = e;
  }
  return true;
}

void Submit(const SubmitOptions& s, int* exit_code) {
  Json body;
  if (!SubmitBody(s, &body)) {
    *exit_code = kExitBadInput;
    return;
  }
  ClientOptions co = s.client;
  if (!Resolve(&co)) {
    *exit_code = kExitBadInput;
    return;
  }
  // One key per invocation, sent again on its retries: a submission whose answer was lost (a
  // server killed, a failover) is made once.
  CallOptions once;
  once.headers.emplace_back("Idempotency-Key", NewIdempotencyKey());
  once.retry_for_ms = 30000;
  Json j = Call(co, "POST", "/v1/jobs", exit_code, body.dump(), once);
  if (j.is_discarded()) return;
  if (co.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << j["id"].get<std::string>() << " " << j["state"].get<std::string>() << "\n";
  }
}

// Given empty, a value was taken as not given (`--gpu-memory ""` took the profile's).
const CLI::Validator kNotEmpty(
    [](std::string& v) { return v.empty() ? std::string("the value is empty") : std::string(); },
    "", "not empty");

void RegisterSubmitCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd =
      app.add_subcommand("submit", "Submit a job: tessera submit --queue Q [needs] -- COMMAND...");
  auto o = std::make_shared<SubmitOptions>();
  AddClientFlags(cmd, &o->client);
  cmd->add_option("--queue", o->queue, "execution queue")->required();
  cmd->add_option("--group", o->group,
                  "the group it runs in and is charged to (default: your first the queue takes)")
      ->check(kNotEmpty);
  cmd->add_option("--gpus", o->gpus, "number of GPUs");
  cmd->add_option("--gpu-memory", o->gpu_memory, "GPU memory, e.g. 8GiB (a share's cap)")
      ->check(kNotEmpty);
  cmd->add_option("--cpu", o->cpu, "CPU cores, e.g. 2 or 500m")->check(kNotEmpty);
  cmd->add_option("--memory", o->memory, "host memory, e.g. 4GiB")->check(kNotEmpty);
  Choices(cmd->add_option("--class", o->job_class, "training, inference, interactive, ci, batch")
              ->check(kNotEmpty),
          "class", ClassNames());
  cmd->add_option("--gpu-fraction", o->gpu_fraction, "compute share of one GPU, e.g. 0.25")
      ->check(kNotEmpty);
  Choices(
      cmd->add_option("--form", o->form,
                      "whole, partition or share (if the queue's policy allows it)")
          ->check(kNotEmpty),
      "form",
      {AllocationFormName(AllocationForm::kWhole), AllocationFormName(AllocationForm::kPartition),
       AllocationFormName(AllocationForm::kShare)});
  cmd->add_option("--walltime", o->walltime,
                  "declared run time, e.g. 2h: it may backfill, and is stopped then");
  cmd->add_option("--name", o->name, "a name for people")->check(kNotEmpty);
  // One value a use, repeated: a list would take `--` as its own end, and the job's flags as
  // tessera's.
  cmd->add_option("--env", o->env, "NAME=VALUE for the job's environment (repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("command", o->command, "the command after --")->required();
  cmd->callback([o, &ctx] { Submit(*o, &ctx.exit_code); });
}

// ---- jobs / job / cancel / queues / groups / nodes / whoami ----

// A client command's arguments: a flag's text (jobs --state) or job ids (job, cancel).
struct Args {
  std::string text;
  std::vector<std::string> ids;
  int limit = 100;  // `jobs --limit`
};

// A job id as typed: an empty one names no job (it would ask for the list).
const CLI::Validator kJobId(
    [](std::string& id) { return id.empty() ? std::string("'' is not a job id") : std::string(); },
    "ID");

void ListJobs(const ClientOptions& co, const Args& args, int* exit_code) {
  const std::string& state = args.text;  // one of JobStateNames() (checked as it is parsed)
  CallAndPrint(
      co, "GET",
      "/v1/jobs?limit=" + std::to_string(args.limit) + (state.empty() ? "" : "&state=" + state),
      exit_code, [&](Json& j) {
        std::vector<std::vector<std::string>> rows = {kJobColumns};
        for (const auto& job : j["jobs"]) rows.push_back(JobRow(job));
        PrintTable(rows);
        // A full page may leave older jobs out: it showed the newest 100 without a word.
        if (j["jobs"].size() >= static_cast<size_t>(args.limit) && args.limit > 0) {
          std::cerr << "(the newest " << args.limit
                    << " jobs; older ones may be left out: --limit N, up to 10000)\n";
        }
      });
}

void ShowJob(const ClientOptions& co, const Args& args, int* exit_code) {
  const std::string& id = args.ids.front();
  CallAndPrint(co, "GET", "/v1/jobs/" + PercentEncoded(id), exit_code, [&](Json& j) {
    PrintTable({kJobColumns, JobRow(j)});
    if (j.contains("exit_code")) std::cout << "exit code: " << j["exit_code"] << "\n";
    if (j.contains("stop_at_ms"))  // when it will be stopped: only the JSON said (a new user)
      std::cout << "stops at: " << JobTime(j, "stop_at_ms")
                << " (its walltime or its queue's max_runtime, whichever comes first)\n";
    // The isolation its grants give it (issue 38): hardware, driver, mps, preload or none.
    if (j.contains("placement") && j["placement"].contains("isolation"))
      std::cout << "isolation: " << j["placement"]["isolation"].get<std::string>() << "\n";
    // A share's compute mode: "compute: sm-sharing 40%" or "compute: time-slicing".
    if (j.contains("placement") && !j["placement"].value("devices", Json::array()).empty()) {
      const Json& d0 = j["placement"]["devices"][0];
      if (d0.contains("compute") && d0["compute"].is_object()) {
        std::cout << "compute: " << d0["compute"].value("mode", "");
        if (d0["compute"].contains("percent")) std::cout << " " << d0["compute"]["percent"] << "%";
        std::cout << "\n";
      }
    }
    // A queue over several backends (issue 39): where it went and why, each backend's predicted
    // start when it went, and its actual start, side by side.
    if (j.contains("dispatch") && j["dispatch"].is_object()) {
      const Json& d = j["dispatch"];
      std::cout << "backend: " << d.value("backend", "") << ", " << d.value("reason", "") << "\n";
      for (const auto& f : d.value("forecasts", Json::array())) {
        const bool never = !f.contains("predicted_start_ms") || f["predicted_start_ms"].is_null();
        std::cout << "  " << f.value("backend", "") << ": predicted start "
                  << (never ? "never" : JobTime(f, "predicted_start_ms"))
                  << (f.contains("note") ? " (" + f.value("note", "") + ")" : "") << "\n";
      }
      std::cout << "  started: " << JobTime(d, "started_ms") << "\n";
    }
    // Range by range (4 MiB at most); to a terminal with controls escaped (the red team).
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    std::string carry;  // a UTF-8 sequence cut between two ranges
    for (int64_t offset = 0;;) {
      ClientReply out =
          HttpCall(CallOptions{co.url, co.token, co.tls, {}, 0}, "GET",
                   "/v1/jobs/" + PercentEncoded(id) + "/output?offset=" + std::to_string(offset));
      if ((out.status != 200 && out.status != 206) || out.body.empty()) break;
      if (offset == 0) std::cout << "--- output ---\n";
      std::cout << (terminal ? EscapeOutputForTerminal(out.body, &carry) : out.body);
      offset += static_cast<int64_t>(out.body.size());
      if (out.status == 200) break;
    }
    if (terminal) std::cout << EscapeOutputForTerminal("", &carry);
  });
}

// Each id in turn, one line each: what happened to it ("cancelled"; "cancelling (running)": its
// processes are being stopped; "already ended (succeeded)"), or why not (on stderr). A job that
// had already ended is no failure: it is not running, which is what was asked.
void CancelJobs(const ClientOptions& co, const Args& args, int* exit_code) {
  // A cancel is safe to repeat: one that a deposed leader failed goes on to the next server.
  CallOptions call{co.url, co.token, co.tls, {}, 30000, /*repeatable=*/true};
  Json all = Json::array();
  for (const std::string& id : args.ids) {
    ClientReply r = HttpCall(call, "POST", "/v1/jobs/" + PercentEncoded(id) + "/cancel");
    Json j = Json::parse(r.body, nullptr, false);
    std::string outcome;
    if (r.status == 409) {  // already ended: as it ended
      ClientReply now = HttpCall(call, "GET", "/v1/jobs/" + PercentEncoded(id));
      j = Json::parse(now.body, nullptr, false);
      if (now.status != 200 || !j.is_object()) j = {{"id", id}};
      outcome = "already ended" + (j.contains("state") ? " (" + j.value("state", "") + ")" : "");
    } else if (r.status != 200 || !j.is_object()) {
      if (r.status == 0) call.retry_for_ms = 0;  // waited once for the servers: not once per id
      std::cerr << "tessera cancel: " << EscapeForTerminal(id) << ": " << r.error
                << (r.status ? " (HTTP " + std::to_string(r.status) + ")" : "") << "\n";
      *exit_code = r.status >= 400 && r.status < 500 ? kExitBadInput : 1;
      continue;
    } else {
      const std::string state = j.value("state", "");
      outcome = state == "cancelled" ? state : "cancelling (" + state + ")";
    }
    if (co.json) {
      all.push_back(j);
    } else {
      std::cout << EscapeForTerminal(id) << " " << EscapeForTerminal(outcome) << "\n";
    }
  }
  // One object for one id (as before several were taken), an array for several.
  if (co.json && !all.empty()) std::cout << (all.size() == 1 ? all[0] : all).dump(2) << "\n";
}

// `tessera cordon|drain|uncordon NODE[:DEVICE]`: POST /v1/nodes/NODE/ACTION, with {"device": N}
// for one device. A node's name may hold ':' itself: only digits after the last one are a device.
void AdminNode(const ClientOptions& co, const std::string& action, const std::string& target,
               int* exit_code) {
  std::string node = target;
  Json body = Json::object();
  if (!target.empty() && target.back() == ':') {  // it said "no node 'local:'"
    std::cerr << "tessera " << action << ": '" << EscapeForTerminal(target)
              << "' names no device after ':' (NODE or NODE:DEVICE, e.g. "
              << EscapeForTerminal(target.substr(0, target.size() - 1)) << ":0)\n";
    *exit_code = kExitBadInput;
    return;
  }
  const size_t colon = target.rfind(':');
  if (colon != std::string::npos && colon + 1 < target.size() &&
      target.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
      target.size() - colon - 1 <= 4) {
    node = target.substr(0, colon);
    body["device"] = std::stoi(target.substr(colon + 1));
  }
  if (node.empty()) {
    std::cerr << "tessera " << action << ": NODE[:DEVICE] names no node\n";
    *exit_code = kExitBadInput;
    return;
  }
  const std::string path = "/v1/nodes/" + PercentEncoded(node) + "/" + action;
  // Repeating one changes nothing more: it may go on to another server after reaching one.
  CallOptions call;
  call.repeatable = true;
  call.retry_for_ms = 30000;
  Json n = Call(co, "POST", path, exit_code, body.dump(), call);
  if (n.is_discarded()) return;
  if (co.json) return void(std::cout << n.dump(2) << "\n");
  std::string state = n.value("admin_state", "?");
  if (body.contains("device")) {
    for (const auto& d : n.value("devices", Json::array())) {
      if (d.value("index", -1) == body["device"]) state = d.value("admin_state", "?");
    }
  }
  std::cout << EscapeForTerminal(target) << " " << state << "\n";
}

void WhoAmI(const ClientOptions& co, const Args&, int* exit_code) {
  Json j = Call(co, "GET", "/v1/whoami", exit_code);
  if (j.is_discarded()) return;
  std::cout << (co.json ? j.dump(2)
                        : j["name"].get<std::string>() + " (" + j["role"].get<std::string>() + ")")
            << "\n";
}

using ClientRun = void (*)(const ClientOptions& co, const Args& args, int* exit_code);

// A client command whose arguments `add_args` declares.
void RegisterClientCommand(CLI::App& app, CommandContext& ctx, const char* name, const char* help,
                           void (*add_args)(CLI::App*, Args*), ClientRun run) {
  auto* cmd = app.add_subcommand(name, help);
  auto o = std::make_shared<ClientOptions>();
  AddClientFlags(cmd, o.get());
  auto args = std::make_shared<Args>();
  add_args(cmd, args.get());
  cmd->callback([o, args, &ctx, run] {
    ClientOptions co = *o;
    if (!Resolve(&co)) {
      ctx.exit_code = kExitBadInput;
      return;
    }
    run(co, *args, &ctx.exit_code);
  });
}

void RegisterClientCommands(CLI::App& app, CommandContext& ctx) {
  auto no_arg = [](CLI::App*, Args*) {};
  RegisterClientCommand(
      app, ctx, "jobs", "List jobs (of your groups)",
      [](CLI::App* c, Args* a) {
        Choices(
            c->add_option("--state", a->text, "only jobs in this state (pending, running, ...)"),
            "state", JobStateNames());
        c->add_option("--limit", a->limit, "the newest this many jobs (100; at most 10000)")
            ->check(CLI::Range(1, 10000));
      },
      ListJobs);
  RegisterClientCommand(
      app, ctx, "job", "Show one job and its output",
      [](CLI::App* c, Args* a) {
        c->add_option("id", a->ids)->required()->expected(1)->check(kJobId);
      },
      ShowJob);
  RegisterClientCommand(
      app, ctx, "cancel", "Cancel jobs: tessera cancel ID...",
      [](CLI::App* c, Args* a) {
        c->add_option("ids", a->ids, "job ids")->required()->check(kJobId);
      },
      CancelJobs);
  RegisterClientCommand(app, ctx, "queues", "List the queues you may use", no_arg,
                        [](const ClientOptions& co, const Args&, int* rc) { ListQueues(co, rc); });
  RegisterClientCommand(app, ctx, "groups", "Groups with reservation, limit and usage", no_arg,
                        [](const ClientOptions& co, const Args&, int* rc) { ListGroups(co, rc); });
  RegisterClientCommand(app, ctx, "nodes", "Nodes, devices, and who holds them", no_arg,
                        [](const ClientOptions& co, const Args&, int* rc) { ListNodes(co, rc); });
  RegisterClientCommand(app, ctx, "whoami", "Who the token belongs to", no_arg, WhoAmI);
  // Admins: node administration.
  auto target = [](CLI::App* c, Args* a) {
    c->add_option("node", a->text, "NODE, or NODE:DEVICE for one device")->required();
  };
  RegisterClientCommand(
      app, ctx, "cordon", "No new work on a node or device: tessera cordon NODE[:DEVICE]", target,
      [](const ClientOptions& co, const Args& a, int* rc) { AdminNode(co, "cordon", a.text, rc); });
  RegisterClientCommand(
      app, ctx, "drain",
      "No new work, and its jobs requeued to run elsewhere: tessera drain NODE[:DEVICE]", target,
      [](const ClientOptions& co, const Args& a, int* rc) { AdminNode(co, "drain", a.text, rc); });
  RegisterClientCommand(app, ctx, "uncordon",
                        "Back to work after cordon or drain: tessera uncordon NODE[:DEVICE]",
                        target, [](const ClientOptions& co, const Args& a, int* rc) {
                          AdminNode(co, "uncordon", a.text, rc);
                        });
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
    const std::string reason = e["reason"].get<std::string>();
    std::cout << e["seq"] << "  " << JobTime(e, "time_ms") << "  "
              << EscapeForTerminal(e["kind"].get<std::string>()) << "  "
              << EscapeForTerminal(e["subject"].get<std::string>()) << "  by "
              << EscapeForTerminal(e["actor"].get<std::string>())
              << (reason.empty() ? ""
                                 : "  (" + EscapeForTerminal(HumanTimes(reason, NowMs())) + ")")
              << "\n";
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
    Json j = Call(co, "GET",
                  "/v1/events?after=" + std::to_string(cursor) + "&limit=500" +
                      (o.kind.empty() ? "" : "&kind=" + PercentEncoded(o.kind)),
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
  // A log read as it grows: one JSON object a line (JSON Lines), not one document.
  cmd->get_option("--json")->description("print each event as one JSON object a line (JSON Lines)");
  cmd->add_flag("--follow,-f", o->follow, "keep printing new events");
  cmd->add_option("--kind", o->kind, "only events whose kind starts with this (e.g. job.)");
  cmd->add_option("--after", o->after, "only events after this sequence number");
  cmd->callback([o, &ctx] { Events(*o, &ctx.exit_code); });
}

}  // namespace

void RegisterUserCommands(CLI::App& app, CommandContext& ctx) {
  RegisterSubmitCommand(app, ctx);
  RegisterClientCommands(app, ctx);
  RegisterEventsCommand(app, ctx);
}

}  // namespace tessera::cli
