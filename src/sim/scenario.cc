// Scenario runs: a Scenario fed through the quota engine on a virtual clock, cycle by cycle, into a
// report (RunOnce, RunScenario).
#include "sim/scenario.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include "model/quantity.h"

namespace tessera::sim {
namespace {

using quota::WorkloadClass;

int64_t Percentile(std::vector<int64_t> v, int pct) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = (v.size() * static_cast<size_t>(pct) + 99) / 100;
  if (idx > 0) --idx;
  return v[std::min(idx, v.size() - 1)];
}

// The kind of a preemption or repartition, without the job-specific parts.
std::string Reason(const quota::Event& e) {
  const std::string& d = e.detail;
  if (e.kind == quota::EventKind::kPreempted) {
    if (d.rfind("reclaim", 0) == 0) return "reclaim: a group below its reservation took it back";
    if (d.rfind("idle_timeout", 0) == 0) return "idle past its queue's idle_timeout: requeued";
    if (d.rfind("priority", 0) == 0) return "priority preemption inside the group";
    if (d.rfind("drain", 0) == 0) return "drained for a repartition";
    return d.substr(0, d.find(';'));
  }
  if (d.find("created") != std::string::npos) return "instance created on free slices";
  if (d.find("MIG enabled") != std::string::npos) return "MIG enabled on an idle device";
  if (d.find("compute mode") != std::string::npos) return "AMD compute mode set on an idle device";
  if (d.find("node-wide") != std::string::npos) return "AMD memory mode changed (node drained)";
  return "layout changed after draining";
}

struct Arrival {
  int64_t time = 0;
  quota::JobSpec spec;
  int64_t duration = 0;
  MilliGpu nominal_gpu = 0;
  int64_t idle_after = -1;
};

// The jobs of one workload entry, numbered "IDENTITY-ENTRY-I".
void AddArrivals(const WorkloadEntry& w, size_t k, const quota::ProfileSpec* prof,
                 std::vector<Arrival>* arrivals) {
  for (int i = 0; i < w.count; ++i) {
    Arrival a;
    a.time = w.at_s + w.interval_s * i;
    a.spec = w.base;
    a.spec.id = w.base.identity + "-" + std::to_string(k) + "-" + std::to_string(i);
    a.duration = w.durations_s[static_cast<size_t>(i) % w.durations_s.size()];
    if (!w.gpu_memory_mib.empty()) {
      a.spec.gpu_memory_mib = w.gpu_memory_mib[static_cast<size_t>(i) % w.gpu_memory_mib.size()];
    }
    a.spec.walltime_s = !w.declare_walltime ? 0 : w.walltime_s >= 0 ? w.walltime_s : a.duration;
    a.idle_after = w.idle_after_s;
    int count = a.spec.gpu_count.value_or(prof ? prof->gpu_count : 1);
    MilliGpu milli = a.spec.gpu_milli.value_or(prof ? prof->gpu_milli : kWholeGpu);
    a.nominal_gpu = count * milli;
    arrivals->push_back(std::move(a));
  }
}

// The arrivals, in time order.
std::vector<Arrival> Arrivals(const Scenario& s) {
  std::map<std::string, const quota::ProfileSpec*> profile_of_queue;
  for (const quota::QueueSpec& q : s.policy.queues) {
    for (const quota::ProfileSpec& p : s.policy.profiles) {
      if (p.name == q.profile) profile_of_queue[q.name] = &p;
    }
  }
  std::vector<Arrival> arrivals;
  for (size_t k = 0; k < s.workload.size(); ++k) {
    const WorkloadEntry& w = s.workload[k];
    const quota::ProfileSpec* prof =
        profile_of_queue.count(w.base.queue) ? profile_of_queue[w.base.queue] : nullptr;
    AddArrivals(w, k, prof, &arrivals);
  }
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const Arrival& a, const Arrival& b) { return a.time < b.time; });
  return arrivals;
}

struct SimJob {
  int group = 0;
  int cls = 0;
  int64_t submit = 0, duration = 0, start = -1;
  int64_t idle_after = -1;
  MilliGpu nominal = 0;
  bool started_once = false;
  bool pending = false;
  int64_t worked = 0;  // run before being held swapped out (preemption by swapping): not lost
  // All the time it waited: from submission, and from each requeue or hold, to its placement.
  int64_t waited = 0, pending_since = -1;
};

