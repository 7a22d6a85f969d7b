// The engine's memory from the store (Recovery, api/recovery.h), installed on open and after a
// failed write (ReloadLocked).
#include "api/engine.h"
#include "api/recovery.h"

namespace tessera::api {

Status Engine::ReloadLocked(const Status& cause) {
  version_.fetch_add(1);
  // Memory ran ahead of a commit that failed: drop it and rebuild from what is durable. Batches
  // queued from now on rest on the reloaded state (a new epoch). Counts of written batches stay;
  // those of the dropped ones go with their decisions.
  SettleCountsLocked();
  counters_.DropUnsettled();
  seq_.NewEpoch();
  Status st = Load();
  broken_ = st;
  if (st.ok()) {
    for (const std::string& id : jobs_.LiveIds()) {
      Job& j = jobs_.Get(id);
      if (j.state == JobState::kPending) {
        j.rec.reason = "Queued: the last scheduling decision could not be recorded (" +
                       cause.message() + "); the next cycle decides again";
      }
    }
  }
  if (!st.ok()) {
    return Status::Internal("a commit failed (" + cause.message() +
                            ") and the reload failed too: " + st.message());
  }
  return cause;
}

Status Engine::Load() {
  Result<Memory> m =
      Recover(*store_, config_, clock_(), agents_.MonotonicNowLocked(),
              [this](quota::QuotaEngine& qe) { return chores_.RestoreFairShare(qe, NowS()); });
  backends_.ResetLocked();  // every backend is asked its capacity again and reconciled
  if (!m.ok()) {
    // Memory ran ahead of the store and cannot be rebuilt now: it is dropped, not kept, so that
    // nothing of it is shown or acted on (nothing is served until a reload succeeds: broken_).
    jobs_.Clear();
    agents_.SetNodesLocked({});
    drains_.clear();
    failed_on_load_.clear();
    if (auto empty = quota::QuotaEngine::Create(config_.policy, {}, {}); empty.ok())
      qe_ = std::move(*empty);
    return m.status();
  }
  qe_ = std::move(m->quota);
  jobs_ = std::move(m->jobs);
  agents_.SetNodesLocked(std::move(m->nodes));
  admin_ = std::move(m->admin);
  drains_ = std::move(m->drains);
  failed_on_load_ = std::move(m->failed_on_load);
  cycle_.pacer().Want();
  broken_ = Status::Ok();
  return Status::Ok();
}

}  // namespace tessera::api
