// Store: the control plane's durable state, an append-only event log plus current job records.
//
// Backends: SQLite (a file under the data directory, the default, nothing to install) and
// PostgreSQL (a shared, highly available deployment). One interface; the engine never knows
// which one it talks to.
//
// Durability: Commit() returns OK only once its events and records are durable (SQLite:
// WAL + synchronous=FULL, one transaction; PostgreSQL: one committed transaction). A crash at any
// point leaves either all of one Commit or none of it.
//
// Schema: versioned migrations applied in order on Open. A store written by a newer Tessera
// (schema version above the newest this build knows) is refused with a message naming both
// versions, never misread.
//
// Thread-safety: a Store may be used from several threads; implementations serialise
// internally.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::store {

// One typed, appended change: who did what to which subject, when and why.
struct Event {
  int64_t seq = 0;      // assigned by the store, strictly increasing from 1
  int64_t time_ms = 0;  // wall clock, milliseconds since the epoch (set by the caller)
  std::string actor;    // identity name, "engine" or "agent:<node>"
  std::string kind;     // "job.submitted", "job.placed", "job.finished", "node.lost", ...
  std::string subject;  // job id, node name, group name
  std::string reason;   // for people; may be empty
  std::string data;     // JSON object text with the details; "{}" when none
};

// The current record of one job. `spec` and `placement` are JSON texts owned by the engine.
struct JobRecord {
  std::string id;
  std::string queue;
  std::string identity;
  std::string group;
  // The job's state as its row holds it: a JobStateName() of model/job_state.h (pending, placed,
  // starting, running, preempting, succeeded, failed, cancelled, lost).
  std::string state;
  // JSON: the submitted request. "" makes the record an update of a stored job: its state,
  // placement, update_ms, exit_code and reason change, the rest is kept; an update of a job that
  // is not stored fails the commit, naming the job.
  std::string spec;
  std::string placement;  // JSON: node and devices, or "" when not placed
  int64_t submit_ms = 0;
  int64_t update_ms = 0;
  std::optional<int> exit_code;
  std::string reason;  // why it waits / why it ended
  // The submitter's Idempotency-Key, scoped to them ("identity\nkey"); "" when none. Written
  // with the job's first record (an update leaves it).
  std::string idempotency_key;
};

// Filter for listing events. Empty fields match everything.
struct EventFilter {
  std::string kind_prefix;  // e.g. "job." or "job.finished"
  std::string subject;
  std::string actor;
};

// StoreReader: the store's reads, for views, reports and start-up; every Store is one. A part
// lent only a StoreReader (the views: api/read_model.h) cannot write.
class StoreReader {
 public:
  virtual ~StoreReader() = default;

  // Every job record, in submit order (then id).
  virtual Result<std::vector<JobRecord>> LoadJobs() = 0;
  virtual Result<std::optional<JobRecord>> GetJob(const std::string& id) = 0;

  // Events with seq > after_seq matching `filter`, oldest first, at most `limit`.
  virtual Result<std::vector<Event>> ListEvents(int64_t after_seq, int limit,
                                                const EventFilter& filter) = 0;
  virtual Result<int64_t> LastSeq() = 0;

  // At most `limit` jobs, newest submission first, in `state` when not empty.
  virtual Result<std::vector<JobRecord>> ListJobs(const std::string& state, int limit);
  // The same of the ended jobs alone (Store::EndedState): what the views add to the jobs memory
  // holds, which are every live one and the newest ended (GET /v1/jobs). By an index of the
  // ended jobs in submit order, so a list does not read past the live ones.
  virtual Result<std::vector<JobRecord>> ListEndedJobs(const std::string& state, int limit);

  // Utilization history: one JSON text per (resolution in seconds, time), since_ms <= time <
  // until_ms, oldest first (Store::PutSample writes them).
  struct Sample {
    int64_t time_ms = 0;
    std::string data;
  };
  virtual Result<std::vector<Sample>> ListSamples(int resolution_s, int64_t since_ms,
                                                  int64_t until_ms) = 0;

  // A small durable setting (Store::PutSetting), none when never set.
  virtual Result<std::optional<std::string>> GetSetting(const std::string& key) = 0;
};

class Store : public StoreReader {
 public:
  // Opens (creating and migrating as needed) a store. `url` is either
  // "postgresql://..." / "postgres://..." (PostgreSQL, libpq connection URI) or a filesystem
  // path / "sqlite:PATH" (SQLite file, created if missing).
  static Result<std::unique_ptr<Store>> Open(const std::string& url);