// One run on the virtual clock: feeds the engine arrivals and completions cycle by cycle and
// builds the report from its events and samples.
class ScenarioRun {
 public:
  ScenarioRun(const Scenario& s, quota::QuotaEngine& e, const std::string& name,
              verify::Checker& checker)
      : s_(s), e_(e), checker_(checker), arrivals_(Arrivals(s)) {
    InitReport(name);
  }

  void Cycle(int64_t t) {
    FeedUntil(t);
    Outages(t);
    quota::CycleStats cs = e_.RunCycle(t);
    ++r_.cycles;
    r_.backfilled += cs.backfilled;
    FollowEvents();
    checker_.AfterCycle(e_, t);
    r_.sample_times.push_back(t);
    SampleGroups(t);
    SampleDevices();
  }

  RunReport Finish() {
    CloseReclaims();
    double cycles = static_cast<double>(std::max<int64_t>(r_.cycles, 1));
    r_.gpu_compute_utilization = gpu_util_sum_ / cycles;
    r_.gpu_memory_utilization = mem_util_sum_ / cycles;
    CountJobs();
    Summarize(cycles);
    r_.preemption_reasons.assign(preempt_reasons_.begin(), preempt_reasons_.end());
    r_.repartition_reasons.assign(repart_reasons_.begin(), repart_reasons_.end());
    return std::move(r_);
  }

 private:
  using Completion = std::tuple<int64_t, int, int64_t>;  // end, handle, start

  // Nodes lost (what they held goes back to pending) and returned, up to t.
  void Outages(int64_t t) {
    for (const Outage& o : s_.outages) {
      const bool down = o.at_s <= t && t < o.at_s + o.for_s;
      if (down == down_[o.node]) continue;
      down_[o.node] = down;
      e_.SetNodeDown(o.node, down);
      checker_.NodeDown(o.node, down);
      if (!down) continue;
      std::vector<quota::GrantView> grants;
      for (int h = 0; h < e_.job_count(); ++h) {
        quota::JobState st = e_.job_state(h);
        if (st != quota::JobState::kRunning && st != quota::JobState::kTerminating) continue;
        e_.HeldOf(h, &grants, nullptr, nullptr);
        bool there = std::any_of(grants.begin(), grants.end(),
                                 [&](const quota::GrantView& g) { return g.node == o.node; });
        if (there) e_.Requeue(h, t, "node " + o.node + " lost");
      }
    }
  }

  void InitReport(const std::string& name) {
    r_.name = name;
    r_.devices = e_.device_count();
    std::vector<quota::GroupView> gv = e_.groups();
    for (size_t g = 0; g < gv.size(); ++g) {
      group_index_[gv[g].name] = static_cast<int>(g);
      GroupReport gr;
      gr.name = gv[g].name;
      gr.reservation_gpu = gv[g].reservation.gpu_milli;
      gr.limit_gpu = gv[g].limit.gpu_milli;
      r_.groups.push_back(gr);
    }
    for (int c = 0; c < quota::kClassCount; ++c) {
      ClassReport cr;
      cr.name = quota::WorkloadClassName(static_cast<WorkloadClass>(c));
      r_.classes.push_back(cr);
    }
    group_waits_.resize(r_.groups.size());
    class_waits_.resize(quota::kClassCount);
    pending_gpu_.resize(r_.groups.size());
    short_since_.assign(r_.groups.size(), -1);
    class_dev_sum_.assign(quota::kClassCount, 0);
    group_held_sum_.assign(r_.groups.size(), 0);
  }

  // Completions, runtime-guard stops (at their exact second: a job ending then completes) and
  // arrivals up to t, in time order.
  void FeedUntil(int64_t t) {
    while (true) {
      bool has_arrival = next_ < arrivals_.size() && arrivals_[next_].time <= t;
      bool has_done = !completions_.empty() && std::get<0>(completions_.top()) <= t;
      // Idleness (idle_after) and the idle guard's give-backs, at their exact seconds: before
      // what happens later, after a completion at the same second.
      int64_t later = t;
      if (has_arrival) later = std::min(later, arrivals_[next_].time);
      if (has_done) later = std::min(later, std::get<0>(completions_.top()));
      if (!idles_.empty() && std::get<0>(idles_.top()) <= later &&
          !(has_done && std::get<0>(completions_.top()) == std::get<0>(idles_.top()))) {
        auto [at, h, start] = idles_.top();
        idles_.pop();
        if (e_.job_state(h) == quota::JobState::kRunning && jobs_[h].start == start)
          e_.SetIdle(h, at);
        continue;
      }
      const int64_t give_back = e_.NextIdleGiveBack();
      if (give_back >= 0 && give_back <= later &&
          !(has_done && std::get<0>(completions_.top()) <= give_back)) {
        e_.GiveBackIdle(give_back);
        continue;
      }
      const int64_t stop = e_.NextRuntimeStop();
      if (stop >= 0 && stop <= t && (!has_done || stop < std::get<0>(completions_.top())) &&
          (!has_arrival || stop <= arrivals_[next_].time)) {
        e_.StopOverRuntime(stop);
        continue;
      }
      if (!has_arrival && !has_done) break;
      if (has_done && (!has_arrival || std::get<0>(completions_.top()) <= arrivals_[next_].time)) {
        auto [end, h, start] = completions_.top();
        completions_.pop();
        quota::JobState st = e_.job_state(h);
        // A job preempted and placed again since has a newer completion of its own.
        if ((st == quota::JobState::kRunning || st == quota::JobState::kTerminating) &&
            jobs_[h].start == start) {
          e_.Complete(h, end);
        }
        continue;
      }
      Arrive(arrivals_[next_++]);
    }
  }

