// BackendExecutor (api/backend_executor.h): the external backends' passes.
#include "api/backend_executor.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "api/read_model.h"

namespace tessera::api {
namespace {

// Whether `x` runs as the account Tessera submits a job of `run_as` as (its run_as, else the
// server's own): a scheduler lists every account's jobs, and any of its users may name a job
// as Tessera names its own. Not said by the scheduler: taken as Tessera's.
bool SubmittedByTessera(const backends::ExternalJob& x, const std::string& run_as) {
  if (x.user.empty()) return true;
  if (!run_as.empty()) return x.user == run_as;
  static const std::string self = [] {
    struct passwd pw {};
    struct passwd* found = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
      return std::to_string(geteuid());
    return std::string(pw.pw_name);
  }();
  return x.user == self;
}

}  // namespace

BackendExecutor::BackendExecutor(std::unique_ptr<LedgerPort> ledger, const EngineConfig& config,
                                 std::string data_dir)
    : ledger_(std::move(ledger)), config_(config), data_dir_(std::move(data_dir)) {}

Status BackendExecutor::Open() {
  for (const QueueRoute& q : config_.routes) {
    const std::vector<std::string> names =
        q.backends.empty() && q.external() ? std::vector<std::string>{q.backend} : q.backends;
    for (const std::string& name : names) {  // one instance per name, however many queues
      if (lanes_.count(name)) continue;
      const NamedBackend* named = config_.FindBackend(name);
      backends::BackendOptions options;
      options.command_nice = config_.backend_nice;
      options.cluster = config_.cluster;
      options.kube = named != nullptr ? named->kube : config_.kubernetes;
      auto b = backends::BuiltinRegistry().Make(config_.TypeOf(name), options);
      if (!b.ok()) return b.status();
      AddLane(name, std::move(*b), false);
    }
    for (const std::string& name : names) {
      if (q.multi()) lanes_[name]->several = true;
    }
  }
  return Status::Ok();
}

void BackendExecutor::AddLane(const std::string& name, std::unique_ptr<backends::Backend> backend,
                              bool several) {
  auto lane = std::make_unique<BackendLane>();
  lane->backend = std::move(backend);
  lane->several = several;
  lanes_[name] = std::move(lane);
}

void BackendExecutor::ResetLocked() {
  for (auto& [name, lane] : lanes_) {
    lane->capacity.reset();  // a new quota engine knows no external capacity: ask again
    lane->last_capacity_ms = -1;
    lane->reconciled = false;
  }
}

backends::JobRequest BackendExecutor::RequestFor(const Job& j) const {
  backends::JobRequest r;
  r.id = j.rec.id;
  r.name = ExternalName(j.rec.id);
  for (const auto& a : j.spec.value("command", Json::array()))
    r.command.push_back(a.get<std::string>());
  const Json env = j.spec.value("env", Json::object());
  for (const auto& [k, v] : env.items()) r.env[k] = v.get<std::string>();
  r.env["TESSERA_QUEUE"] = j.rec.queue;
  r.env["TESSERA_GROUP"] = j.rec.group;
  r.env["TESSERA_IDENTITY"] = j.rec.identity;
  r.form = j.form.empty() ? j.spec.value("form", "") : j.form;
  r.gpus = j.spec.value("gpus", 0);
  r.gpu_memory_mib = j.spec.value("gpu_memory_mib", int64_t{0});
  r.gpu_milli = j.spec.value("gpu_milli", int64_t{1000});
  r.mig_profile = j.spec.value("mig_profile", "");
  // Profiles give CPU and memory per device; the scheduler is asked for the job's total.
  const int64_t per = std::max(r.gpus, 1);
  r.cpu_milli = j.spec.value("cpu_milli", int64_t{0}) * per;
  r.memory_mib = j.spec.value("memory_mib", int64_t{0}) * per;
  if (r.cpu_milli <= 0) r.cpu_milli = 1000;
  if (r.memory_mib <= 0) r.memory_mib = 1024;
  std::error_code ec;
  auto abs = std::filesystem::absolute(JobOutputPath(data_dir_, j.rec.id), ec);
  r.output_path = ec ? JobOutputPath(data_dir_, j.rec.id) : abs.string();
  r.run_as = j.spec.value("run_as", "");  // Slurm and PBS submit as this account
  r.walltime_s = j.spec.value("walltime_s", int64_t{0});
  if (const QueueRoute* q = config_.FindRoute(j.rec.queue)) {
    r.mapping.partition = q->partition;
    r.mapping.template_path = q->template_path;
    r.mapping.gpu_type = q->gpu_type;
    r.mapping.gres_whole = q->gres_whole;
    r.mapping.gres_share = q->gres_share;
    r.mapping.gres_partition = q->gres_partition;
    r.mapping.shard_mib = q->shard_mib;
    r.mapping.cap_library = q->cap_library;
    r.mapping.kube = q->kube;
  }
  return r;
}

std::vector<std::string> BackendExecutor::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, lane] : lanes_) names.push_back(name);
  return names;
}

