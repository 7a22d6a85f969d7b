// `tessera usage` (GPU-hours by group, identity, queue or form, from the server's event log) and
// `tessera whatif` (the observed workload replayed by the simulator under another class-to-form
// table: the cards each class would need, side by side with what happened; with --usage FILE, a
// fleet's own GPU telemetry replayed locally instead, sim/usage_whatif.h).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>

#include "cli/choices.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/read_file.h"
#include "model/duration.h"
#include "model/quantity.h"
#include "policy/yaml_fields.h"
#include "sim/scenario.h"
#include "sim/usage_whatif.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// ---- usage ----

// A time for --since/--until: a duration ago ("7d", "90m", "3600"), "now", milliseconds since the
// epoch (13 digits or more), or a UTC date "YYYY-MM-DD" / "YYYY-MM-DDTHH:MM:SSZ".
Result<int64_t> ParseTime(const std::string& text, int64_t now_ms) {
  if (text == "now") return now_ms;
  if (text.size() >= 13 && text.find_first_not_of("0123456789") == std::string::npos) {
    auto v = ParseNonNegativeInt(text);
    if (v.ok()) return *v;
  }
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  char tail = 0;
  if (text.size() >= 10 && text[4] == '-' &&
      (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2dZ%c", &y, &mo, &d, &h, &mi, &sec, &tail) ==
           6 ||
       (text.size() == 10 &&
        std::sscanf(text.c_str(), "%4d-%2d-%2d%c", &y, &mo, &d, &tail) == 3))) {
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
      return Status::InvalidArgument("'" + text + "' is not a valid date");
    }
    // Days since the epoch of a civil date (proleptic Gregorian).
    const int yy = y - (mo <= 2);
    const int era = (yy >= 0 ? yy : yy - 399) / 400;
    const int yoe = yy - era * 400;
    const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    const int64_t days = int64_t{era} * 146097 + doe - 719468;
    return ((days * 24 + h) * 60 + mi) * int64_t{60000} + sec * int64_t{1000};
  }
  auto ago = ParseDurationMs(text);  // the one grammar (model/duration.h)
  if (!ago.ok()) {
    return Status::InvalidArgument("'" + text +
                                   "' is not a time: use a duration ago (7d, 90m), now, epoch "
                                   "milliseconds or YYYY-MM-DD[THH:MM:SSZ]; as a duration, " +
                                   ago.status().message());
  }
  return now_ms - *ago;
}

// The flags of a command that reads a window of the event log (usage, whatif): the client's and
// --since/--until.
struct WindowFlags {
  ClientOptions client;
  std::string since = "7d", until = "now";
};

void AddWindowFlags(CLI::App* cmd, WindowFlags* f) {
  AddClientFlags(cmd, &f->client);
  cmd->add_option("--since", f->since,
                  "from: a duration ago (7d), epoch ms or YYYY-MM-DD[THH:MM:SSZ] (default 7d)");
  cmd->add_option("--until", f->until, "to: the same forms, or now (default)");
}

// The window in epoch milliseconds, with the client resolved.
struct Window {
  ClientOptions client;
  int64_t since = 0, until = 0;
  std::string Query() const {
    return "since=" + std::to_string(since) + "&until=" + std::to_string(until);
  }
};

// Prints what is wrong and sets *exit_code where --since, --until or the client flags are.
bool ResolveWindow(const WindowFlags& f, Window* w, int* exit_code) {
  const int64_t now = NowMs();
  Result<int64_t> s = ParseTime(f.since, now), u = ParseTime(f.until, now);
  for (const auto& [flag, r] : {std::pair{"--since", &s}, std::pair{"--until", &u}}) {
    if (!r->ok()) {
      std::cerr << "tessera: " << flag << ": " << r->status().message() << "\n";
      *exit_code = kExitBadInput;
      return false;
    }
  }
  w->since = *s;
  w->until = *u;
  w->client = f.client;
  if (!Resolve(&w->client)) {
    *exit_code = kExitBadInput;
    return false;
  }
  return true;
}

struct UsageOptions {
  WindowFlags window;
  std::string by = "group";
  bool csv = false;
};