  void Arrive(const Arrival& a) {
    auto h = e_.Submit(a.spec, a.time);
    ++r_.jobs;
    if (!h.ok()) {
      ++r_.rejected;
      return;
    }
    checker_.Submitted(*h, a.spec);
    if (static_cast<size_t>(*h) >= jobs_.size()) jobs_.resize(*h + 1);
    SimJob& sj = jobs_[*h];
    auto gi = group_index_.find(e_.job(*h).group);
    sj.group = gi->second;
    sj.cls = static_cast<int>(e_.job(*h).cls);
    sj.submit = a.time;
    sj.duration = a.duration;
    sj.idle_after = a.idle_after;
    sj.nominal = a.nominal_gpu;
    handle_of_[a.spec.id] = *h;
  }

  // Follow the events of this step.
  void FollowEvents() {
    const std::vector<quota::Event>& ev = e_.events();
    for (; cursor_ < ev.size(); ++cursor_) {
      const quota::Event& x = ev[cursor_];
      if (x.kind == quota::EventKind::kSwappedOut) {
        ++(x.for_job.empty() ? r_.swapped_out : r_.held_swapped);
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        if (!x.for_job.empty()) Held(x);
        continue;
      }
      if (x.kind == quota::EventKind::kSwappedIn) {
        ++r_.swapped_in;
        continue;
      }
      if (x.kind == quota::EventKind::kPreempted) {
        r_.lost_gpu_s += LostGpuSeconds(x.detail);
        if (x.detail.rfind("idle_timeout:", 0) == 0) ++r_.idle_requeued;
        ++r_.preemptions;
        ++preempt_reasons_[Reason(x)];
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        continue;
      }
      if (x.kind == quota::EventKind::kStopped) {
        const bool hold = x.detail.rfind("swap_hold_limit", 0) == 0;
        if (hold) Unpend(x);
        ++(hold                                      ? r_.hold_stopped
           : x.detail.rfind("idle_timeout:", 0) == 0 ? r_.idle_stopped
                                                     : r_.stopped);
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        continue;
      }
      if (x.kind == quota::EventKind::kRepartitioned) {
        ++r_.repartitions;
        ++repart_reasons_[Reason(x)];
        if (r_.notable_events.size() < 50) r_.notable_events.push_back(x);
        continue;
      }
      OnJobEvent(x);
    }
  }

  // "...; lost 12 GPU-s; ..." in a preemption's detail: 12.
  static int64_t LostGpuSeconds(const std::string& detail) {
    const size_t at = detail.find("; lost ");
    return at == std::string::npos ? 0 : std::atoll(detail.c_str() + at + 7);
  }

  // Preempted and held swapped out: what it ran is kept; pending until it resumes.
  void Held(const quota::Event& x) {
    auto it = handle_of_.find(x.job);
    if (it == handle_of_.end()) return;
    SimJob& sj = jobs_[it->second];
    if (sj.start >= 0) sj.worked += x.time - sj.start;
    sj.start = -1;  // its completion as placed then no longer counts
    sj.pending = true;
    sj.pending_since = x.time;
    pending_gpu_[sj.group].insert(sj.nominal);
  }

  // Held and stopped (swap_hold_limit): no longer waiting.
  void Unpend(const quota::Event& x) {
    auto it = handle_of_.find(x.job);
    if (it == handle_of_.end()) return;
    SimJob& sj = jobs_[it->second];
    if (!sj.pending) return;
    pending_gpu_[sj.group].erase(pending_gpu_[sj.group].find(sj.nominal));
    sj.pending = false;
    if (sj.pending_since >= 0) sj.waited += x.time - sj.pending_since;
    sj.pending_since = -1;
  }