void BackendExecutor::QueueDeleteLocked(const Job& j) {
  auto it = lanes_.find(j.ext.backend);
  if (it != lanes_.end()) it->second->deletes.emplace_back(j.rec.id, j.ext.id);
}

Status BackendExecutor::Pass(const std::string& name) {
  auto lane_it = lanes_.find(name);
  if (lane_it == lanes_.end()) return Status::NotFound("no backend named '" + name + "'");
  BackendLane& lane = *lane_it->second;
  std::unique_lock<std::mutex> serial(lane.pass, std::try_to_lock);
  if (!serial.owns_lock()) return Status::Ok();  // another pass of this backend is running
  bool reconcile_now = false;
  {
    auto lock = ledger_->Lock();
    reconcile_now = !lane.reconciled && lane.answering;
  }
  // 1. Reconciliation, once after open (retried each pass until the scheduler answers), and
  // again once a backend that stopped answering answers (NoteAnswering; not from what a cache
  // kept while it was away).
  if (reconcile_now) {
    Status st = Reconcile(name);
    if (!st.ok()) return st;
  }
  // An unreachable scheduler keeps the last capacity it gave, and the pass goes on without it
  // (the poll below fails, and says so, if the scheduler stays away). Its answer (asked every
  // pass while it is not answering) says whether it answers at all.
  bool away = false;
  {
    auto lock = ledger_->Lock();
    away = lane.several && !lane.answering;
    if (away) lane.last_capacity_ms = -1;  // asked every pass while it is away
  }
  Status heard = RefreshCapacity(name);
  if (heard.ok() && away) {
    // Back? Its capacity read says so where it reports one; a backend that reports none (Slurm,
    // PBS) is asked for its jobs instead.
    bool known = false;
    {
      auto lock = ledger_->Lock();
      known = lanes_.at(name)->capacity.has_value();
    }
    if (!known) {
      auto listed = lanes_.at(name)->backend->List(ExternalName(""));
      if (!listed.ok()) heard = listed.status();
    }
  }
  if (!heard.ok() || away) {
    Status st = NoteAnswering(name, heard);
    if (!st.ok()) return st;
  }
  // 2. What to do this pass.
  BackendWork w;
  {
    auto lock = ledger_->Lock();
    CollectLocked(name, &w);
  }
  if (w.submits.empty() && w.polls.empty() && w.cancels.empty() && w.suspends.empty() && !w.stops)
    return Status::Ok();
  // 3. The scheduler's commands, without the engine's lock.
  std::set<std::string> cancel_failed;  // external ids whose cancel is sent again next pass
  for (auto& [b, ext] : w.cancels) {
    if (!b->Cancel(ext).ok()) cancel_failed.insert(ext);
  }
  for (SuspendWork& s : w.suspends)
    s.status = s.suspend ? s.b->Suspend(s.external_id) : s.b->Resume(s.external_id, s.req);
  std::vector<SubmitDone> done;
  for (const SubmitWork& s : w.submits) done.push_back(SubmitOne(s));
  Polled polled;
  for (auto& [backend, ids] : w.polls)
    polled.emplace(backend, lanes_.at(backend)->backend->Poll(ids));
  for (auto& [backend, res] : polled) {
    if (!res.ok()) (void)NoteAnswering(backend, res.status());
  }
  // 4. Record what happened.
  Commands late_cancels, forget;
  Batch batch;
  {
    auto lock = ledger_->Lock();
    RecordSubmissionsLocked(done, &late_cancels, &batch);
    if (!cancel_failed.empty()) {
      for (const std::string& id : ledger_->Jobs().LiveIds()) {
        const Job& j = ledger_->Jobs().Get(id);
        Job::External& ext = ledger_->ExternalOf(j);
        if (ext.cancel_sent && cancel_failed.count(ext.id)) ext.cancel_sent = false;
      }
    }
    RecordSuspendsLocked(w.suspends, &batch);
    RecordPollsLocked(w.polls, polled, &forget, &batch);
    StopUnsubmittedLocked(name, &batch);
    Status st = ledger_->Commit(batch, lock);
    if (!st.ok()) return st;
  }
  for (auto& [b, ext] : late_cancels) (void)b->Cancel(ext);
  for (auto& [b, ext] : forget)
    (void)b->Forget(ext);  // its end is durable: the backend's object can go
  return Status::Ok();
}