void Usage(const UsageOptions& o, int* exit_code) {
  Window w;
  if (!ResolveWindow(o.window, &w, exit_code)) return;
  Json j = Call(w.client, "GET", "/v1/usage?" + w.Query() + "&by=" + o.by, exit_code);
  if (j.is_discarded()) return;
  if (w.client.json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool slices = o.by == "form";
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head = {o.by == "identity" ? "IDENTITY"
                                   : o.by == "queue"  ? "QUEUE"
                                   : o.by == "form"   ? "FORM"
                                                      : "GROUP"};
  if (slices) head.push_back("SLICE");
  for (const char* h : {"JOBS", "GPU-HOURS", "GPU-HOURS USED", "IDLE %", "GPU-MEMORY GiB-HOURS"})
    head.push_back(h);
  rows.push_back(head);
  auto add = [&](const Json& r, const std::string& name) {
    std::vector<std::string> row = {name};
    if (slices) row.push_back(r.value("slice", ""));
    // The exact amounts are integers, or their decimal digits past 64 bits (then not zero).
    const auto exact = [&](const char* f) {
      const Json& v = r[f];
      return v.is_number_integer() ? v.get<int64_t>() : v.is_string() ? INT64_MAX : 0;
    };
    const int64_t held = exact("gpu_milli_ms"), idle = exact("idle_gpu_milli_ms");
    row.push_back(std::to_string(r["jobs"].get<int64_t>()));
    row.push_back(RoundedDown(r["gpu_hours"].get<std::string>(), held));
    row.push_back(RoundedDown(r["gpu_hours_used"].get<std::string>(), held - idle));
    row.push_back(held > 0 && held < INT64_MAX / 100 ? std::to_string(idle * 100 / held) : "-");
    row.push_back(
        RoundedDown(r["gpu_memory_gib_hours"].get<std::string>(), exact("gpu_memory_mib_ms")));
    rows.push_back(row);
  };
  for (const auto& r : j["rows"]) add(r, r[o.by].get<std::string>());
  if (o.csv) {
    std::vector<std::string> csv_head = {o.by};
    if (slices) csv_head.push_back("slice");
    for (const char* h :
         {"jobs", "gpu_milli_ms", "idle_gpu_milli_ms", "gpu_memory_mib_ms",
          "idle_gpu_memory_mib_ms", "cpu_milli_ms", "gpu_hours", "gpu_hours_used"}) {
      csv_head.push_back(h);
    }
    auto quote = [](const std::string& v) {
      if (v.find_first_of(",\"\n") == std::string::npos) return v;
      std::string q = "\"";
      for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      return q + "\"";
    };
    for (size_t i = 0; i < csv_head.size(); ++i) std::cout << (i ? "," : "") << csv_head[i];
    std::cout << "\n";
    for (const auto& r : j["rows"]) {
      for (size_t i = 0; i < csv_head.size(); ++i) {
        const Json& v = r.value(csv_head[i], Json(""));
        std::cout << (i ? "," : "") << quote(v.is_string() ? v.get<std::string>() : v.dump());
      }
      std::cout << "\n";
    }
    return;
  }
  add(j["total"], "(total)");
  PrintTable(rows);
}

void RegisterUsageCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand(
      "usage", "GPU-hours held and used, by group, identity, queue or form (from the event log)");
  auto o = std::make_shared<UsageOptions>();
  AddWindowFlags(cmd, &o->window);
  Choices(cmd->add_option("--by", o->by, "group, identity, queue or form"), "breakdown",
          {"group", "identity", "queue", "form"});
  cmd->add_flag("--csv", o->csv, "print CSV (exact integer columns: milli-GPU-ms, MiB-ms)");
  cmd->callback([o, &ctx] { Usage(*o, &ctx.exit_code); });
}

// ---- whatif ----

struct WhatIfOptions {
  WindowFlags window;
  std::vector<std::string> forms;  // CLASS=FORM[,FORM...]
  std::string emit;
  // --usage: telemetry files, replayed here (no server).
  std::vector<std::string> usage;
  std::string html, card = "H100-80GB", host_gbps = "50", disk_gbps = "5", host_ram = "1TiB";
  std::string idle = "30s", wake_p99 = "10s", step, max_gap, active_util = "1", busy_duty = "90",
              swap_duty = "60", slice;
  int headroom = 10, gpus_per_node = 8, rows = 25;
  std::vector<int> overcommits;
};