  void OnJobEvent(const quota::Event& x) {
    auto it = handle_of_.find(x.job);
    if (it == handle_of_.end()) return;
    SimJob& sj = jobs_[it->second];
    if (x.kind == quota::EventKind::kSubmitted || x.kind == quota::EventKind::kRequeued) {
      sj.pending = true;
      sj.pending_since = x.time;
      pending_gpu_[sj.group].insert(sj.nominal);
    } else if (x.kind == quota::EventKind::kPlaced) {
      if (sj.pending) {
        pending_gpu_[sj.group].erase(pending_gpu_[sj.group].find(sj.nominal));
        sj.pending = false;
      }
      if (sj.pending_since >= 0) sj.waited += x.time - sj.pending_since;
      sj.pending_since = -1;
      sj.start = x.time;
      // Resumed after being held swapped out: only what it had left to run.
      completions_.push(
          {x.time + std::max<int64_t>(sj.duration - sj.worked, 0), it->second, x.time});
      if (sj.idle_after >= 0 && sj.idle_after < sj.duration)
        idles_.push({x.time + sj.idle_after, it->second, x.time});
      sj.started_once = true;
    }
  }

  void SampleGroups(int64_t t) {
    const std::vector<quota::MemberView> mv = e_.members();
    for (size_t m = 0; m < mv.size(); ++m) {
      if (m >= r_.members.size()) {
        r_.members.push_back({mv[m].group, mv[m].identity, mv[m].weight_milli, {}});
        r_.members.back().gpu_held.assign(r_.sample_times.size() - 1, 0);  // not seen before
      }
      r_.members[m].gpu_held.push_back(mv[m].usage.gpu_milli);
    }
    std::vector<quota::GroupView> gv = e_.groups();
    for (size_t g = 0; g < gv.size(); ++g) {
      GroupReport& gr = r_.groups[g];
      MilliGpu held = gv[g].usage.gpu_milli;
      gr.gpu_held.push_back(held);
      gr.max_gpu_held = std::max(gr.max_gpu_held, held);
      for (auto& [model, m] : gr.model_held) m = 0;
      for (const quota::ModelQuotaView& m : gv[g].models) {
        gr.model_held[m.model] = m.usage;
        gr.max_model_held[m.model] = std::max(gr.max_model_held[m.model], m.usage);
      }
      group_held_sum_[g] += static_cast<double>(held);
      if (held > gv[g].limit.gpu_milli) gr.limit_exceeded = true;
      // Short of its reservation while asking for something inside it?
      MilliGpu room = gv[g].reservation.gpu_milli - held;
      bool shorted = room > 0 && !pending_gpu_[g].empty() && *pending_gpu_[g].begin() <= room;
      if (shorted && short_since_[g] < 0) short_since_[g] = t;
      if (!shorted && short_since_[g] >= 0) {
        gr.reclaim_times_s.push_back(t - short_since_[g]);
        gr.reclaim_max_s = std::max(gr.reclaim_max_s, t - short_since_[g]);
        short_since_[g] = -1;
      }
    }
  }

  void SampleDevices() {
    Resources a = e_.allocated();
    gpu_util_sum_ += static_cast<double>(a.gpu_milli) /
                     static_cast<double>(std::max<MilliGpu>(e_.gpu_capacity(), 1));
    mem_util_sum_ += static_cast<double>(a.gpu_memory_mib) /
                     static_cast<double>(std::max<MiB>(e_.gpu_memory_capacity(), 1));
    std::vector<int> used = e_.devices_used_by_class();
    for (int c = 0; c < quota::kClassCount; ++c) {
      r_.classes[c].max_devices = std::max(r_.classes[c].max_devices, used[c]);
      class_dev_sum_[c] += used[c];
    }
  }

  // Still short at the end: count the open interval too.
  void CloseReclaims() {
    for (size_t g = 0; g < r_.groups.size(); ++g) {
      if (short_since_[g] >= 0) {
        int64_t d = r_.sample_times.empty() ? 0 : r_.sample_times.back() - short_since_[g];
        r_.groups[g].reclaim_times_s.push_back(d);
        r_.groups[g].reclaim_max_s = std::max(r_.groups[g].reclaim_max_s, d);
      }
    }
  }