// Issue 39: a backend of a queue over several that stops answering (its capacity read or a poll
// fails) gets no new work:
// the quota engine's pool of that name takes no new jobs (queues of several backends send them
// to the others), and its placed jobs never handed to it go back to be dispatched again (a job
// whose submission may have gone through stays, to be looked up first). Its first answer after
// that opens it again, and it is reconciled anew: a job already created there is adopted when
// Tessera still has it for that backend, removed otherwise; never run twice.
Status BackendExecutor::NoteAnswering(const std::string& name, const Status& heard) {
  auto lock = ledger_->Lock();
  BackendLane& lane = *lanes_.at(name);
  // Only a backend of a queue over several has somewhere else to send the work; a queue of one
  // backend waits for it as before.
  if (!lane.several || lane.answering == heard.ok()) return Status::Ok();
  lane.answering = heard.ok();
  ledger_->SetExternalAnswering(name, heard.ok());
  Batch batch;
  if (heard.ok()) {
    batch.Add(Event("engine", "backend.answering", name, name + " answers again"));
    return ledger_->Commit(batch, lock);
  }
  lane.reconciled = false;  // its jobs are matched again once it answers
  batch.Add(Event("engine", "backend.not_answering", name,
                  name + " is not answering (no new work): " + heard.message()));
  for (const std::string& id : ledger_->Jobs().LiveIds()) {
    const Job& j = ledger_->Jobs().Get(id);
    Job::External& ext = ledger_->ExternalOf(j);
    const QueueRoute* route = config_.FindRoute(j.rec.queue);
    if (ext.backend != name || j.state != JobState::kPlaced || !ext.id.empty() ||
        ext.lookup_first || ext.submit_attempts > 0 || route == nullptr || !route->multi())
      continue;
    ledger_->Requeue(j, "requeued: " + name + " is not answering; dispatched again", batch);
  }
  return ledger_->Commit(batch, lock);
}

