// Scenario reports: a run as JSON, a comparison as text, a utilization chart as SVG.
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "model/quantity.h"
#include "sim/scenario.h"

namespace tessera::sim {

using quota::WorkloadClass;

std::vector<double> HourlyMean(const RunReport& r, const std::vector<MilliGpu>& held) {
  std::vector<double> sum;
  std::vector<int64_t> n;
  for (size_t i = 0; i < held.size() && i < r.sample_times.size(); ++i) {
    const size_t hour = static_cast<size_t>(r.sample_times[i] / 3600);
    if (hour >= sum.size()) sum.resize(hour + 1, 0), n.resize(hour + 1, 0);
    sum[hour] += static_cast<double>(held[i]);
    ++n[hour];
  }
  for (size_t h = 0; h < sum.size(); ++h)
    sum[h] = n[h] > 0 ? sum[h] / static_cast<double>(n[h]) : 0;
  return sum;
}

namespace {

nlohmann::json RunJson(const RunReport& r) {
  nlohmann::json j;
  j["name"] = r.name;
  j["cycles"] = r.cycles;
  j["devices"] = r.devices;
  j["jobs"] = r.jobs;
  j["rejected"] = r.rejected;
  j["preemptions"] = r.preemptions;
  j["stopped"] = r.stopped;
  j["swapped_out"] = r.swapped_out;
  j["idle_requeued"] = r.idle_requeued;
  j["idle_stopped"] = r.idle_stopped;
  j["held_swapped"] = r.held_swapped;
  j["swapped_in"] = r.swapped_in;
  j["hold_stopped"] = r.hold_stopped;
  j["lost_gpu_s"] = r.lost_gpu_s;
  j["repartitions"] = r.repartitions;
  j["backfilled"] = r.backfilled;
  j["utilization"] = {{"gpu_compute", r.gpu_compute_utilization},
                      {"gpu_memory", r.gpu_memory_utilization}};
  j["groups"] = nlohmann::json::array();
  for (const GroupReport& g : r.groups) {
    // Held over time: at most 200 evenly spaced samples, in GPUs.
    nlohmann::json series = nlohmann::json::array();
    size_t n = g.gpu_held.size();
    size_t step = std::max<size_t>(1, (n + 199) / 200);
    for (size_t i = 0; i < n; i += step) {
      series.push_back({r.sample_times[i], static_cast<double>(g.gpu_held[i]) / 1000.0});
    }
    j["groups"].push_back(
        {{"name", g.name},
         {"reservation_gpu", static_cast<double>(g.reservation_gpu) / 1000.0},
         {"limit_gpu", g.limit_gpu >= quota::kUnlimited
                           ? nlohmann::json(nullptr)
                           : nlohmann::json(static_cast<double>(g.limit_gpu) / 1000.0)},
         {"max_gpu_held", static_cast<double>(g.max_gpu_held) / 1000.0},
         {"mean_gpu_held", g.mean_gpu_held / 1000.0},
         {"jobs", g.jobs},
         {"started", g.started},
         {"never_started", g.never_started},
         {"wait_p50_s", g.wait_p50_s},
         {"wait_p99_s", g.wait_p99_s},
         {"wait_max_s", g.wait_max_s},
         {"reclaim_times_s", g.reclaim_times_s},
         {"reclaim_max_s", g.reclaim_max_s},
         {"limit_exceeded", g.limit_exceeded},
         {"gpu_held", series}});
  }
  if (!r.members.empty()) {  // fair share inside groups: mean GPU held per hour
    j["members"] = nlohmann::json::array();
    for (const MemberReport& m : r.members) {
      nlohmann::json hourly = nlohmann::json::array();
      for (double v : HourlyMean(r, m.gpu_held)) hourly.push_back(std::round(v) / 1000.0);
      j["members"].push_back({{"group", m.group},
                              {"identity", m.identity},
                              {"weight", static_cast<double>(m.weight_milli) / 1000.0},
                              {"hourly_mean_gpu_held", hourly}});
    }
  }
  j["classes"] = nlohmann::json::array();
  for (const ClassReport& c : r.classes) {
    if (c.jobs == 0) continue;
    j["classes"].push_back({{"name", c.name},
                            {"jobs", c.jobs},
                            {"max_devices", c.max_devices},
                            {"mean_devices", c.mean_devices},
                            {"wait_p50_s", c.wait_p50_s},
                            {"wait_p99_s", c.wait_p99_s},
                            {"wait_max_s", c.wait_max_s}});
  }
  nlohmann::json pr = nlohmann::json::object(), rr = nlohmann::json::object();
  for (const auto& [k, v] : r.preemption_reasons) pr[k] = v;
  for (const auto& [k, v] : r.repartition_reasons) rr[k] = v;
  j["preemption_reasons"] = pr;
  j["repartition_reasons"] = rr;
  j["events"] = nlohmann::json::array();
  for (const quota::Event& e : r.notable_events) {
    j["events"].push_back({{"time", e.time},
                           {"kind", quota::EventKindName(e.kind)},
                           {"job", e.job},
                           {"group", e.group},
                           {"detail", e.detail}});
  }
  j["invariant_violations"] = r.invariant_violations;
  j["seconds"] = r.seconds;
  return j;
}

const ClassReport* FindClass(const RunReport& r, WorkloadClass c) {
  return &r.classes[static_cast<int>(c)];
}

}  // namespace

std::string ReportJson(const ScenarioReport& r) {
  nlohmann::json j;
  j["scenario"] = r.scenario;
  j["run"] = RunJson(r.run);
  if (r.baseline) {
    j["baseline"] = RunJson(*r.baseline);
    nlohmann::json cmp = nlohmann::json::array();
    for (int c = 0; c < quota::kClassCount; ++c) {
      const ClassReport* now = FindClass(r.run, static_cast<WorkloadClass>(c));
      const ClassReport* before = FindClass(*r.baseline, static_cast<WorkloadClass>(c));
      if (now->jobs == 0) continue;
      cmp.push_back({{"class", now->name},
                     {"devices_before", before->max_devices},
                     {"devices_now", now->max_devices},
                     {"devices_returned", before->max_devices - now->max_devices},
                     {"wait_max_before_s", before->wait_max_s},
                     {"wait_max_now_s", now->wait_max_s},
                     {"waits_longer", now->wait_max_s > before->wait_max_s}});
    }
    j["comparison"] = cmp;
  }
  return j.dump(2);
}

std::string ReportText(const ScenarioReport& r) {
  std::ostringstream o;
  auto one = [&](const RunReport& x) {
    o << "run '" << x.name << "': " << x.devices << " devices, " << x.jobs << " jobs ("
      << x.rejected << " rejected), " << x.cycles << " cycles in " << x.seconds << " s\n";
    o << "  utilization: compute " << static_cast<int>(x.gpu_compute_utilization * 1000) / 10.0
      << "%, memory " << static_cast<int>(x.gpu_memory_utilization * 1000) / 10.0 << "%\n";
    o << "  preemptions " << x.preemptions << ", repartitions " << x.repartitions << ", backfilled "
      << x.backfilled << "\n";
    if (x.stopped > 0) o << "  stopped by a runtime guard (max_runtime): " << x.stopped << "\n";
    if (x.swapped_out + x.idle_requeued + x.idle_stopped > 0) {
      o << "  idle holdings given back (idle_timeout): " << x.swapped_out << " swapped out, "
        << x.idle_requeued << " requeued, " << x.idle_stopped << " stopped\n";
    }
    if (x.held_swapped > 0) {
      o << "  preempted by swapping: " << x.held_swapped << " held swapped out, " << x.swapped_in
        << " resumed, " << x.hold_stopped << " stopped by swap_hold_limit\n";
    }
    if (x.preemptions + x.held_swapped > 0)
      o << "  work lost to preemption: " << x.lost_gpu_s << " GPU-s\n";
    for (const auto& [k, v] : x.preemption_reasons)
      o << "    preempted: " << k << " x" << v << "\n";
    for (const auto& [k, v] : x.repartition_reasons)
      o << "    repartitioned: " << k << " x" << v << "\n";
    o << "  groups (GPU held max/mean, reservation, wait p50/p99/max, longest time short of "
         "reservation):\n";
    for (const GroupReport& g : x.groups) {
      o << "    " << g.name << ": " << FormatMilli(g.max_gpu_held) << "/"
        << static_cast<int64_t>(g.mean_gpu_held) / 1000.0 << " GPU, reservation "
        << FormatMilli(g.reservation_gpu) << ", waits " << g.wait_p50_s << "/" << g.wait_p99_s
        << "/" << g.wait_max_s << " s, short of reservation at most " << g.reclaim_max_s << " s"
        << (g.never_started ? ", " + std::to_string(g.never_started) + " never started" : "")
        << (g.limit_exceeded ? "  LIMIT EXCEEDED" : "") << "\n";
    }
    if (!x.members.empty()) o << "  users inside groups (weight: mean GPU held per hour):\n";
    for (const MemberReport& m : x.members) {
      o << "    " << m.group << "/" << m.identity << " (" << FormatMilli(m.weight_milli) << "):";
      for (double v : HourlyMean(x, m.gpu_held)) o << " " << std::round(v / 100) / 10;
      o << "\n";
    }
    o << "  devices used per class (peak/mean), waits p50/p99/max:\n";
    for (const ClassReport& c : x.classes) {
      if (c.jobs == 0) continue;
      o << "    " << c.name << ": " << c.max_devices << "/"
        << static_cast<int>(c.mean_devices * 10) / 10.0 << " devices, " << c.jobs << " jobs, waits "
        << c.wait_p50_s << "/" << c.wait_p99_s << "/" << c.wait_max_s << " s\n";
    }
    o << "  invariant violations: " << x.invariant_violations.size() << "\n";
    for (size_t i = 0; i < std::min<size_t>(5, x.invariant_violations.size()); ++i) {
      o << "    " << x.invariant_violations[i] << "\n";
    }
  };
  o << "scenario " << r.scenario << "\n";
  one(r.run);
  if (r.baseline) {
    one(*r.baseline);
    o << "comparison with '" << r.baseline->name << "':\n";
    for (int c = 0; c < quota::kClassCount; ++c) {
      const ClassReport* now = FindClass(r.run, static_cast<WorkloadClass>(c));
      const ClassReport* before = FindClass(*r.baseline, static_cast<WorkloadClass>(c));
      if (now->jobs == 0) continue;
      o << "  " << now->name << ": " << before->max_devices << " devices before, "
        << now->max_devices << " now, " << before->max_devices - now->max_devices
        << " returned to the pool; longest wait " << before->wait_max_s << " s before, "
        << now->wait_max_s << " s now\n";
    }
  }
  return o.str();
}

std::string ReportSvg(const RunReport& r) {
  const int w = 900, h = 360, left = 60, right = 160, top = 20, bottom = 40;
  MilliGpu ymax = 1000;
  for (const GroupReport& g : r.groups) ymax = std::max({ymax, g.max_gpu_held, g.reservation_gpu});
  int64_t tmax = r.sample_times.empty() ? 1 : std::max<int64_t>(1, r.sample_times.back());
  auto X = [&](int64_t t) {
    return left + static_cast<double>(t) / static_cast<double>(tmax) * (w - left - right);
  };
  auto Y = [&](MilliGpu v) {
    return top + (1.0 - static_cast<double>(v) / static_cast<double>(ymax)) * (h - top - bottom);
  };
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                          "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<text x=\"" << left << "\" y=\"14\">GPU held per group over time (" << r.name
    << "); dashed: reservation</text>\n";
  o << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\""
    << h - bottom << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom
    << "\" stroke=\"black\"/>\n";
  o << "<text x=\"4\" y=\"" << top + 10 << "\">" << FormatMilli(ymax) << " GPU</text>\n";
  o << "<text x=\"" << w - right - 40 << "\" y=\"" << h - 10 << "\">"
    << static_cast<double>(tmax) / 3600.0 << " h</text>\n";
  for (size_t g = 0; g < r.groups.size(); ++g) {
    const GroupReport& gr = r.groups[g];
    const char* c = colors[g % 10];
    o << "<polyline fill=\"none\" stroke=\"" << c << "\" points=\"";
    size_t n = gr.gpu_held.size();
    size_t step = std::max<size_t>(1, n / 600);
    for (size_t i = 0; i < n; i += step)
      o << X(r.sample_times[i]) << "," << Y(gr.gpu_held[i]) << " ";
    o << "\"/>\n";
    if (gr.reservation_gpu > 0) {
      o << "<line x1=\"" << left << "\" x2=\"" << w - right << "\" y1=\"" << Y(gr.reservation_gpu)
        << "\" y2=\"" << Y(gr.reservation_gpu) << "\" stroke=\"" << c
        << "\" stroke-dasharray=\"4 3\"/>\n";
    }
    o << "<text x=\"" << w - right + 8 << "\" y=\"" << top + 14 * (g + 1) << "\" fill=\"" << c
      << "\">" << gr.name << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace tessera::sim