  // The newest schema version this build knows.
  static int LatestSchemaVersion();
  // succeeded, failed, cancelled, lost (model/job_state.h's terminal states, by name): a job in
  // one of these never changes again. False for a name that is no job state.
  static bool EndedState(const std::string& state);

  // Appends `events` (their seq fields are ignored and assigned) and upserts `jobs` (by id),
  // atomically and durably. On success `seqs`, when not null, receives the assigned numbers.
  virtual Status Commit(const std::vector<Event>& events, const std::vector<JobRecord>& jobs,
                        std::vector<int64_t>* seqs) = 0;

  // Jobs that have not ended (state not succeeded/failed/cancelled/lost), in submit order: what
  // a server loads at start. The default filters LoadJobs().
  virtual Result<std::vector<JobRecord>> LoadLiveJobs();
  // The first job submitted at or after `since_ms` whose idempotency_key is `key`. The default
  // scans LoadJobs().
  virtual Result<std::optional<JobRecord>> FindByIdempotencyKey(const std::string& key,
                                                                int64_t since_ms);
  // The highest N among job ids "j-N" (0 when none): where a server's numbering continues.
  virtual Result<int64_t> MaxJobNumber();
  // Retention: deletes jobs that ended (last updated) before `before_ms` and events older than
  // `before_ms`; returns how many rows went. Fenced like every write.
  virtual Result<int64_t> Prune(int64_t before_ms);
  // Deletes the events of `kind` older than `before_ms` (the audit trail of failed
  // authentications, kept for a time of its own even when nothing else is pruned); how many went.
  virtual Result<int64_t> PruneEventsOfKind(const std::string& kind, int64_t before_ms);

  // Utilization history: PutSample replaces a sample at the same key (ListSamples reads them);
  // PruneSamples deletes those of `resolution_s` older than `before_ms` (how many went). Writes
  // are fenced like every other.
  virtual Status PutSample(int resolution_s, const Sample& sample) = 0;
  virtual Result<int64_t> PruneSamples(int resolution_s, int64_t before_ms) = 0;

  // Small durable key-value settings (e.g. "cluster.id").
  virtual Status PutSetting(const std::string& key, const std::string& value) = 0;
  // Every setting whose key starts with `prefix`, by key.
  virtual Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) = 0;

  virtual Result<int> SchemaVersion() = 0;
  // Upkeep that can wait until no commit is waiting (the commit writer calls it once its queue
  // has stayed empty for a moment): SQLite folds the job progress its commits appended into the
  // job rows and copies its write-ahead log into the database here, not inside a commit that a
  // burst of decisions waits for. One bounded step a call, so that a commit that comes waits for
  // one step, not the whole: true when more is left (call again while nothing waits).
  virtual bool Tidy() { return false; }
  virtual std::string Describe() const = 0;  // "sqlite:/path/tessera.db" or "postgresql://host/db"

  // --- Leadership: several servers on one store, one of them writing.
  //
  // A server leads while it holds the store's lease. PostgreSQL: a lease with an expiry in the
  // store's leadership row, renewed every second by the leader and taken by a standby once it has
  // expired (5 s without a renewal: a leader stopped or stalled loses it) or once the leader's
  // session has ended (a killed leader loses it at once); postgres_lease.h. SQLite: an exclusive
  // flock on "<file>.leader", one server per file. Taking the lease bumps the store's epoch and
  // records the holder; from then on every write of this Store checks, inside its transaction,
  // that the epoch is still its own, so a deposed leader's late writes are refused
  // (FailedPrecondition, "deposed"). A Store on which TryLead was never called writes unfenced
  // (tools, tests).
  struct Leadership {
    int64_t epoch = 0;   // 0: nobody ever led
    std::string holder;  // the leader's advertised URL
  };
  // Takes the lease if it is free: the new epoch; nullopt while another server holds it.
  virtual Result<std::optional<Leadership>> TryLead(const std::string& holder) {
    return std::optional<Leadership>(Leadership{0, holder});  // a store of one server
  }
  // Who leads now, as the store records it.
  virtual Result<Leadership> Leader() { return Leadership{}; }
  // OK while this Store holds the lease and its epoch is the store's (the leader checks it
  // every tick and stops when it is not). Once it fails it fails for good.
  virtual Status CheckLease() { return Status::Ok(); }
  // Whether this Store's hold on the lease is known to be current: false from the moment another
  // server could have taken it (PostgreSQL: the last renewal, by this process's monotonic clock,
  // is older than the lease's time to live less a margin; so at once after a stall, before
  // CheckLease has found out) and once it is lost. A leader answers nothing from its memory and
  // orders nothing while it is false. True for a store of one server, and before TryLead.
  virtual bool LeaseFresh() { return true; }
};

}  // namespace tessera::store