Status BackendExecutor::RefreshCapacity(const std::string& name) {
  BackendLane& lane = *lanes_.at(name);
  {
    auto lock = ledger_->Lock();
    const int64_t now = ledger_->NowMs();
    if (lane.last_capacity_ms >= 0 && now - lane.last_capacity_ms < 5 * config_.backend_poll_ms)
      return Status::Ok();
    lane.last_capacity_ms = now;
  }
  {
    auto cap = lanes_.at(name)->backend->GpuCapacity();  // without the engine's lock: it asks
    if (!cap.ok()) return cap.status();
    if (cap->gpu_milli < 0) return Status::Ok();
    auto lock = ledger_->Lock();
    std::optional<backends::Capacity>& known = lanes_.at(name)->capacity;
    if (known && known->gpu_milli == cap->gpu_milli && known->detail == cap->detail)
      return Status::Ok();
    known = *cap;
    ledger_->SetExternalCapacity(name, cap->gpu_milli);
    Batch batch;
    batch.Add(Event(name, "backend.capacity", name, cap->detail, {{"gpu_milli", cap->gpu_milli}}));
    return ledger_->Commit(batch, lock);
  }
}

Status BackendExecutor::Reconcile(const std::string& name) {
  const std::string prefix = ExternalName("");
  // Without the engine's lock: it asks the scheduler. Retried next pass when it does not answer.
  Result<std::vector<backends::ExternalJob>> list = lanes_.at(name)->backend->List(prefix);
  if (list.ok()) {
    std::vector<std::pair<backends::Backend*, std::string>> to_cancel;
    std::vector<store::Event> events;
    std::vector<const Job*> changed;
    {
      auto lock = ledger_->Lock();
      for (const backends::ExternalJob& x : *list) {
        const std::string id = x.name.substr(prefix.size());
        const auto xs = backends::ParseExternalState(x.state);
        const bool active = xs.ok() && !backends::EndStateOf(*xs);
        const Job* it = ledger_->Jobs().Find(id);
        if (it == nullptr || it->ext.backend != name) {
          // A scheduler that keeps ended jobs as objects (Kubernetes) has them deleted too:
          // a crash between recording an end and Forget must not leave one behind. Only a job
          // of an account Tessera submits as: any user may name a job as Tessera does.
          const std::string run_as = it == nullptr ? "" : it->spec.value("run_as", "");
          if ((active || lanes_.at(name)->backend->Suspends()) && SubmittedByTessera(x, run_as)) {
            to_cancel.push_back({lanes_.at(name)->backend.get(), x.external_id});
            events.push_back(Event("engine", "backend.orphan_cancelled", id,
                                   name + " job " + x.external_id + " has no Tessera job",
                                   {{"backend", name}, {"external_id", x.external_id}}));
          }
          continue;
        }
        const Job& j = *it;
        Job::External& ext = ledger_->ExternalOf(j);
        if (ext.id == x.external_id) continue;
        if (!SubmittedByTessera(x, j.spec.value("run_as", ""))) continue;  // a stranger's
        if (j.state == JobState::kPlaced && ext.id.empty() &&
            ledger_->Transition(j, JobState::kStarting, JobCause::kStarted)) {
          ext.id = x.external_id;
          ext.lookup_first = false;
          ledger_->SetReason(j, "adopted " + name + " job " + x.external_id + " after a restart");
          events.push_back(Event("engine", "job.adopted", id, j.rec.reason,
                                 {{"backend", name}, {"external_id", x.external_id}}));
          changed.push_back(&j);
        } else if (active) {
          // Ended in Tessera, or a second submission: the record wins.
          to_cancel.push_back({lanes_.at(name)->backend.get(), x.external_id});
          events.push_back(Event("engine", "backend.duplicate_cancelled", id,
                                 name + " job " + x.external_id + " is not the one recorded",
                                 {{"backend", name}, {"external_id", x.external_id}}));
        }
      }
      // Every unsubmitted job of this backend not found above was never submitted: safe to submit.
      ledger_->Jobs().ForEach([&](const Job& j) {
        if (j.ext.backend == name && j.ext.id.empty()) ledger_->ExternalOf(j).lookup_first = false;
      });
      lanes_.at(name)->reconciled = true;
      if (!events.empty()) {
        Batch batch;
        batch.events = events;
        batch.jobs = changed;
        Status st = ledger_->Commit(batch, lock);
        if (!st.ok()) return st;
      }
    }
    for (auto& [b, ext] : to_cancel) (void)b->Cancel(ext);
  }
  return Status::Ok();
}

