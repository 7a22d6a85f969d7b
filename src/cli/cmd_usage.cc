// `tessera usage` (GPU-hours by group, identity, queue or form, from the server's event log) and
// `tessera whatif` (the observed workload replayed by the simulator under another class-to-form
// table: the cards each class would need, side by side with what happened).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "model/duration.h"
#include "model/quantity.h"
#include "policy/yaml_fields.h"
#include "sim/scenario.h"

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

// --since/--until as epoch milliseconds; prints what is wrong.
bool ResolveWindow(const std::string& since_text, const std::string& until_text, int64_t* since,
                   int64_t* until) {
  const int64_t now = NowMs();
  Result<int64_t> s = ParseTime(since_text, now), u = ParseTime(until_text, now);
  for (const auto& [flag, r] : {std::pair{"--since", &s}, std::pair{"--until", &u}}) {
    if (!r->ok()) {
      std::cerr << "tessera: " << flag << ": " << r->status().message() << "\n";
      return false;
    }
  }
  *since = *s;
  *until = *u;
  return true;
}

struct UsageOptions {
  ClientOptions client;
  std::string since = "7d", until = "now", by = "group";
  bool csv = false;
};

void Usage(const UsageOptions& o, int* exit_code) {
  ClientOptions co = o.client;
  int64_t since = 0, until = 0;
  if (!ResolveWindow(o.since, o.until, &since, &until) || !Resolve(&co)) {
    *exit_code = kExitBadInput;
    return;
  }
  Json j = Call(co, "GET",
                "/v1/usage?since=" + std::to_string(since) + "&until=" + std::to_string(until) +
                    "&by=" + o.by,
                exit_code);
  if (j.is_discarded()) return;
  if (co.json) {
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
    const int64_t held = r["gpu_milli_ms"].get<int64_t>(),
                  idle = r["idle_gpu_milli_ms"].get<int64_t>();
    row.push_back(std::to_string(r["jobs"].get<int64_t>()));
    row.push_back(r["gpu_hours"].get<std::string>());
    row.push_back(r["gpu_hours_used"].get<std::string>());
    row.push_back(held > 0 ? std::to_string(idle * 100 / held) : "-");
    row.push_back(r["gpu_memory_gib_hours"].get<std::string>());
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
  AddClientFlags(cmd, &o->client);
  cmd->add_option("--since", o->since,
                  "from: a duration ago (7d), epoch ms or YYYY-MM-DD[THH:MM:SSZ] (default 7d)");
  cmd->add_option("--until", o->until, "to: the same forms, or now (default)");
  cmd->add_option("--by", o->by, "group, identity, queue or form")
      ->check(CLI::IsMember({"group", "identity", "queue", "form"}));
  cmd->add_flag("--csv", o->csv, "print CSV (exact integer columns: milli-GPU-ms, MiB-ms)");
  cmd->callback([o, &ctx] { Usage(*o, &ctx.exit_code); });
}

// ---- whatif ----

struct WhatIfOptions {
  ClientOptions client;
  std::string since = "7d", until = "now";
  std::vector<std::string> forms;  // CLASS=FORM[,FORM...]
  std::string emit;
};

void WhatIf(const WhatIfOptions& o, int* exit_code) {
  ClientOptions co = o.client;
  int64_t since = 0, until = 0;
  if (!ResolveWindow(o.since, o.until, &since, &until) || !Resolve(&co)) {
    *exit_code = kExitBadInput;
    return;
  }
  Json j =
      Call(co, "GET",
           "/v1/whatif/scenario?since=" + std::to_string(since) + "&until=" + std::to_string(until),
           exit_code);
  if (j.is_discarded()) return;
  Result<sim::WhatIfResult> r = sim::WhatIf(j, o.forms);
  if (!r.ok()) {
    std::cerr << "tessera whatif: " << r.status().message() << "\n";
    *exit_code = r.status().code() == StatusCode::kInvalidArgument ? kExitBadInput : 1;
    return;
  }
  if (!o.emit.empty()) {
    std::ofstream f(o.emit);
    f << "# Written by tessera whatif: the jobs observed from " << since << " to " << until
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
  if (co.json) {
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "What-if over the " << j["jobs"].get<int64_t>()
            << " jobs that ran in the window (arrivals, held times and "
            << "needs from the event log), replayed by the simulator"
            << (o.forms.empty() ? " under the server's policy"
                                : " with the class-to-form table changed")
            << ":\n\n";
  PrintTable(rows);
  std::cout << "\n" << returned_total << " card(s) returned to the pool at peak.\n\n" << r->text;
}

void RegisterWhatIfCommand(CLI::App& app, CommandContext& ctx) {
  auto* cmd = app.add_subcommand(
      "whatif",
      "Replay the observed jobs under another class-to-form table: the cards each class needs");
  auto o = std::make_shared<WhatIfOptions>();
  AddClientFlags(cmd, &o->client);
  cmd->add_option("--since", o->since,
                  "from: a duration ago (7d), epoch ms or YYYY-MM-DD[THH:MM:SSZ] (default 7d)");
  cmd->add_option("--until", o->until, "to: the same forms, or now (default)");
  cmd->add_option("--forms", o->forms, "CLASS=FORM[,FORM...], e.g. interactive=share (repeatable)");
  cmd->add_option("--emit-scenario", o->emit,
                  "also write the scenario (for tessera sim scenario) to this file");
  cmd->callback([o, &ctx] { WhatIf(*o, &ctx.exit_code); });
}

}  // namespace

void RegisterHistoryCommands(CLI::App& app, CommandContext& ctx) {
  RegisterUsageCommand(app, ctx);
  RegisterWhatIfCommand(app, ctx);
}

}  // namespace tessera::cli