// --usage FILE...: the telemetry read, replayed under the three plans, reported.
void RunUsageWhatIf(const WhatIfOptions& o, int* exit_code) {
  sim::usage::WhatIfOptions w;
  auto bad = [&](const std::string& what) {
    std::cerr << "tessera whatif: " << what << "\n";
    *exit_code = kExitBadInput;
  };
  int64_t v = 0;
  w.card = o.card;
  w.headroom_pct = o.headroom;
  w.gpus_per_node = o.gpus_per_node;
  if (!sim::usage::ParseDecimal(o.host_gbps, 1000, &v) || v < 1)
    return bad("--host-gbps: a positive number of GB/s");
  w.host_mbps = v;
  if (!sim::usage::ParseDecimal(o.disk_gbps, 1000, &v) || v < 1)
    return bad("--disk-gbps: a positive number of GB/s");
  w.disk_mbps = v;
  if (!sim::usage::ParseDecimal(o.active_util, 10, &v) || v < 1 || v > 1000)
    return bad("--active-util: a percentage from 0.1 to 100");
  w.active_util_pm = static_cast<int32_t>(v);
  if (!sim::usage::ParseDecimal(o.busy_duty, 10, &v) || v > 1000)
    return bad("--busy-duty: a percentage from 0 to 100");
  w.busy_duty_pm = static_cast<int32_t>(v);
  if (!sim::usage::ParseDecimal(o.swap_duty, 10, &v) || v > 1000)
    return bad("--swap-duty: a percentage from 0 to 100");
  w.swap_duty_pm = static_cast<int32_t>(v);
  auto ram = ParseMemoryMiB(o.host_ram);
  if (!ram.ok()) return bad("--host-ram: " + ram.status().message());
  w.host_ram_mib = *ram;
  for (auto [flag, text, into] : {std::tuple{"--idle", &o.idle, &w.idle_ms},
                                  std::tuple{"--wake-p99", &o.wake_p99, &w.wake_p99_limit_ms},
                                  std::tuple{"--swap-slice", &o.slice, &w.slice_ms},
                                  std::tuple{"--step", &o.step, &w.step_ms},
                                  std::tuple{"--max-gap", &o.max_gap, &w.max_gap_ms}}) {
    if (text->empty()) continue;
    auto d = ParseDurationMs(*text);
    if (!d.ok()) return bad(std::string(flag) + ": " + d.status().message());
    *into = *d;
  }
  if (!o.overcommits.empty()) w.overcommits = o.overcommits;
  sim::usage::History h;
  for (const std::string& path : o.usage) {
    const Result<std::string> read = ReadWholeFile(path);  // a directory too: EISDIR
    if (!read.ok()) return bad("cannot read " + path);
    const std::string& text = *read;
    Status s = sim::usage::ParseUsage(text, path, &h);
    if (!s.ok()) return bad(s.message());
  }
  auto r = sim::usage::RunWhatIfUsage(std::move(h), w);
  if (!r.ok()) return bad(r.status().message());
  if (!o.html.empty()) {
    std::ofstream f(o.html);
    f << sim::usage::UsageHtml(*r);
    if (!f) return bad("cannot write " + o.html);
  }
  if (o.window.client.json) {
    std::cout << sim::usage::UsageJson(*r) << "\n";
  } else {
    std::cout << sim::usage::UsageText(*r, static_cast<size_t>(std::max(0, o.rows)));
  }
}