void BackendExecutor::CollectLocked(const std::string& name, BackendWork* w) {
  auto& submits = w->submits;
  auto& polls = w->polls;
  auto& cancels = w->cancels;
  const int64_t now = ledger_->NowMs();
  BackendLane& lane = *lanes_.at(name);
  const bool poll_due = now - lane.last_poll_ms >= config_.backend_poll_ms;
  if (poll_due) lane.last_poll_ms = now;
  // Only durable decisions are enacted: a job whose last change is still being written waits for
  // the next pass (a failed write would undo what the scheduler had already been told).
  const int64_t durable = ledger_->Durable();
  // This backend's deletions (the others' stay for their own passes).
  std::vector<std::pair<std::string, std::string>> later;
  for (auto& [job, external_id] : lane.deletes) {
    const Job* d = ledger_->Jobs().Find(job);  // gone from memory: its end is durable
    if (d != nullptr && d->last_seq > durable)
      later.emplace_back(std::move(job), std::move(external_id));
    else
      cancels.push_back({lane.backend.get(), external_id});
  }
  lane.deletes = std::move(later);
  for (const std::string& id : ledger_->Jobs().LiveIds()) {
    const Job& j = ledger_->Jobs().Get(id);
    if (j.ext.backend != name || j.last_seq > durable) continue;
    Job::External& ext = ledger_->ExternalOf(j);
    backends::Backend* b = lanes_.at(name)->backend.get();
    if (b->Suspends() && ext.id.empty() && j.state == JobState::kPreempting) w->stops = true;
    if (b->Suspends() && !ext.id.empty() && (Holds(j) || j.state == JobState::kPending)) {
      // A job the backend keeps: its Job is suspended while Tessera has it pending or preempting,
      // and running (resumed, with the queue's scheduling directives) while it holds its admission.
      const bool want_suspended = j.state == JobState::kPending || j.state == JobState::kPreempting;
      const bool change =
          want_suspended ? !ext.suspended : (j.state == JobState::kPlaced || ext.suspended);
      if (change && !j.cancel_requested && now >= ext.next_suspend_ms) {
        w->suspends.push_back({id, b, ext.id, want_suspended,
                               want_suspended ? backends::JobRequest{} : RequestFor(j),
                               Status::Ok()});
        ext.next_suspend_ms = now + 2000;  // not again before the answer is recorded
      }
      if (j.cancel_requested && !ext.cancel_sent) {
        cancels.push_back({b, ext.id});
        ext.cancel_sent = true;
      }
      if (poll_due) polls[ext.backend].push_back(ext.id);
      continue;
    }
    if (!Holds(j)) continue;
    if (j.state == JobState::kPlaced && ext.id.empty()) {
      if (now >= ext.next_submit_ms && (lane.reconciled || !ext.lookup_first)) {
        submits.push_back({id, b, RequestFor(j), ext.lookup_first});
      }
    } else if (!ext.id.empty()) {
      if (j.cancel_requested && !ext.cancel_sent) {
        cancels.push_back({b, ext.id});
        ext.cancel_sent = true;
      }
      if (poll_due) polls[ext.backend].push_back(ext.id);
    }
  }
}

BackendExecutor::SubmitDone BackendExecutor::SubmitOne(const SubmitWork& w) {
  SubmitDone d{w.id, "", Status::Ok()};
  if (w.lookup) {
    auto found = w.b->List(w.req.name);
    if (!found.ok()) {
      d.status = found.status();
      return d;
    }
    for (const auto& x : *found) {
      if (x.name == w.req.name && SubmittedByTessera(x, w.req.run_as)) {
        d.external_id = x.external_id;
        d.adopted = true;
      }
    }
  }
  if (!d.adopted) {
    auto script = w.b->Render(w.req);
    if (!script.ok()) {
      d.status = script.status();
      d.permanent = true;
    } else {
      auto ext = w.b->Submit(w.req, *script);
      if (ext.ok()) {
        d.external_id = *ext;
      } else {
        d.status = ext.status();
      }
    }
  }
  return d;
}

