// The scheduling cycle and the translation of its decisions into job changes (api/cycle_driver.h).
#include "api/cycle_driver.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "api/json_text.h"

namespace tessera::api {
namespace {

// Where a job of a queue over several backends went and why (its record, `tessera job`): each
// backend's predicted start when it was placed, in milliseconds since the epoch (null: never).
Json DispatchJson(const std::vector<quota::PoolForecast>& fs, const std::string& chosen,
                  int64_t now_ms) {
  const int64_t now_s = now_ms / 1000;
  Json each = Json::array();
  int tied = 0;
  for (const quota::PoolForecast& f : fs) {
    Json e = {{"backend", f.pool}};
    e["predicted_start_ms"] = f.start >= quota::kForecastNever ? Json(nullptr)
                              : f.start <= now_s               ? Json(now_ms)
                                                               : Json(f.start * 1000);
    if (!f.note.empty()) e["note"] = f.note;
    tied += f.start <= now_s ? 1 : 0;
    each.push_back(e);
  }
  const std::string why = tied > 1 ? "the first in the queue's order that starts it now"
                                   : "the earliest predicted start";
  return {{"backend", chosen},
          {"decided_ms", now_ms},
          {"reason", why + " (" + quota::DescribeForecasts(fs, now_s) + ")"},
          {"forecasts", each}};
}

}  // namespace

CycleDriver::CycleDriver(std::unique_ptr<CyclePort> ledger, const EngineConfig& config,
                         DecisionCounters& counters,
                         std::function<void(const Job&)> delete_external)
    : ledger_(std::move(ledger)),
      config_(config),
      counters_(counters),
      delete_external_(std::move(delete_external)) {}

void CycleDriver::TranslateLocked(size_t from, Batch& b) {
  // Recorded here and then dropped (ClearEvents below): their texts are moved, not copied.
  std::vector<quota::Event>& evs = ledger_->Cycle().events_to_record();
  const int64_t now = ledger_->NowMs();  // the time of the decisions translated together
  b.events.reserve(b.events.size() + (evs.size() - from));
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t admission = kNone;  // the admission (its event) of the placement that follows it
  for (size_t i = from; i < evs.size(); ++i) {
    quota::Event& e = evs[i];
    if (e.kind == quota::EventKind::kRepartitioned) {
      CountEventLocked(e, nullptr);
      std::string device = e.detail.substr(0, e.detail.find(':'));
      b.Add(EventAt(now, "engine", "device.repartitioned", std::move(device), std::move(e.detail)),
            nullptr);
      continue;
    }
    // By its handle (an index) where the event names one still in memory, else by its id.
    Job* it = ledger_->CycleJobs().ByHandle(e.handle);
    if (it == nullptr || it->rec.id != e.job) it = ledger_->CycleJobs().Find(e.job);
    if (it == nullptr) continue;
    Job& j = *it;
    switch (e.kind) {
      case quota::EventKind::kAdmitted:
        admission = i;  // recorded with the placement: one event per decision
        break;
      case quota::EventKind::kPlaced: {
        if (!ledger_->Transition(j, JobState::kPlaced, JobCause::kPlaced)) break;
        FillGrantsLocked(j);
        ledger_->CycleJobs().NoteNodes(j);
        j.rec.reason = j.ext.backend.empty() ? "" : "admitted; to be submitted to " + j.ext.backend;
        JsonText data(512);
        data.BeginObject().Key("node").Str(j.node).Key("form").Str(j.form).Key("grants");
        WriteGrants(data, j.grants);
        data.Key("borrowed")
            .Bool(j.borrowed)
            .Key("admission")
            .Str(admission == kNone ? std::string_view() : std::string_view(evs[admission].detail))
            .EndObject();
        CountEventLocked(e, &j);
        b.Add(EventAt(now, "engine", "job.placed", j.rec.id, std::move(e.detail), std::move(data)),
              &j);
        break;
      }
      case quota::EventKind::kPreempted: {
        const bool placed = j.state == JobState::kPlaced;
        if (!ledger_->Transition(j, JobState::kPreempting, JobCause::kPreempted)) break;
        if (j.ext.backend.empty()) NoteUnstartedPartsLocked(j, placed);
        CountEventLocked(e, &j);
        j.rec.reason = "preempted: " + e.detail;
        b.Add(EventAt(now, "engine", "job.preempted", j.rec.id, e.detail, {{"group", e.group}}),
              &j);
        break;
      }
      case quota::EventKind::kStopped:
        if (!j.agent.swap.held_on.empty()) {  // held swapped out past its queue's swap_hold_limit
          SwapEventLocked(j, e, b);
          break;
        }
        // Its queue's max_runtime: its processes are stopped as a preemption's are (the agent's
        // cancel order, the policy's grace), then it ends, and is not requeued (FinishPartLocked).
        // Stopped before its start went out, it ends at its node's next orders (OrdersLocked).
        {
          const bool placed = j.state == JobState::kPlaced;
          if (!ledger_->Transition(j, JobState::kPreempting, JobCause::kPreempted)) break;
          if (j.ext.backend.empty()) NoteUnstartedPartsLocked(j, placed);
        }
        j.guard_stopped = true;
        j.rec.reason = std::string(kGuardStopping) + e.detail;
        b.Add(EventAt(now, "engine", "job.stopping", j.rec.id, e.detail), &j);
        break;
      case quota::EventKind::kSwappedOut:
      case quota::EventKind::kSwappedIn:
        SwapEventLocked(j, e, b);
        break;
      case quota::EventKind::kRequeued:
        if (j.state == JobState::kPending && !j.agent.swap.held_on.empty()) {
          // Held swapped out on a card that will not take it back (a drain): a plain pending job
          // again. Its paused processes leave its node's may_run, and its agent stops them.
          b.Touch({j.agent.swap.held_on});
          // Its paused process there may still be reported running: a new run placed on that
          // node must not take it for its own (it stops first, as after a requeue from there).
          j.agent.stale_on.insert(j.agent.swap.held_on);
          j.agent.swap = {};
          j.start_ms = 0;  // it runs again from its start
          j.rec.reason = e.detail;
          b.Add(EventAt(now, "engine", "job.requeued", j.rec.id, e.detail,
                        {{"preemptions", j.preemptions}}),
                &j);
          break;
        }
        if (!ledger_->Transition(j, JobState::kPending, JobCause::kRequeued)) break;
        j.rec.reason = e.detail;
        j.preemptions = ledger_->Quota().job(j.handle).preemptions;
        b.Touch(NodesOf(j));  // its nodes' orders change: it may no longer run there
        j.grants.clear();
        j.node.clear();
        j.form.clear();
        j.agent.parts_done.clear();
        j.agent.preempted_unstarted = false;
        j.agent.pid = 0;
        j.agent.activity.last_active_ms = 0;
        j.agent.activity.idle = false;
        j.agent.activity.gpu_memory_used_mib = -1;
        j.agent.swap.state.clear();
        j.agent.swap.swapped_mib = 0;
        b.Add(EventAt(now, "engine", "job.requeued", j.rec.id, e.detail,
                      {{"preemptions", j.preemptions}}),
              &j);
        break;
      default:
        break;  // submitted, rejected, completed: the server records those itself
    }
  }
  ledger_->Cycle().ClearEvents();  // recorded (or the server's own): marks start again from 0
}

void CycleDriver::NoteUnstartedPartsLocked(Job& j, bool placed) {
  // A gang's parts never ordered to start have no process to report an end: done already. A job
  // with nothing left to report (placed: no start went out) is requeued by its node's next orders.
  const std::vector<std::string> nodes = NodesOf(j);
  if (!placed && nodes.size() < 2) return;  // its start went out: its exit ends the preemption
  bool all_done = true;
  for (const std::string& n : nodes) {
    if (placed || !j.agent.parts_done.count("sent:" + n)) j.agent.parts_done.insert(n);
    all_done = all_done && j.agent.parts_done.count(n);
  }
  if (placed || all_done) {
    j.agent.parts_done.clear();  // its node's orders look at it once more, to requeue it
    j.agent.preempted_unstarted = true;
  }
}

namespace {

// A held share ran from its first start: held over a restart its record may not say it (its
// start is kept while held, but not stored as such by an earlier release), its hold does.
void KeepHeldStart(Job& j) {
  if (j.start_ms == 0 && j.agent.swap.held_start_s > 0)
    j.start_ms = j.agent.swap.held_start_s * 1000;
}

}  // namespace

void CycleDriver::SwapEventLocked(Job& j, const quota::Event& e, Batch& b) {
  if (e.kind == quota::EventKind::kStopped) {
    // Its processes, paused on its node, are stopped there: it leaves may_run.
    const std::string node = j.agent.swap.held_on;
    b.Touch({node});
    KeepHeldStart(j);  // it ran
    if (!ledger_->End(j, JobState::kFailed, JobCause::kRefused, "stopped: " + e.detail)) return;
    j.agent.swap.held_on.clear();
    j.agent.swap.order.clear();
    b.Add(EventAt(ledger_->NowMs(), "engine", "job.stopped", j.rec.id, e.detail, {{"node", node}}),
          &j);
    return;
  }
  if (e.kind == quota::EventKind::kSwappedIn) {
    // Placed again on its device (job.placed before this): it runs on, brought back in, from its
    // first start (its start read the time it resumed).
    KeepHeldStart(j);
    if (!ledger_->Transition(j, JobState::kRunning, JobCause::kRunning)) return;
    j.agent.swap.held_on.clear();
    j.agent.swap.order = "in";
    j.agent.activity.last_active_ms = ledger_->NowMs();
    b.Touch(NodesOf(j));
    b.Add(EventAt(ledger_->NowMs(), "engine", "job.swapped_in", j.rec.id, e.detail,
                  {{"node", j.node}}),
          &j);
    return;
  }
  CountEventLocked(e, &j);
  if (e.for_job.empty()) {
    // Its queue's idle_timeout: swapped out, not stopped; it keeps its share and runs on.
    j.agent.swap.order = "idle";
    b.Touch(NodesOf(j));
    b.Add(EventAt(ledger_->NowMs(), "engine", "job.swapped_out", j.rec.id, e.detail,
                  {{"node", j.node}}),
          &j);
    return;
  }
  // Preempted by swapping: pending, its processes paused on its node, its memory off the card.
  const std::string node = j.node;
  b.Touch(NodesOf(j));
  const quota::GrantView card = j.grants.empty() ? quota::GrantView{} : j.grants.front();
  const int64_t started = j.start_ms;  // kept: it resumes from there, not from scratch
  if (!ledger_->Transition(j, JobState::kPending, JobCause::kRequeued)) return;
  j.start_ms = started;
  const quota::JobView hold = ledger_->Quota().job(j.handle);
  j.agent.swap.held_on = node;
  j.agent.swap.held_device = card.device;
  j.agent.swap.held_mib = card.memory;
  j.agent.swap.held_since_s = hold.held_swapped_since;
  j.agent.swap.held_start_s = hold.held_start;
  j.agent.swap.held_paused_s = hold.held_paused;
  j.agent.swap.order = "out";
  j.rec.reason = "SwappedOut: " + hold.wait_reason;
  j.preemptions = hold.preemptions;
  j.grants.clear();
  j.node.clear();
  j.form.clear();
  j.agent.parts_done.clear();
  j.agent.activity.idle = false;
  b.Add(EventAt(ledger_->NowMs(), "engine", "job.swapped_out", j.rec.id, e.detail,
                {{"node", node}, {"for_job", e.for_job}, {"lost_gpu_s", 0}}),
        &j);
}

void CycleDriver::RefreshWaitReasonsLocked() {
  std::string step, reason;
  int position = 0;  // in the order the cycle considered them (the forecast's position)
  for (int h : ledger_->Quota().waiting()) {  // what the cycle left waiting, and what arrived since
    Job* found = ledger_->CycleJobs().ByHandle(h);
    if (found == nullptr) continue;
    Job& j = *found;
    if (j.state != JobState::kPending) continue;
    j.wait_position = ++position;
    ledger_->Quota().WaitOf(j.handle, &step, &reason);
    if (step.empty()) continue;
    // Only rebuilt when it changed: most waiting jobs keep theirs from cycle to cycle.
    const std::string& cur = j.rec.reason;
    if (cur.size() == step.size() + 2 + reason.size() && cur.compare(0, step.size(), step) == 0 &&
        cur.compare(step.size() + 2, std::string::npos, reason) == 0) {
      continue;
    }
    j.rec.reason = step + ": " + reason;
  }
}

void CycleDriver::RunLocked(Batch& b) {
  // A large cycle's decisions are queued for the writer in chunks while it goes on (after
  // whatever `b` held before it), so that writing them overlaps deciding the rest; nobody acts
  // on them before the caller's commit, which waits for all of them.
  constexpr size_t kChunk = 4096;
  const auto started = std::chrono::steady_clock::now();  // for tessera_scheduling_cycle_seconds
  pacer_.Starting();
  quota::QuotaEngine& qe = ledger_->Cycle();
  size_t mark = qe.events().size();
  const quota::CycleStats stats = qe.RunCycle(ledger_->NowMs() / 1000, [&] {
    if (qe.events().size() - mark < kChunk) return;
    TranslateLocked(mark, b);
    mark = qe.events().size();
    ledger_->Queue(b);
  });
  TranslateLocked(mark, b);
  RefreshWaitReasonsLocked();
  const int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
  counters_.cycle_latency().Observe(took_us);
  pacer_.Ran(ledger_->NowMs(), CycleBudget::NowUs(), took_us,
             stats.pending_at_start - stats.admitted);
}

void CycleDriver::FillGrantsLocked(Job& j) {
  std::optional<AllocationForm> form;
  ledger_->Quota().HeldOf(j.handle, &j.grants, &form, &j.borrowed);
  j.form = form ? AllocationFormName(*form) : "";
  j.agent.parts_done.clear();
  const QueueRoute* route = config_.FindRoute(j.rec.queue);
  if (route != nullptr && route->external()) {
    std::string backend = route->backend;
    if (route->multi()) {  // the backend the cycle chose, and every backend's forecast
      const quota::JobView v = ledger_->Quota().job(j.handle);
      if (!v.ext_pool.empty()) backend = v.ext_pool;
      if (!j.ext.backend.empty() && j.ext.backend != backend && !j.ext.id.empty()) {
        delete_external_(j);  // its suspended Job elsewhere
        j.ext.id.clear();
        j.ext.suspended = false;
      }
      j.ext.dispatch = DispatchJson(v.dispatch, backend, ledger_->NowMs());
    }
    j.ext.backend = backend;
    j.node = backend + ":" + (route->partition.empty() ? route->queue : route->partition);
    j.ext.next_submit_ms = 0;
  } else {
    j.node = j.grants.empty() ? "" : j.grants.front().node;
  }
}

void CycleDriver::CountEventLocked(const quota::Event& e, const Job* j) {
  // Counted with the batch that will carry the decision: the next one queued (the cycle queues
  // its decisions in the same hold of mu_).
  std::optional<DecisionCounters::Placed> placed;
  if (j) placed = DecisionCounters::Placed{j->rec.queue, j->rec.group, j->borrowed};
  counters_.Count(ledger_->LastQueued() + 1, e, placed);
}

}  // namespace tessera::api
