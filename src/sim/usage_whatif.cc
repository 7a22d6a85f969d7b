// RunWhatIfUsage (usage_whatif.h): the plans through the quota engine's cycle, the swap replay
// on the cards the swap plan fills, and the lower bounds.
#include "sim/usage_whatif.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "partition/catalog.h"
#include "sched/quota/engine.h"

namespace tessera::sim::usage {
namespace {

using quota::JobSpec;
using quota::JobState;

enum class Plan { kWhole, kForms, kSwap };

constexpr int64_t kGiB = 1024;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The most GPUs the workloads present at once request: enough cards for any plan.
int64_t PeakRequested(const std::vector<WorkloadRow>& rows, const History& h) {
  std::vector<std::pair<int64_t, int64_t>> ev;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& ss = h.workloads[i].samples;
    if (ss.empty()) continue;
    ev.push_back({ss.front().t_ms, rows[i].gpus});
    ev.push_back({ss.front().t_ms + rows[i].stats.present_ms, -rows[i].gpus});
  }
  std::sort(ev.begin(), ev.end());
  int64_t now = 0, peak = 0;
  for (const auto& [t, d] : ev) {
    now += d;
    peak = std::max(peak, now);
  }
  return peak;
}

quota::PolicySpec PolicyFor(const std::vector<std::string>& groups, int overcommit) {
  quota::PolicySpec p;
  for (const std::string& g : groups) {
    quota::GroupSpec gs;
    gs.name = g;
    p.groups.push_back(gs);
  }
  p.pools.push_back(
      {"default", {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}});
  quota::ProfileSpec any;
  any.name = "any";
  p.profiles.push_back(any);
  using C = quota::WorkloadClass;
  auto queue = [&](const char* name, C cls, int oc) {
    quota::QueueSpec q;
    q.name = name;
    q.profile = "any";
    q.groups = groups;
    q.default_class = cls;
    q.swap_overcommit_percent = oc;
    p.queues.push_back(q);
  };
  queue("training", C::kTraining, 0);
  queue("inference", C::kInference, 0);
  queue("interactive", C::kInteractive, 0);
  queue("swapping", C::kInteractive, overcommit);
  p.class_forms.table[static_cast<int>(C::kInference)] = {AllocationForm::kPartition,
                                                          AllocationForm::kWhole};
  return p;
}

struct Ctx {
  const History* h;
  const std::vector<WorkloadRow>* rows;
  const WhatIfOptions* o;
  int64_t card_mib;
  std::vector<std::string> groups;  // engine group of each team, by team index
  std::vector<int> team_of;         // team index of each workload
  std::vector<std::string> teams;
};

Result<PlanResult> RunPlan(const Ctx& c, Plan plan, int overcommit) {
  const auto& rows = *c.rows;
  const WhatIfOptions& o = *c.o;
  PlanResult r;
  r.name = plan == Plan::kWhole ? "whole" : plan == Plan::kForms ? "forms" : "swap";
  r.overcommit_pct = plan == Plan::kSwap ? overcommit : 0;
  const int64_t peak = std::max<int64_t>(1, PeakRequested(rows, *c.h));
  std::vector<quota::NodeSpec> nodes;
  const int64_t node_count = CeilDiv(peak, o.gpus_per_node);
  for (int64_t n = 0; n < node_count; ++n) {
    quota::NodeSpec ns;
    ns.name = "n" + std::to_string(n);
    ns.pool = "default";
    ns.cpu_milli = 1'000'000;
    ns.memory_mib = 64 * 1024 * kGiB;
    ns.gpu_model = o.card;
    ns.gpu_count = o.gpus_per_node;
    ns.swap_mib = int64_t{o.gpus_per_node} * c.card_mib * 64;  // RAM and disk: never the limit
    nodes.push_back(ns);
  }
  quota::PolicySpec policy = PolicyFor(c.groups, std::max(overcommit, 100));
  // The placement core (sched/policy.h) fits shares' caps in a device's memory and knows no
  // overcommit: swapping shares are placed by the cycle's own search, which does.
  if (plan == Plan::kSwap) policy.placement = "nextfit";
  auto created = quota::QuotaEngine::Create(policy, nodes);
  if (!created.ok()) return created.status();
  quota::QuotaEngine& e = **created;
  // Arrivals and departures, in seconds since the start.
  std::map<int64_t, std::vector<int>> arrive, depart;
  std::vector<int64_t> arrive_ms(rows.size()), depart_ms(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& ss = c.h->workloads[i].samples;
    if (ss.empty()) continue;
    arrive_ms[i] = ss.front().t_ms - c.h->start_ms;
    depart_ms[i] = arrive_ms[i] + rows[i].stats.present_ms;
    arrive[arrive_ms[i] / 1000].push_back(static_cast<int>(i));
    depart[CeilDiv(depart_ms[i], 1000)].push_back(static_cast<int>(i));
  }
  std::set<int64_t> times;
  for (const auto& [t, v] : arrive) times.insert(t);
  for (const auto& [t, v] : depart) times.insert(t);
  std::vector<int> handle(rows.size(), -1);
  std::vector<int64_t> placed_ms(rows.size(), -1);
  std::vector<std::vector<quota::GrantView>> grants(rows.size());
  std::vector<int> pending;
  std::map<std::pair<std::string, int>, int> on_device;  // (node, device) -> holders
  std::vector<int64_t> start_waits;
  auto note_cards = [&](int64_t t_s) {
    const int64_t n = static_cast<int64_t>(on_device.size());
    if (r.cards_over_time.empty() || r.cards_over_time.back().value != n) {
      if (!r.cards_over_time.empty() && r.cards_over_time.back().t_ms == t_s * 1000) {
        r.cards_over_time.back().value = n;
      } else {
        r.cards_over_time.push_back({t_s * 1000, n});
      }
    }
    r.cards = std::max(r.cards, static_cast<int>(n));
  };
  auto cycle = [&](int64_t t) {
    e.RunCycle(t);
    for (size_t k = 0; k < pending.size();) {
      const int i = pending[k];
      if (e.job_state(handle[static_cast<size_t>(i)]) != JobState::kRunning) {
        ++k;
        continue;
      }
      std::optional<AllocationForm> form;
      bool borrowed = false;
      e.HeldOf(handle[static_cast<size_t>(i)], &grants[static_cast<size_t>(i)], &form, &borrowed);
      for (const auto& g : grants[static_cast<size_t>(i)]) ++on_device[{g.node, g.device}];
      placed_ms[static_cast<size_t>(i)] = t * 1000;
      start_waits.push_back(t * 1000 - arrive_ms[static_cast<size_t>(i)]);
      if (form == AllocationForm::kWhole) ++r.whole;
      if (form == AllocationForm::kPartition) ++r.partitions;
      if (form == AllocationForm::kShare) ++r.shares;
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
    }
    e.ClearEvents();
    note_cards(t);
  };
  for (auto it = times.begin(); it != times.end(); ++it) {
    const int64_t t = *it;
    if (auto d = depart.find(t); d != depart.end()) {
      for (int i : d->second) {
        const int hd = handle[static_cast<size_t>(i)];
        if (hd < 0) continue;
        if (e.job_state(hd) == JobState::kRunning) {
          for (const auto& g : grants[static_cast<size_t>(i)]) {
            auto k = on_device.find({g.node, g.device});
            if (--k->second == 0) on_device.erase(k);
          }
          e.Complete(hd, t);
        } else {
          e.Cancel(hd, t, "departed before it was placed");
          pending.erase(std::remove(pending.begin(), pending.end(), i), pending.end());
        }
      }
    }
    if (auto a = arrive.find(t); a != arrive.end()) {
      for (int i : a->second) {
        const WorkloadRow& w = rows[static_cast<size_t>(i)];
        JobSpec j;
        j.id = "w" + std::to_string(i);
        j.identity = "fleet";
        j.group = c.groups[static_cast<size_t>(c.team_of[static_cast<size_t>(i)])];
        j.cpu_milli = 0;
        j.memory_mib = 0;
        if (plan == Plan::kWhole || w.cls == "training") {
          j.queue = "training";
          j.gpu_count = w.gpus;
        } else {
          j.queue = w.cls == "inference"  ? "inference"
                    : plan == Plan::kSwap ? "swapping"
                                          : "interactive";
          j.gpu_memory_mib = w.cap_mib;
          j.gpu_milli = w.compute_milli;
        }
        auto hd = e.Submit(j, t);
        if (!hd.ok()) {
          ++r.rejected;
          continue;
        }
        handle[static_cast<size_t>(i)] = *hd;
        pending.push_back(i);
      }
    }
    cycle(t);
    const int64_t next = std::next(it) == times.end() ? t + 3600 : *std::next(it);
    for (int64_t u = t + o.cycle_s; !pending.empty() && u < next; u += o.cycle_s) cycle(u);
  }
  r.rejected += static_cast<int64_t>(pending.size());
  r.start_wait_p99_ms = Percentile(start_waits, 990);
  // Swap replay on each device that holds swapping shares.
  std::map<std::pair<std::string, int>, std::vector<int>> swap_cards;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (placed_ms[i] < 0) continue;
    const bool swapping = plan == Plan::kSwap && rows[i].cls == "interactive" &&
                          rows[i].stats.duty_pm < o.swap_duty_pm;
    if (swapping) {
      ++r.swapping;
      swap_cards[{grants[i][0].node, grants[i][0].device}].push_back(static_cast<int>(i));
    }
  }
  std::vector<int64_t> resident_ms(rows.size(), -1);
  std::vector<int64_t> wakes, activations, returns;
  for (auto& [dev, ids] : swap_cards) {
    std::vector<SwapOccupant> occ;
    for (int i : ids) {
      const size_t u = static_cast<size_t>(i);
      SwapOccupant so;
      so.cap_mib = grants[u][0].memory;
      so.arrive_ms = placed_ms[u];
      so.depart_ms = std::max(depart_ms[u], placed_ms[u]);
      so.active = rows[u].stats.active;
      for (Span& s : so.active) {
        s.from_ms -= c.h->start_ms;
        s.to_ms -= c.h->start_ms;
      }
      occ.push_back(std::move(so));
    }
    SwapCardResult cr = ReplaySwapCard(&occ, c.card_mib, o);
    for (size_t k = 0; k < ids.size(); ++k)
      resident_ms[static_cast<size_t>(ids[k])] = occ[k].resident_ms;
    wakes.insert(wakes.end(), cr.wakes_us.begin(), cr.wakes_us.end());
    activations.insert(activations.end(), cr.activations_us.begin(), cr.activations_us.end());
    returns.insert(returns.end(), cr.returns_us.begin(), cr.returns_us.end());
    r.preemptions += cr.preemptions;
    r.waits_for_room += cr.waits_for_room;
    r.swap_outs += cr.swap_outs;
    r.swapped_mib += cr.swapped_mib;
    r.disk_swap_outs += cr.disk_swap_outs;
    r.peak_host_mib = std::max(r.peak_host_mib, cr.peak_host_mib);
  }
  r.wakes = static_cast<int64_t>(wakes.size());
  r.wake_p50_ms = Percentile(wakes, 500) / 1000;
  r.wake_p99_ms = CeilDiv(Percentile(wakes, 990), 1000);
  r.wake_max_ms = wakes.empty() ? 0 : CeilDiv(*std::max_element(wakes.begin(), wakes.end()), 1000);
  r.activation_p99_ms = CeilDiv(Percentile(activations, 990), 1000);
  r.activations = static_cast<int64_t>(activations.size());
  r.return_p99_ms = CeilDiv(Percentile(returns, 990), 1000);
  // Held: whole cards and partitions their compute for their time; shares the larger of their
  // compute weight and their memory's part of the card, the memory only while on the card.
  for (size_t i = 0; i < rows.size(); ++i) {
    TeamHours& th = r.teams[c.teams[static_cast<size_t>(c.team_of[i])]];
    ++th.workloads;
    th.used_gpu_milli_ms += rows[i].stats.used_gpu_milli_ms;
    if (placed_ms[i] < 0) continue;
    const int64_t life = std::max<int64_t>(0, depart_ms[i] - placed_ms[i]);
    for (const auto& g : grants[i]) {
      if (g.slot.empty() && g.compute >= kWholeGpu) {
        th.held_gpu_milli_ms += kWholeGpu * life;
      } else {
        const int64_t on_card = resident_ms[i] >= 0 ? resident_ms[i] : life;
        th.held_gpu_milli_ms +=
            std::max(g.compute * life, CeilDiv(g.memory * kWholeGpu, c.card_mib) * on_card);
      }
    }
  }
  return r;
}