void BackendExecutor::RecordSubmissionsLocked(const std::vector<SubmitDone>& done,
                                              Commands* late_cancels, Batch* batch) {
  const int64_t now = ledger_->NowMs();
  for (const SubmitDone& d : done) {
    const Job* found = ledger_->Jobs().Find(d.id);
    if (found == nullptr) continue;  // ended and out of memory while the submission ran
    const Job& j = *found;
    Job::External& ext = ledger_->ExternalOf(j);
    if (d.status.ok()) {
      if (j.state != JobState::kPlaced || !ext.id.empty() ||
          !ledger_->Transition(j, JobState::kStarting, JobCause::kStarted)) {
        // Cancelled while the submission ran.
        if (!d.external_id.empty())
          late_cancels->push_back({lanes_.at(ext.backend)->backend.get(), d.external_id});
        continue;
      }
      ext.id = d.external_id;
      ext.lookup_first = false;
      ledger_->SetReason(
          j, (d.adopted ? "adopted " : "submitted to ") + ext.backend + " as job " + d.external_id);
      batch->Add(Event("engine", "job.starting", d.id, j.rec.reason,
                       {{"backend", ext.backend}, {"external_id", d.external_id}}));
      batch->jobs.push_back(&j);
    } else if (j.state == JobState::kPlaced) {
      if (d.permanent) {
        if (!ledger_->End(j, JobState::kFailed, JobCause::kRefused,
                          "cannot render the batch script: " + d.status.message()))
          continue;
        ledger_->WantCycle();
        batch->Add(Event("engine", "job.failed", d.id, j.rec.reason));
        batch->jobs.push_back(&j);
        continue;
      }
      ++ext.submit_attempts;
      const int64_t backoff =
          std::min<int64_t>(60000, int64_t{1000} << std::min(ext.submit_attempts - 1, 6));
      ext.next_submit_ms = now + backoff;
      ext.lookup_first = true;  // a failed or timed-out submission may still have gone through
      ledger_->SetReason(j,
                         "admitted, not yet submitted to " + ext.backend + " (attempt " +
                             std::to_string(ext.submit_attempts) + ", next in " +
                             std::to_string(backoff / 1000) + "s): " + d.status.message(),
                         now);
      batch->Add(Event("engine", "job.submit_failed", d.id, j.rec.reason,
                       {{"backend", ext.backend}, {"attempt", ext.submit_attempts}}));
      batch->jobs.push_back(&j);
    }
  }
}

