// The reports of `tessera whatif --usage`: text, JSON and an HTML page with inline SVG plots.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/text.h"
#include "sim/usage_whatif.h"

namespace tessera::sim::usage {
namespace {

using Json = nlohmann::json;

// "12.34" from milli-units (exact integer formatting).
std::string Milli(int64_t v) {
  char b[48];
  std::snprintf(b, sizeof(b), "%s%lld.%02lld", v < 0 ? "-" : "",
                static_cast<long long>(std::llabs(v) / 1000),
                static_cast<long long>(std::llabs(v) % 1000 / 10));
  return b;
}
std::string Hours(int64_t milli_gpu_ms) { return Milli(milli_gpu_ms / 3'600'000); }
std::string Secs(int64_t ms) { return Milli(ms); }
std::string Pm(int64_t pm) {  // per-mille as a percentage, one decimal
  return std::to_string(pm / 10) + "." + std::to_string(pm % 10) + "%";
}
std::string Dur(int64_t ms) {
  const int64_t m = ms / 60000;
  if (m >= 120) return std::to_string(m / 60) + "h" + std::to_string(m % 60) + "m";
  return std::to_string(m) + "m";
}

const PlanResult* Plans(const WhatIfUsage& r, int i) {
  return i == 0 ? &r.whole : i == 1 ? &r.forms : &r.swap;
}

Json PlanJson(const PlanResult& p) {
  Json teams = Json::object();
  for (const auto& [name, t] : p.teams) {
    teams[name] = {{"workloads", t.workloads},
                   {"held_gpu_milli_ms", t.held_gpu_milli_ms},
                   {"used_gpu_milli_ms", t.used_gpu_milli_ms},
                   {"held_gpu_hours", Hours(t.held_gpu_milli_ms)},
                   {"used_gpu_hours", Hours(t.used_gpu_milli_ms)}};
  }
  Json cards = Json::array();
  for (const Point& pt : p.cards_over_time) cards.push_back({pt.t_ms, pt.value});
  return {{"plan", p.name},
          {"cards", p.cards},
          {"overcommit_pct", p.overcommit_pct},
          {"whole", p.whole},
          {"partitions", p.partitions},
          {"shares", p.shares},
          {"swapping", p.swapping},
          {"rejected", p.rejected},
          {"start_wait_p99_ms", p.start_wait_p99_ms},
          {"activations", p.activations},
          {"wakes_from_swap", p.wakes},
          {"waits_for_room", p.waits_for_room},
          {"wake_p50_ms", p.wake_p50_ms},
          {"wake_p99_ms", p.wake_p99_ms},
          {"wake_max_ms", p.wake_max_ms},
          {"activation_p99_ms", p.activation_p99_ms},
          {"preemptions", p.preemptions},
          {"return_p99_ms", p.return_p99_ms},
          {"swap_outs", p.swap_outs},
          {"disk_swap_outs", p.disk_swap_outs},
          {"swapped_mib", p.swapped_mib},
          {"peak_host_mib", p.peak_host_mib},
          {"teams", teams},
          {"cards_over_time", cards}};
}

std::string Esc(const std::string& s) {
  return EscapeChars(s, {{'<', "&lt;"}, {'>', "&gt;"}, {'&', "&amp;"}, {'"', "&quot;"}});
}

}  // namespace

std::string UsageJson(const WhatIfUsage& r) {
  const History& h = r.history;
  Json w = Json::array();
  for (const WorkloadRow& x : r.workloads) {
    w.push_back({{"workload", x.name},
                 {"team", x.team},
                 {"class", x.cls},
                 {"gpus", x.gpus},
                 {"peak_memory_mib", x.stats.peak_mem_mib},
                 {"cap_mib", x.cap_mib},
                 {"compute_milli", x.compute_milli},
                 {"duty_per_mille", x.stats.duty_pm},
                 {"mean_util_per_mille", x.stats.mean_util_pm},
                 {"present_ms", x.stats.present_ms},
                 {"active_ms", x.stats.active_ms},
                 {"idle_spans", x.stats.idle_spans},
                 {"idle_longest_ms", x.stats.idle_longest_ms},
                 {"idle_median_ms", x.stats.idle_median_ms}});
  }
  Json tried = Json::array();
  for (const PlanResult& p : r.swap_tried) {
    tried.push_back({{"overcommit_pct", p.overcommit_pct},
                     {"cards", p.cards},
                     {"wake_p99_ms", p.wake_p99_ms},
                     {"rejected", p.rejected}});
  }
  const WhatIfOptions& o = r.options;
  Json j = {{"card", o.card},
            {"card_memory_mib", r.card_memory_mib},
            {"options",
             {{"host_mbps", o.host_mbps},
              {"disk_mbps", o.disk_mbps},
              {"host_ram_mib", o.host_ram_mib},
              {"headroom_pct", o.headroom_pct},
              {"active_util_per_mille", o.active_util_pm},
              {"busy_duty_per_mille", o.busy_duty_pm},
              {"swap_duty_per_mille", o.swap_duty_pm},
              {"idle_ms", o.idle_ms},
              {"slice_ms", o.slice_ms},
              {"wake_p99_limit_ms", o.wake_p99_limit_ms}}},
            {"history",
             {{"workloads", h.workloads.size()},
              {"samples", h.samples},
              {"rows", h.stats.rows},
              {"series", h.stats.series},
              {"skipped_series", h.stats.skipped_series},
              {"step_ms", h.step_ms},
              {"max_gap_ms", h.max_gap_ms},
              {"gaps", h.gaps},
              {"gap_ms", h.gap_ms},
              {"resets", h.resets},
              {"duplicates", h.duplicates},
              {"restarts", h.restarts},
              {"start_ms", h.start_ms},
              {"end_ms", h.end_ms}}},
            {"lower_bound",
             {{"cards", r.lb_cards},
              {"memory_cards", r.lb_memory_cards},
              {"utilization_gpus", r.lb_util_gpus},
              {"duty_sum_milli_gpus", r.duty_sum_milli}}},
            {"plans", {PlanJson(r.whole), PlanJson(r.forms), PlanJson(r.swap)}},
            {"swap_overcommits_tried", tried},
            {"swap_within_wake_limit", r.swap_within_limit},
            {"workloads", w},
            {"seconds", r.seconds}};
  return j.dump(2);
}

std::string UsageText(const WhatIfUsage& r, size_t max_rows) {
  const History& h = r.history;
  std::ostringstream s;
  s << "What-if from telemetry: " << h.workloads.size() << " workloads, " << h.samples
    << " samples every " << Secs(h.step_ms) << " s over " << Dur(h.end_ms - h.start_ms) << ", on "
    << r.options.card << " (" << r.card_memory_mib / 1024 << " GiB)\n"
    << "gaps past " << Secs(h.max_gap_ms) << " s: " << h.gaps << " (" << Dur(h.gap_ms)
    << " counted idle); resets (time going back): " << h.resets << "; duplicates: " << h.duplicates
    << "; memory restarts: " << h.restarts << "\n\n";
  s << "PLAN                 CARDS  WAKE P50  WAKE P99  WAKE MAX  WHOLE  PART  SHARE  SWAP  "
       "GPU-H HELD  GPU-H USED\n";
  for (int i = 0; i < 3; ++i) {
    const PlanResult& p = *Plans(r, i);
    int64_t held = 0, used = 0;
    for (const auto& [n, t] : p.teams) {
      held += t.held_gpu_milli_ms;
      used += t.used_gpu_milli_ms;
    }
    std::string name = i == 0   ? "whole cards"
                       : i == 1 ? "forms, no swap"
                                : "forms + swap " + std::to_string(p.overcommit_pct) + "%";
    char b[256];
    std::snprintf(b, sizeof(b), "%-20s %5d %8ss %8ss %8ss %6lld %5lld %6lld %5lld %11s %11s\n",
                  name.c_str(), p.cards, Secs(p.wake_p50_ms).c_str(), Secs(p.wake_p99_ms).c_str(),
                  Secs(p.wake_max_ms).c_str(), static_cast<long long>(p.whole),
                  static_cast<long long>(p.partitions), static_cast<long long>(p.shares),
                  static_cast<long long>(p.swapping), Hours(held).c_str(), Hours(used).c_str());
    s << b;
  }
  s << "lower bound          " << r.lb_cards
    << " cards (the memory of the workloads active at once, at the busiest step)\n"
    << "duty cycles summed   " << Milli(r.duty_sum_milli)
    << " (workloads active on average: the bound if each held a card of its own); utilization "
       "summed at the busiest step: "
    << r.lb_util_gpus << " GPUs (shares past it run time-sliced)\n";
  s << "swap plan: wakes from swap " << r.swap.wakes << " of " << r.swap.activations
    << " activations, " << r.swap.waits_for_room << " waited for room, swap-outs "
    << r.swap.swap_outs << " (" << r.swap.disk_swap_outs << " to disk), peak host "
    << r.swap.peak_host_mib / 1024 << " GiB on one card";
  if (r.options.slice_ms > 0) {
    s << "; slicing every " << Secs(r.options.slice_ms) << " s: " << r.swap.preemptions
      << " active shares swapped out for a wake, their return p99 " << Secs(r.swap.return_p99_ms)
      << " s";
  }
  s << "; overcommits tried:";
  for (const PlanResult& p : r.swap_tried) {
    s << " " << p.overcommit_pct << "%=" << p.cards << " cards/p99 " << Secs(p.wake_p99_ms) << "s";
  }
  s << " (limit " << Secs(r.options.wake_p99_limit_ms) << " s"
    << (r.swap_within_limit ? "" : "; none within it: the plan shown is the one with the shortest")
    << ")\n\nGPU-hours by team "
    << "(held whole / forms / forms+swap, used):\n";
  for (const auto& [team, t] : r.whole.teams) {
    s << "  " << team << " (" << t.workloads << "): " << Hours(t.held_gpu_milli_ms) << " / "
      << Hours(r.forms.teams.at(team).held_gpu_milli_ms) << " / "
      << Hours(r.swap.teams.count(team) ? r.swap.teams.at(team).held_gpu_milli_ms : 0) << ", used "
      << Hours(t.used_gpu_milli_ms) << "\n";
  }
  s << "\nWORKLOAD                                 TEAM         CLASS        GPUS  PEAK GiB  "
       "DUTY    IDLE SPANS  LONGEST IDLE\n";
  size_t shown = 0;
  for (const WorkloadRow& w : r.workloads) {
    if (max_rows > 0 && shown == max_rows) {
      s << "  ... " << r.workloads.size() - shown << " more (--json lists every workload)\n";
      break;
    }
    char b[320];
    std::snprintf(b, sizeof(b), "%-40s %-12s %-12s %4d %9s  %-7s %10lld  %s\n",
                  w.name.substr(0, 40).c_str(), w.team.substr(0, 12).c_str(), w.cls.c_str(), w.gpus,
                  Milli(w.stats.peak_mem_mib * 1000 / 1024).c_str(), Pm(w.stats.duty_pm).c_str(),
                  static_cast<long long>(w.stats.idle_spans), Dur(w.stats.idle_longest_ms).c_str());
    s << b;
    ++shown;
  }
  return s.str();
}

std::string UsageHtml(const WhatIfUsage& r) {
  // Cards over time: the three plans and the lower bound, step lines.
  const int W = 900, H = 320, L = 50, B = 30;
  const int64_t span = std::max<int64_t>(1, r.history.end_ms - r.history.start_ms);
  int64_t top = 1;
  for (int i = 0; i < 3; ++i) top = std::max<int64_t>(top, Plans(r, i)->cards);
  auto x = [&](int64_t t) { return L + t * (W - L - 10) / span; };
  auto y = [&](int64_t v) { return H - B - v * (H - B - 10) / top; };
  auto steps = [&](const std::vector<Point>& pts, const char* color, const char* dash) {
    std::ostringstream p;
    p << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" "
      << "stroke-dasharray=\"" << dash << "\" points=\"";
    int64_t last = 0;
    for (const Point& pt : pts) {
      p << x(pt.t_ms) << "," << y(last) << " " << x(pt.t_ms) << "," << y(pt.value) << " ";
      last = pt.value;
    }
    p << x(span) << "," << y(last) << "\"/>\n";
    return p.str();
  };
  std::ostringstream s;
  s << "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Tessera what-if from "
       "telemetry</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
       "collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
       "pre{background:#f6f6f6;padding:1em}</style></head><body>\n"
    << "<h1>What-if from telemetry</h1>\n<h2>Cards in use over time</h2>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\">\n"
    << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - 10 << "\" y2=\"" << H - B
    << "\" stroke=\"#000\"/><line x1=\"" << L << "\" y1=\"10\" x2=\"" << L << "\" y2=\"" << H - B
    << "\" stroke=\"#000\"/>\n"
    << "<text x=\"5\" y=\"" << y(top) + 5 << "\">" << top << "</text><text x=\"5\" y=\"" << H - B
    << "\">0</text><text x=\"" << W - 120 << "\" y=\"" << H - 8 << "\">" << Dur(span) << "</text>\n"
    << steps(r.whole.cards_over_time, "#d62728", "")
    << steps(r.forms.cards_over_time, "#1f77b4", "") << steps(r.swap.cards_over_time, "#2ca02c", "")
    << steps(r.lb_over_time, "#444", "4 3");
  const char* legend[4][2] = {{"#d62728", "whole cards"},
                              {"#1f77b4", "forms, no swap"},
                              {"#2ca02c", "forms + swap"},
                              {"#444", "lower bound (memory of the active workloads)"}};
  for (int i = 0; i < 4; ++i) {
    s << "<rect x=\"" << L + 10 << "\" y=\"" << 14 + 16 * i
      << "\" width=\"12\" height=\"4\" fill=\"" << legend[i][0] << "\"/><text x=\"" << L + 28
      << "\" y=\"" << 20 + 16 * i << "\" font-size=\"12\">" << legend[i][1] << "</text>\n";
  }
  s << "</svg>\n<h2>GPU-hours held and used, by team</h2>\n";
  // Bars: per team, held under each plan beside used.
  int64_t most = 1;
  for (int i = 0; i < 3; ++i) {
    for (const auto& [n, t] : Plans(r, i)->teams)
      most = std::max({most, t.held_gpu_milli_ms, t.used_gpu_milli_ms});
  }
  const int rowh = 16, teams = static_cast<int>(r.whole.teams.size());
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\""
    << teams * (rowh * 4 + 10) + 10 << "\">\n";
  int yy = 5;
  for (const auto& [team, t] : r.whole.teams) {
    s << "<text x=\"0\" y=\"" << yy + 12 << "\" font-size=\"12\">" << Esc(team.substr(0, 18))
      << "</text>\n";
    const int64_t vals[4] = {t.held_gpu_milli_ms, r.forms.teams.at(team).held_gpu_milli_ms,
                             r.swap.teams.at(team).held_gpu_milli_ms, t.used_gpu_milli_ms};
    const char* colors[4] = {"#d62728", "#1f77b4", "#2ca02c", "#999"};
    for (int k = 0; k < 4; ++k) {
      const int64_t w = vals[k] * (W - 250) / most;
      s << "<rect x=\"150\" y=\"" << yy << "\" width=\"" << w << "\" height=\"" << rowh - 3
        << "\" fill=\"" << colors[k] << "\"/><text x=\"" << 155 + w << "\" y=\"" << yy + 11
        << "\" font-size=\"11\">" << Hours(vals[k]) << (k == 3 ? " used" : " held") << "</text>\n";
      yy += rowh;
    }
    yy += 10;
  }
  s << "</svg>\n<h2>Summary</h2>\n<pre>" << Esc(UsageText(r, 200)) << "</pre>\n</body></html>\n";
  return s.str();
}

}  // namespace tessera::sim::usage