// The lower bounds, on a grid of one step.
void LowerBounds(const History& h, const std::vector<WorkloadRow>& rows, int64_t card_mib,
                 WhatIfUsage* out) {
  const int64_t step = h.step_ms;
  const size_t n = static_cast<size_t>(CeilDiv(h.end_ms - h.start_ms, step)) + 1;
  std::vector<int64_t> mem(n, 0), util(n, 0);
  for (size_t w = 0; w < rows.size(); ++w) {
    const auto& ss = h.workloads[w].samples;
    // Per bucket, the workload's largest sample there.
    int64_t cur = -1, cur_mem = 0, cur_util = 0;
    auto flush = [&] {
      if (cur < 0) return;
      mem[static_cast<size_t>(cur)] += cur_mem;
      util[static_cast<size_t>(cur)] += cur_util;
    };
    for (size_t i = 0; i < ss.size(); ++i) {
      const Sample& x = ss[i];
      const bool active = x.util_pm >= 0 ? x.util_pm >= out->options.active_util_pm : x.mem_mib > 0;
      if (!active) continue;
      const int64_t next = i + 1 < ss.size() ? ss[i + 1].t_ms : x.t_ms + step;
      const int64_t to = x.t_ms + std::min(next - x.t_ms, h.max_gap_ms);
      const int64_t m = std::max<int64_t>(0, x.mem_mib);
      const int64_t u = int64_t{std::max(0, x.util_pm)} * rows[w].gpus;
      for (int64_t b = (x.t_ms - h.start_ms) / step; b < CeilDiv(to - h.start_ms, step); ++b) {
        if (b != cur) {
          flush();
          cur = b;
          cur_mem = cur_util = 0;
        }
        cur_mem = std::max(cur_mem, m);
        cur_util = std::max(cur_util, u);
      }
    }
    flush();
  }
  const size_t bins = std::min<size_t>(n, 600);
  out->lb_over_time.assign(bins, {});
  for (size_t b = 0; b < n; ++b) {
    const int64_t mc = CeilDiv(mem[b], card_mib), uc = CeilDiv(util[b], kWholeGpu);
    out->lb_memory_cards = std::max(out->lb_memory_cards, static_cast<int>(mc));
    out->lb_util_gpus = std::max(out->lb_util_gpus, static_cast<int>(uc));
    Point& p = out->lb_over_time[b * bins / n];
    p.t_ms = static_cast<int64_t>(b * bins / n) * (static_cast<int64_t>(n) * step) /
             static_cast<int64_t>(bins);
    p.value = std::max(p.value, mc);
  }
  out->lb_cards = out->lb_memory_cards;
}

}  // namespace