void BackendExecutor::RecordPollsLocked(
    const std::map<std::string, std::vector<std::string>>& polls, Polled& polled, Commands* forget,
    Batch* batch) {
  std::map<std::string, std::set<std::string>> asked;  // backend -> the external ids polled
  for (const auto& [name, ids] : polls) asked[name].insert(ids.begin(), ids.end());
  for (auto& [name, res] : polled) {
    for (const std::string& id : ledger_->Jobs().LiveIds()) {
      const Job& j = ledger_->Jobs().Get(id);
      Job::External& ext = ledger_->ExternalOf(j);
      if (ext.backend != name || ext.id.empty() || !(Holds(j) || j.state == JobState::kPending))
        continue;
      if (!asked[name].count(ext.id)) continue;
      if (!res.ok()) {
        ledger_->SetReason(
            j, "cannot follow " + name + " job " + ext.id + ": " + res.status().message());
        continue;
      }
      auto it = res->find(ext.id);
      if (it == res->end()) {
        if (ext.cancel_sent) {  // deleted on our request (Kubernetes forgets a deleted Job)
          if (!ledger_->End(j, JobState::kCancelled, JobCause::kCancelled, "cancelled")) continue;
          batch->Add(Event(name, "job.cancelled", id, "cancelled", {{"external_id", ext.id}}));
          batch->jobs.push_back(&j);
          continue;
        }
        if (++ext.unknown_polls < 3) continue;
        if (j.state == JobState::kPending) {  // its suspended Job is gone: made anew at admission
          ext.id.clear();
          ext.unknown_polls = 0;
          batch->jobs.push_back(&j);
          continue;
        }
        if (!ledger_->End(j, JobState::kLost, JobCause::kLost,
                          name + " no longer knows job " + ext.id))
          continue;
        ledger_->WantCycle();
        batch->Add(Event("engine", "job.lost", id, j.rec.reason, {{"external_id", ext.id}}));
        batch->jobs.push_back(&j);
        continue;
      }
      ext.unknown_polls = 0;
      const backends::ExternalJob& x = it->second;
      const auto xs = backends::ParseExternalState(x.state);
      if (!xs.ok()) {  // a backend of this build says only what it knows
        ledger_->SetReason(
            j, "cannot follow " + name + " job " + ext.id + ": " + xs.status().message());
        continue;
      }
      if (lanes_.at(name)->backend->Suspends() && FollowSuspendLocked(j, x, *xs, batch)) continue;
      ext.native_state = x.native_state;
      if (!x.node.empty()) ext.node = x.node;
      if (!x.gres.empty()) ext.gres = x.gres;
      if (!x.devices.empty()) ext.devices = x.devices;
      const std::optional<JobState> end = backends::EndStateOf(*xs);
      if (*xs == backends::ExternalState::kPending) {
        ledger_->SetReason(j, name + " job " + ext.id + ": " + x.native_state +
                                  (x.reason.empty() ? "" : " (" + x.reason + ")"));
      } else if (*xs == backends::ExternalState::kRunning) {
        if (j.state != JobState::kRunning &&
            ledger_->Transition(j, JobState::kRunning, JobCause::kRunning)) {
          ledger_->SetReason(j, "");
          batch->Add(Event(name, "job.running", id, "",
                           {{"external_id", ext.id},
                            {"node", ext.node},
                            {"gres", ext.gres},
                            {"devices", ext.devices}}));
          batch->jobs.push_back(&j);
        }
      } else if (end) {
        JobState state = *end;
        if (j.cancel_requested && state != JobState::kSucceeded) state = JobState::kCancelled;
        const std::string why =
            state == JobState::kCancelled ? "cancelled"
            : state == JobState::kSucceeded
                ? ""
                : name + " " + x.native_state +
                      (x.reason.empty() || x.reason == x.native_state ? ""
                                                                      : " (" + x.reason + ")") +
                      (x.exit_code ? ", exit code " + std::to_string(*x.exit_code) : "") +
                      (x.signal ? ", signal " + std::to_string(x.signal) : "");
        // Ended like every other job (EndLocked): counted among the ended, so it leaves memory.
        if (!ledger_->End(j, state, JobCause::kExited, why)) continue;
        ledger_->WantCycle();
        ledger_->SetExitCode(j, x.exit_code);
        Json data = {{"external_id", ext.id},
                     {"node", ext.node},
                     {"exit_code", x.exit_code ? *x.exit_code : -1},
                     {"signal", x.signal}};
        if (x.run_s >= 0) {  // a job never seen running started that long before now
          ledger_->SetRanFor(j, x.run_s * 1000);
          data["run_ms"] = x.run_s * 1000;
        }
        batch->Add(Event(name, std::string("job.") + JobStateName(state), id, j.rec.reason, data));
        batch->jobs.push_back(&j);
        forget->push_back({lanes_.at(name)->backend.get(), ext.id});
      }
    }
  }
}

// A job of a backend that suspends, preempted before its Job existed (or while its creation ran,
// which RecordSubmissionsLocked has then deleted): nothing runs, so it is stopped at once and
// pending again.
void BackendExecutor::StopUnsubmittedLocked(const std::string& name, Batch* batch) {
  if (!lanes_.at(name)->backend->Suspends()) return;
  for (const std::string& id : ledger_->Jobs().LiveIds()) {
    const Job& j = ledger_->Jobs().Get(id);
    Job::External& ext = ledger_->ExternalOf(j);
    if (j.state != JobState::kPreempting || !ext.id.empty() || ext.backend != name) {
      continue;
    }
    ledger_->Stopped(j, *batch);  // job.requeued
  }
}