void WhatIf(const WhatIfOptions& o, int* exit_code) {
  if (!o.usage.empty()) return RunUsageWhatIf(o, exit_code);
  Window w;
  if (!ResolveWindow(o.window, &w, exit_code)) return;
  Json j = Call(w.client, "GET", "/v1/whatif/scenario?" + w.Query(), exit_code);
  if (j.is_discarded()) return;
  Result<sim::WhatIfResult> r = sim::WhatIf(j, o.forms);
  if (!r.ok()) {
    std::cerr << "tessera whatif: " << r.status().message() << "\n";
    *exit_code = r.status().code() == StatusCode::kInvalidArgument ? kExitBadInput : 1;
    return;
  }
  if (!o.emit.empty()) {
    std::ofstream f(o.emit);
    f << "# Written by tessera whatif: the jobs observed from " << w.since << " to " << w.until
      << " (epoch ms); run it with `tessera sim scenario`.\n"
      << r->scenario << "\n";
    if (!f) {
      std::cerr << "tessera whatif: cannot write " << o.emit << "\n";
      *exit_code = kExitBadInput;
      return;
    }
  }
  const Json& out = r->report;
  std::vector<std::vector<std::string>> rows = {{"CLASS", "JOBS", "CARDS OBSERVED", "AS CONFIGURED",
                                                 "WHAT-IF", "RETURNED",
                                                 "WAIT P99 OBSERVED/CONFIGURED/WHAT-IF"}};
  for (const auto& [name, c] : out["classes"].items()) {
    auto n = [&](const char* k) { return std::to_string(c[k].get<int64_t>()); };
    rows.push_back({name, n("jobs"), n("observed_cards"), n("as_configured_cards"),
                    n("what_if_cards"), n("returned"),
                    n("observed_wait_p99_s") + "s/" + n("as_configured_wait_p99_s") + "s/" +
                        n("what_if_wait_p99_s") + "s"});
  }
  const int64_t returned_total = out["returned"].get<int64_t>();
  if (w.client.json) {
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "What-if over the " << j["jobs"].get<int64_t>()
            << " jobs that ran in the window (arrivals, held times and "
            << "needs from the event log), replayed by the simulator"
            << (o.forms.empty() ? " under the server's policy"
                                : " with the class-to-form table changed")
            << ":\n\n";
  if (const int64_t left_out = j.value("jobs_not_replayed", int64_t{0}); left_out > 0) {
    std::cout
        << left_out
        << " more job(s) ran on a queue or in a group the config no longer has: left out.\n\n";
  }
  PrintTable(rows);
  std::cout << "\n" << returned_total << " card(s) returned to the pool at peak.\n\n" << r->text;
}

void RegisterWhatIfCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand(
      "whatif",
      "Replay the observed jobs under another class-to-form table: the cards each class needs "
      "(an admin's token; at most 31 days, default 7; with --usage FILE: a fleet's GPU "
      "telemetry, replayed here)");
  auto o = std::make_shared<WhatIfOptions>();
  AddWindowFlags(cmd, &o->window);
  cmd->add_option("--forms", o->forms, "CLASS=FORM[,FORM...], e.g. interactive=share (repeatable)");
  cmd->add_option("--emit-scenario", o->emit,
                  "also write the scenario (for tessera sim scenario) to this file");
  cmd->add_option("--usage", o->usage,
                  "GPU telemetry of a fleet (Prometheus range-query JSON of the DCGM exporter, or "
                  "CSV workload,timestamp,gpu_util_pct,gpu_memory_bytes[,team][,requested_gpus]), "
                  "replayed here instead of asking a server (repeatable)");
  // The flags of the replay of --usage FILE: each one's help starts by saying so.
  auto with_usage = [cmd](const char* flag, auto& into, const std::string& help) {
    return cmd->add_option(flag, into, "with --usage: " + help);
  };
  with_usage("--html", o->html, "also write a report with plots to this file");
  with_usage("--card", o->card, "the card, a model of the catalog");
  with_usage("--gpus-per-node", o->gpus_per_node, "cards per node (8)");
  with_usage("--host-gbps", o->host_gbps, "each card's host link, GB/s (50)");
  with_usage("--disk-gbps", o->disk_gbps, "swap to disk, GB/s (5)");
  with_usage("--host-ram", o->host_ram,
             "host RAM for swapped-out memory per card (1TiB), then disk");
  with_usage("--headroom", o->headroom, "caps at the observed peak plus this percent (10)");
  with_usage("--active-util", o->active_util,
             "a sample at this GPU utilization percent or more is active (1)");
  with_usage("--busy-duty", o->busy_duty,
             "one-GPU workloads active this percent of their time or more are "
             "inference (a partition), the rest interactive (a share) (90)");
  with_usage("--swap-duty", o->swap_duty,
             "the swap plan swaps shares active less than this percent (60)");
  with_usage("--idle", o->idle, "shares idle this long are swapped out ahead of need (30s)");
  with_usage("--swap-slice", o->slice,
             "a wake may take the place of shares active this long (the "
             "agent's --swap-slice; default off: it waits for one to go idle)");
  with_usage("--wake-p99", o->wake_p99, "the swap plan keeps its wake p99 within this (10s)");
  with_usage("--overcommit", o->overcommits,
             "overcommit percents the swap plan tries (150 200 300 400 600 800)");
  with_usage("--step", o->step, "the sampling interval (default: inferred)");
  with_usage("--max-gap", o->max_gap,
             "no sample for longer than this is a gap, counted idle (3 steps)");
  with_usage("--rows", o->rows, "workloads listed in the text (25; 0: all)");
  cmd->callback([o, &ctx] { WhatIf(*o, &ctx.exit_code); });
}

}  // namespace

void RegisterHistoryCommands(CLI::App& app, CommandContext& ctx) {
  RegisterUsageCommand(app, ctx);
  RegisterWhatIfCommand(app, ctx);
}

}  // namespace tessera::cli