int64_t Percentile(std::vector<int64_t> v, int per_mille) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * static_cast<size_t>(per_mille) / 1000)];
}

Status ValidateWhatIfOptions(const WhatIfOptions& o) {
  if (o.gpus_per_node < 1) return Status::InvalidArgument("gpus per node: at least 1");
  if (o.host_mbps < 1 || o.disk_mbps < 1) return Status::InvalidArgument("bandwidths: positive");
  if (o.host_ram_mib < 0) return Status::InvalidArgument("host RAM: not negative");
  if (o.headroom_pct < 0 || o.headroom_pct > 1000)
    return Status::InvalidArgument("headroom: a percentage from 0 to 1000");
  if (o.active_util_pm < 1 || o.active_util_pm > 1000)
    return Status::InvalidArgument("active utilization: from 0.1% to 100%");
  if (o.busy_duty_pm < 0 || o.busy_duty_pm > 1001 || o.swap_duty_pm < 0 || o.swap_duty_pm > 1001)
    return Status::InvalidArgument("busy and swap duty: a per-mille from 0 to 1000");
  if (o.idle_ms < 0 || o.wake_p99_limit_ms < 0 || o.slice_ms < 0)
    return Status::InvalidArgument("times: not negative");
  if (o.overcommits.empty()) return Status::InvalidArgument("overcommits: at least one");
  for (int oc : o.overcommits) {
    if (oc < 100 || oc > 10000) return Status::InvalidArgument("overcommit: from 100% to 10000%");
  }
  if (o.cycle_s < 1) return Status::InvalidArgument("cycle: at least 1 s");
  return Status::Ok();
}