void BackendExecutor::RecordSuspendsLocked(const std::vector<SuspendWork>& done, Batch* batch) {
  const int64_t now = ledger_->NowMs();
  for (const SuspendWork& d : done) {
    const Job* found = ledger_->Jobs().Find(d.id);
    if (found == nullptr || found->ext.id != d.external_id) continue;
    const Job& j = *found;
    Job::External& ext = ledger_->ExternalOf(j);
    const std::string verb = d.suspend ? "suspend" : "resume";
    if (!d.status.ok()) {
      ext.next_suspend_ms = now + 5000;
      ledger_->SetReason(j, "cannot " + verb + " " + ext.backend + " job " + d.external_id +
                                " (retried): " + d.status.message());
      continue;
    }
    ext.suspended = d.suspend;
    ext.next_suspend_ms = 0;
    if (d.suspend) {
      batch->Add(Event("engine", "job.suspended", d.id,
                       ext.backend + " job " + d.external_id + " suspended",
                       {{"backend", ext.backend}, {"external_id", d.external_id}}));
    } else if (j.state == JobState::kPlaced &&
               ledger_->Transition(j, JobState::kStarting, JobCause::kStarted)) {
      ledger_->SetReason(j, "resumed in " + ext.backend + " as job " + d.external_id);
      batch->Add(
          Event("engine", "job.starting", d.id, j.rec.reason,
                {{"backend", ext.backend}, {"external_id", d.external_id}, {"resumed", true}}));
      batch->jobs.push_back(&j);
    }
  }
}

// A polled job of a backend that suspends (Kubernetes). True when this decided its course:
// - pending in Tessera: its Job stays suspended, nothing else to follow;
// - preempting: once the Job is suspended and its pods are gone, the job is pending again
//   (requeued, its submit time kept) and its admission is free;
// - suspended while Tessera has it admitted (someone suspended it): resumed by the next pass;
// - starting, with its pod unschedulable for the queue's placement_timeout: requeued with that
//   reason (and so suspended).
// False: the usual following (pending in the scheduler, running, ended).
bool BackendExecutor::FollowSuspendLocked(const Job& j, const backends::ExternalJob& x,
                                          backends::ExternalState xs, Batch* batch) {
  Job::External& ext = ledger_->ExternalOf(j);
  const int64_t now = ledger_->NowMs();
  ext.suspended = x.suspended;
  if (j.state == JobState::kPending) return true;
  const bool ended = backends::EndStateOf(xs).has_value();
  if (j.state == JobState::kPreempting && !ended) {
    if (xs == backends::ExternalState::kSuspended) {
      ledger_->Stopped(j, *batch);  // job.requeued
    }
    return true;
  }
  if (xs == backends::ExternalState::kSuspended && !ended) {
    ledger_->SetReason(j, ext.backend + " job " + ext.id + " is suspended; resuming it");
    return true;
  }
  if (j.state == JobState::kStarting && x.unschedulable) {
    if (ext.unschedulable_since_ms == 0) ext.unschedulable_since_ms = now;
    const QueueRoute* route = config_.FindRoute(j.rec.queue);
    const int64_t timeout = route != nullptr ? route->kube.placement_timeout_ms : 0;
    if (timeout > 0 && now - ext.unschedulable_since_ms >= timeout) {
      ext.unschedulable_since_ms = 0;
      ledger_->Requeue(j,
                       "requeued: " + ext.backend + " did not schedule its pod within " +
                           std::to_string(timeout / 1000) + "s (" + x.reason + ")",
                       *batch);
      return true;
    }
  } else {
    ext.unschedulable_since_ms = 0;
  }
  return false;
}

}  // namespace tessera::api