  void CountJobs() {
    for (size_t h = 0; h < jobs_.size(); ++h) {
      const SimJob& sj = jobs_[h];
      GroupReport& gr = r_.groups[sj.group];
      ++gr.jobs;
      ++r_.classes[sj.cls].jobs;
      if (sj.started_once) {
        ++gr.started;
        // Each wait, the one after a requeue too; still waiting at the end, until the end.
        const int64_t w = sj.waited + (sj.pending_since >= 0 ? s_.until_s - sj.pending_since : 0);
        group_waits_[sj.group].push_back(w);
        class_waits_[sj.cls].push_back(w);
      } else {
        ++gr.never_started;
        // A job that never started waited at least until the end.
        int64_t w = s_.until_s - sj.submit;
        group_waits_[sj.group].push_back(w);
        class_waits_[sj.cls].push_back(w);
      }
    }
  }

  void Summarize(double cycles) {
    for (size_t g = 0; g < r_.groups.size(); ++g) {
      GroupReport& gr = r_.groups[g];
      gr.mean_gpu_held = group_held_sum_[g] / cycles;
      gr.wait_p50_s = Percentile(group_waits_[g], 50);
      gr.wait_p99_s = Percentile(group_waits_[g], 99);
      gr.wait_max_s = Percentile(group_waits_[g], 100);
    }
    for (int c = 0; c < quota::kClassCount; ++c) {
      ClassReport& cr = r_.classes[c];
      cr.mean_devices = class_dev_sum_[c] / cycles;
      cr.wait_p50_s = Percentile(class_waits_[c], 50);
      cr.wait_p99_s = Percentile(class_waits_[c], 99);
      cr.wait_max_s = Percentile(class_waits_[c], 100);
    }
  }

  const Scenario& s_;
  quota::QuotaEngine& e_;
  verify::Checker& checker_;
  std::map<std::string, bool> down_;
  const std::vector<Arrival> arrivals_;
  RunReport r_;
  std::map<std::string, int> group_index_;
  std::vector<SimJob> jobs_;  // by engine handle
  std::unordered_map<std::string, int> handle_of_;
  std::vector<std::vector<int64_t>> group_waits_, class_waits_;
  // Pending nominal GPU per group, for "demand within the reservation".
  std::vector<std::multiset<MilliGpu>> pending_gpu_;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions_;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> idles_;  // idle_after
  std::map<std::string, int64_t> preempt_reasons_, repart_reasons_;
  std::vector<int64_t> short_since_;
  double gpu_util_sum_ = 0, mem_util_sum_ = 0;
  std::vector<double> class_dev_sum_;
  std::vector<double> group_held_sum_;
  size_t next_ = 0, cursor_ = 0;
};

}  // namespace

Result<RunReport> RunOnce(const Scenario& s, const std::string& name, RunOptions o) {
  auto started = std::chrono::steady_clock::now();
  auto created = quota::QuotaEngine::Create(
      s.policy, s.nodes,
      {.check_invariants_each_step = o.check_invariants_each_step, .engine_break = o.engine_break});
  if (!created.ok()) return created.status();
  quota::QuotaEngine& e = **created;
  verify::Checker checker(s.policy, s.nodes,
                          {.cycle_s = s.cycle_s,
                           .grace_s = s.policy.grace_seconds,
                           .max_reconfigurations_per_hour = o.max_reconfigurations_per_hour});
  ScenarioRun run(s, e, name, checker);
  for (int64_t t = 0; t <= s.until_s; t += s.cycle_s) run.Cycle(t);
  checker.Finish(s.until_s);
  RunReport r = run.Finish();
  r.invariant_violations = e.violations();
  r.promises = checker.violations();
  r.seen = checker.seen();
  for (const verify::Violation& v : r.promises) r.invariant_violations.push_back(v.ToString());
  Status final_check = e.CheckInvariants();
  if (!final_check.ok()) r.invariant_violations.push_back("at end: " + final_check.message());
  if (o.events != nullptr) *o.events = e.events();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return r;
}

Result<ScenarioReport> RunScenario(const Scenario& s, RunOptions o) {
  ScenarioReport out;
  out.scenario = s.name;
  auto run = RunOnce(s, "policy", o);
  if (!run.ok()) return run.status();
  out.run = std::move(run).value();
  if (s.compare_forms) {
    Scenario b = s;
    b.policy.class_forms = *s.compare_forms;
    auto base = RunOnce(b, s.compare_name, o);
    if (!base.ok()) return base.status();
    out.baseline = std::move(base).value();
  }
  return out;
}

}  // namespace tessera::sim