Result<WhatIfUsage> RunWhatIfUsage(History history, const WhatIfOptions& o) {
  const auto started = std::chrono::steady_clock::now();
  if (Status s = ValidateWhatIfOptions(o); !s.ok()) return s;
  auto model = partition::Catalog::BuiltIn().Lookup(o.card);
  if (!model.ok()) return Status::InvalidArgument("--card: " + model.status().message());
  WhatIfUsage out;
  out.options = o;
  out.options.card = (*model)->name;
  out.card_memory_mib = (*model)->memory_mib;
  if (Status s = Normalize(&history, o.step_ms, o.max_gap_ms); !s.ok()) return s;
  out.history = std::move(history);
  const History& h = out.history;
  Ctx c{&h, &out.workloads, &out.options, out.card_memory_mib, {}, {}, {}};
  std::map<std::string, int> team_index;
  for (const Series& s : h.workloads) {
    WorkloadRow row;
    row.name = s.name;
    row.team = s.team;
    row.gpus = s.gpus;
    row.stats = Analyze(s, h.step_ms, h.max_gap_ms, o.active_util_pm);
    row.cls = s.gpus > 1                            ? "training"
              : row.stats.duty_pm >= o.busy_duty_pm ? "inference"
                                                    : "interactive";
    const int64_t want =
        CeilDiv(std::max<int64_t>(1, row.stats.peak_mem_mib) * (100 + o.headroom_pct), 100);
    row.cap_mib = std::min(CeilDiv(want, kGiB) * kGiB, out.card_memory_mib);
    row.compute_milli =
        std::clamp<int64_t>(CeilDiv(row.stats.mean_util_pm, 10) * 10, 10, kWholeGpu);
    auto [it, added] = team_index.try_emplace(s.team, static_cast<int>(c.teams.size()));
    if (added) {
      c.teams.push_back(s.team);
      c.groups.push_back("team" + std::to_string(c.teams.size()));
    }
    c.team_of.push_back(it->second);
    out.used_gpu_milli_ms += row.stats.used_gpu_milli_ms;
    if (h.end_ms > h.start_ms) {
      out.duty_sum_milli += row.stats.active_ms * kWholeGpu * row.gpus / (h.end_ms - h.start_ms);
    }
    out.workloads.push_back(std::move(row));
  }
  LowerBounds(h, out.workloads, out.card_memory_mib, &out);
  auto whole = RunPlan(c, Plan::kWhole, 0);
  if (!whole.ok()) return whole.status();
  out.whole = std::move(*whole);
  auto forms = RunPlan(c, Plan::kForms, 0);
  if (!forms.ok()) return forms.status();
  out.forms = std::move(*forms);
  bool chosen = false;
  for (int oc : o.overcommits) {
    auto s = RunPlan(c, Plan::kSwap, oc);
    if (!s.ok()) return s.status();
    const bool within = s->wake_p99_ms <= o.wake_p99_limit_ms && s->rejected == 0;
    if (within && (!chosen || s->cards < out.swap.cards)) {
      out.swap = *s;
      chosen = true;
    }
    out.swap_tried.push_back(std::move(*s));
  }
  out.swap_within_limit = chosen;
  if (!chosen) {  // none within the limit: the one with the shortest waits
    out.swap = *std::min_element(
        out.swap_tried.begin(), out.swap_tried.end(),
        [](const PlanResult& a, const PlanResult& b) { return a.wake_p99_ms < b.wake_p99_ms; });
  }
  // Samples are no longer needed; keep the history's counts.
  for (Series& s : out.history.workloads) std::vector<Sample>().swap(s.samples);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace tessera::sim::usage
