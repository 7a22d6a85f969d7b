// The PostgreSQL backend (libpqxx 6.4): one connection guarded by a mutex, named prepared
// statements, one transaction per Commit.
//
// Event numbers: Commit takes LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE (writers exclude each
// other, readers do not wait), reads MAX(seq) and numbers its events after it. A sequence
// (BIGSERIAL) would leave gaps on rollback and could become visible out of order under concurrent
// writers; the lock makes every committed prefix of the log gap-free and in order.
//
// pqxx reports errors as exceptions; none leave this file.
#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "store/internal.h"
#include "store/postgres_lease.h"
#include "store/store.h"

namespace tessera::store::internal {
namespace {

// Serialises concurrent migrations of one database (any constant unique to Tessera).
constexpr int64_t kMigrationLockKey = 0x7e55e7a0;
// A transaction left open this long by a stalled client is ended by the database: a leader
// stopped in the middle of a write does not hold the leadership row (FOR SHARE) and the events
// table for the length of its stall, so a standby can take the lease (postgres_lease.h).
constexpr const char* kIdleInTransactionTimeout = "3s";

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string ListEventsName(int mask) { return "list_events_" + std::to_string(mask); }

// mask bit 1: kind prefix, 2: subject, 4: actor. Parameters are numbered in that order after
// $1 (after_seq); the limit comes last.
std::string ListEventsSql(int mask) {
  std::string sql = std::string("SELECT ") + kEventColumns + " FROM events WHERE seq > $1";
  int n = 1;
  if (mask & 1) {
    const std::string p = "$" + std::to_string(++n);
    sql += " AND left(kind, length(" + p + ")) = " + p;
  }
  if (mask & 2) sql += " AND subject = $" + std::to_string(++n);
  if (mask & 4) sql += " AND actor = $" + std::to_string(++n);
  sql += " ORDER BY seq LIMIT $" + std::to_string(++n);
  return sql;
}

// Reads the columns first, first + 1, ... of `r` into `fields`.
template <typename... Fields>
void ReadColumns(const pqxx::row& r, int first, Fields*... fields) {
  int col = first;
  ((*fields = r[col++].template as<Fields>()), ...);
}

JobRecord ReadJob(const pqxx::row& r) {
  JobRecord j;
  ReadColumns(r, 0, &j.id, &j.queue, &j.identity, &j.group, &j.state, &j.spec, &j.placement,
              &j.submit_ms, &j.update_ms);
  if (!r[9].is_null()) j.exit_code = r[9].as<int>();
  ReadColumns(r, 10, &j.reason, &j.idempotency_key);
  return j;
}

Event ReadEvent(const pqxx::row& r) {
  Event e;
  ReadColumns(r, 0, &e.seq, &e.time_ms, &e.actor, &e.kind, &e.subject, &e.reason, &e.data);
  return e;
}

std::vector<JobRecord> ReadJobs(const pqxx::result& rows) {
  std::vector<JobRecord> out;
  for (const auto& r : rows) out.push_back(ReadJob(r));
  return out;
}

std::optional<JobRecord> FirstJob(const pqxx::result& rows) {
  if (rows.empty()) return std::nullopt;
  return ReadJob(rows[0]);
}

class PostgresStore final : public Store {
 public:
  explicit PostgresStore(std::string url)
      : url_(std::move(url)), described_(RedactUrl(url_)), lease_(url_, described_) {}

  Status Init(int target_version) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = ConnectLocked(); !s.ok()) return s;
    return Guard("migrating", [&]() -> Status { return MigrateLocked(target_version); });
  }

  Status Commit(const std::vector<Event>& events, const std::vector<JobRecord>& jobs,
                std::vector<int64_t>* seqs) override {
    return CommitWith(events, jobs, seqs, mu_, [&](std::vector<int64_t>* assigned) {
      return FencedWrite("committing", [&](pqxx::work& w) -> Status {
        if (!events.empty()) {
          w.exec0("LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE");
          int64_t seq = w.exec_prepared1("last_seq")[0].as<int64_t>();
          for (const auto& e : events) {
            ++seq;
            w.exec_prepared0("insert_event", seq, e.time_ms, e.actor, e.kind, e.subject, e.reason,
                             e.data);
            assigned->push_back(seq);
          }
        }
        for (const auto& j : jobs) {
          const std::string exit_text = j.exit_code ? std::to_string(*j.exit_code) : std::string();
          const char* exit_code = j.exit_code ? exit_text.c_str() : nullptr;
          const bool ended = EndedState(j.state);
          const int64_t ended_ms = ended ? std::max<int64_t>(j.update_ms, 1) : 0;
          if (j.spec.empty()) {
            // ended_ms is set once, when the job ends: progress updates change no indexed column.
            auto r = ended ? w.exec_prepared("end_job", j.id, j.state, j.placement, j.update_ms,
                                             exit_code, j.reason, ended_ms)
                           : w.exec_prepared("update_job", j.id, j.state, j.placement, j.update_ms,
                                             exit_code, j.reason);
            if (r.affected_rows() != 1)
              return UnknownJobUpdate(j.id);  // the transaction rolls back
          } else {
            w.exec_prepared0("upsert_job", j.id, j.queue, j.identity, j.group, j.state, j.spec,
                             j.placement, j.submit_ms, j.update_ms, exit_code, j.reason,
                             j.idempotency_key, ended_ms);
          }
        }
        return Status::Ok();
      });
    });
  }

  Result<std::vector<JobRecord>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("loading jobs", [&](pqxx::read_transaction& t) {
      return ReadJobs(t.exec_prepared("load_jobs"));
    });
  }

  Result<std::vector<JobRecord>> LoadLiveJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("loading live jobs", [&](pqxx::read_transaction& t) {
      return ReadJobs(t.exec_prepared("load_live_jobs"));
    });
  }

  Result<std::vector<JobRecord>> ListJobs(const std::string& state, int limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("listing jobs", [&](pqxx::read_transaction& t) {
      return ReadJobs(
          t.exec_prepared("list_jobs", state, static_cast<int64_t>(std::max(0, limit))));
    });
  }

  Result<std::vector<JobRecord>> ListEndedJobs(const std::string& state, int limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("listing ended jobs", [&](pqxx::read_transaction& t) {
      return ReadJobs(
          t.exec_prepared("list_ended_jobs", state, static_cast<int64_t>(std::max(0, limit))));
    });
  }

  Result<int64_t> MaxJobNumber() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("reading the highest job number", [&](pqxx::read_transaction& t) {
      return t
          .exec1(
              "SELECT COALESCE(MAX(CAST(substring(id from 3) AS BIGINT)), 0) FROM jobs "
              "WHERE id ~ '^j-[0-9]{1,18}$'")[0]
          .as<int64_t>();
    });
  }

  Result<int64_t> Prune(int64_t before_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    return FencedDelete("pruning", [&](pqxx::work& w) {
      int64_t rows =
          w.exec_params("DELETE FROM jobs WHERE ended_ms > 0 AND ended_ms < $1", before_ms)
              .affected_rows();
      rows += w.exec_params(
                   "DELETE FROM events WHERE seq < COALESCE((SELECT MIN(seq) FROM events WHERE "
                   "time_ms >= $1), (SELECT MAX(seq) + 1 FROM events), 0)",
                   before_ms)
                  .affected_rows();
      return rows;
    });
  }

  Result<int64_t> PruneEventsOfKind(const std::string& kind, int64_t before_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    return FencedDelete("pruning", [&](pqxx::work& w) {
      return w.exec_params("DELETE FROM events WHERE kind = $1 AND time_ms < $2", kind, before_ms)
          .affected_rows();
    });
  }

  Result<std::optional<JobRecord>> GetJob(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("reading job " + id, [&](pqxx::read_transaction& t) {
      return FirstJob(t.exec_prepared("get_job", id));
    });
  }

  Result<std::optional<JobRecord>> FindByIdempotencyKey(const std::string& key,
                                                        int64_t since_ms) override {
    if (key.empty()) return std::optional<JobRecord>();  // '' marks the jobs without a key
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("finding a job by idempotency key", [&](pqxx::read_transaction& t) {
      return FirstJob(t.exec_prepared("find_idem", key, since_ms));
    });
  }

  Result<std::vector<Event>> ListEvents(int64_t after_seq, int limit,
                                        const EventFilter& filter) override {
    if (limit < 0) return Status::InvalidArgument("event limit must not be negative");
    if (limit == 0) return std::vector<Event>();
    const int mask = (filter.kind_prefix.empty() ? 0 : 1) | (filter.subject.empty() ? 0 : 2) |
                     (filter.actor.empty() ? 0 : 4);
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("listing events", [&](pqxx::read_transaction& t) {
      // One prepared statement per combination of filters, so each gets a plan that fits.
      std::vector<Event> out;
      for (const auto& row : RunListEvents(t, mask, after_seq, limit, filter)) {
        out.push_back(ReadEvent(row));
      }
      return out;
    });
  }

  Result<int64_t> LastSeq() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("reading the last seq", [&](pqxx::read_transaction& t) {
      return t.exec_prepared1("last_seq")[0].as<int64_t>();
    });
  }

  Status PutSetting(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    return FencedWrite("writing setting " + key, [&](pqxx::work& w) {
      w.exec_prepared0("put_setting", key, value);
      return Status::Ok();
    });
  }

  Status PutSample(int resolution_s, const Sample& sample) override {
    std::lock_guard<std::mutex> lock(mu_);
    return FencedWrite("writing a sample", [&](pqxx::work& w) {
      w.exec_params0(
          "INSERT INTO samples (resolution_s, time_ms, data) VALUES ($1, $2, $3) "
          "ON CONFLICT (resolution_s, time_ms) DO UPDATE SET data = excluded.data",
          resolution_s, sample.time_ms, sample.data);
      return Status::Ok();
    });
  }

  Result<std::vector<Sample>> ListSamples(int resolution_s, int64_t since_ms,
                                          int64_t until_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("listing samples", [&](pqxx::read_transaction& t) {
      std::vector<Sample> out;
      for (const auto& row : t.exec_params(
               "SELECT time_ms, data FROM samples WHERE resolution_s = $1 AND time_ms >= $2 AND "
               "time_ms < $3 ORDER BY time_ms",
               resolution_s, since_ms, until_ms)) {
        out.push_back({row[0].as<int64_t>(), row[1].as<std::string>()});
      }
      return out;
    });
  }

  Result<int64_t> PruneSamples(int resolution_s, int64_t before_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    return FencedDelete("pruning samples", [&](pqxx::work& w) {
      return static_cast<int64_t>(
          w.exec_params0("DELETE FROM samples WHERE resolution_s = $1 AND time_ms < $2",
                         resolution_s, before_ms)
              .affected_rows());
    });
  }

  Result<std::optional<std::string>> GetSetting(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("reading setting " + key, [&](pqxx::read_transaction& t) {
      auto r = t.exec_prepared("get_setting", key);
      return r.empty() ? std::optional<std::string>() : r[0][0].as<std::string>();
    });
  }

  Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("listing settings " + prefix, [&](pqxx::read_transaction& t) {
      std::vector<std::pair<std::string, std::string>> out;
      for (const auto& row : t.exec_params(
               "SELECT key, value FROM settings WHERE left(key, length($1)) = $1 ORDER BY key",
               prefix)) {
        out.push_back({row[0].as<std::string>(), row[1].as<std::string>()});
      }
      return out;
    });
  }

  Result<int> SchemaVersion() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("reading the schema version",
                   [&](pqxx::read_transaction& t) { return ReadVersion(t); });
  }

  std::string Describe() const override { return described_; }

  Result<std::optional<Leadership>> TryLead(const std::string& holder) override {
    return lease_.TryLead(holder);
  }

  Result<Leadership> Leader() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Reading("reading the leadership", [&](pqxx::read_transaction& t) {
      auto r = t.exec1("SELECT epoch, holder FROM leadership WHERE id = 1");
      return Leadership{r[0].as<int64_t>(), r[1].as<std::string>()};
    });
  }

  Status CheckLease() override { return lease_.Check(); }
  bool LeaseFresh() override { return lease_.Fresh(); }

 private:
  // Inside a write transaction: refused when another server took the lead since this one did.
  // FOR SHARE: a new leader's epoch bump waits for this transaction, and this one for it.
  Status CheckFence(pqxx::work& w) {
    const int64_t fence = lease_.epoch();
    if (fence == 0) return Status::Ok();
    auto r = w.exec1("SELECT epoch, holder FROM leadership WHERE id = 1 FOR SHARE");
    Leadership now{r[0].as<int64_t>(), r[1].as<std::string>()};
    if (now.epoch == fence) return Status::Ok();
    return Status::FailedPrecondition(DeposedMessage(described_, fence, now));
  }

  static pqxx::result RunListEvents(pqxx::transaction_base& t, int mask, int64_t after_seq,
                                    int limit, const EventFilter& f) {
    const std::string name = ListEventsName(mask);
    const int64_t lim = limit;
    switch (mask) {
      case 0:
        return t.exec_prepared(name, after_seq, lim);
      case 1:
        return t.exec_prepared(name, after_seq, f.kind_prefix, lim);
      case 2:
        return t.exec_prepared(name, after_seq, f.subject, lim);
      case 3:
        return t.exec_prepared(name, after_seq, f.kind_prefix, f.subject, lim);
      case 4:
        return t.exec_prepared(name, after_seq, f.actor, lim);
      case 5:
        return t.exec_prepared(name, after_seq, f.kind_prefix, f.actor, lim);
      case 6:
        return t.exec_prepared(name, after_seq, f.subject, f.actor, lim);
      default:
        return t.exec_prepared(name, after_seq, f.kind_prefix, f.subject, f.actor, lim);
    }
  }

  // 0 for a database without the version table (a new store).
  static int ReadVersion(pqxx::transaction_base& t) {
    if (!t.exec1("SELECT to_regclass('schema_version') IS NOT NULL")[0].as<bool>()) return 0;
    auto r = t.exec("SELECT version FROM schema_version WHERE id = 1");
    return r.empty() ? 0 : r[0][0].as<int>();
  }

  Status ConnectLocked() {
    try {
      conn_ = std::make_unique<pqxx::connection>(url_);
      pqxx::nontransaction n(*conn_);
      n.exec0(std::string("SET idle_in_transaction_session_timeout = '") +
              kIdleInTransactionTimeout + "'");
    } catch (const std::exception& e) {
      conn_.reset();
      return Status::FailedPrecondition(described_ + ": cannot connect: " + Trim(e.what()));
    }
    // Registered now, prepared by pqxx on first use (and again after a reconnect).
    conn_->prepare("last_seq", "SELECT COALESCE(MAX(seq), 0) FROM events");
    conn_->prepare("insert_event", std::string("INSERT INTO events (") + kEventColumns +
                                       ") VALUES ($1, $2, $3, $4, $5, $6, $7)");
    conn_->prepare("upsert_job", std::string("INSERT INTO jobs (") + kJobColumns +
                                     ", ended_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, "
                                     "$11, $12, $13) " +
                                     kJobUpsertConflict);
    conn_->prepare("update_job",
                   "UPDATE jobs SET state = $2, placement = $3, update_ms = $4, exit_code = $5, "
                   "reason = $6 WHERE id = $1");
    conn_->prepare("end_job",
                   "UPDATE jobs SET state = $2, placement = $3, update_ms = $4, exit_code = $5, "
                   "reason = $6, ended_ms = $7 WHERE id = $1");
    conn_->prepare("load_jobs",
                   std::string("SELECT ") + kJobColumns + " FROM jobs ORDER BY " + kSubmitOrder);
    conn_->prepare("get_job", std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = $1");
    conn_->prepare("find_idem", std::string("SELECT ") + kJobColumns + " FROM jobs WHERE " +
                                    kIdempotencyKeyWhere + " ORDER BY submit_ms LIMIT 1");
    conn_->prepare("load_live_jobs", std::string("SELECT ") + kJobColumns +
                                         " FROM jobs WHERE ended_ms = 0 ORDER BY " + kSubmitOrder);
    conn_->prepare("list_jobs", std::string("SELECT ") + kJobColumns +
                                    " FROM jobs WHERE ($1 = '' OR state = $1) ORDER BY " +
                                    kNewestFirst + " LIMIT $2");
    conn_->prepare("list_ended_jobs",
                   std::string("SELECT ") + kJobColumns + " FROM jobs WHERE " + kEndedJobListWhere);
    conn_->prepare("put_setting",
                   "INSERT INTO settings (key, value) VALUES ($1, $2) "
                   "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    conn_->prepare("get_setting", "SELECT value FROM settings WHERE key = $1");
    for (int mask = 0; mask < 8; ++mask) conn_->prepare(ListEventsName(mask), ListEventsSql(mask));
    return Status::Ok();
  }

  // Runs `body` on a live connection, turning pqxx's exceptions into a Status. A broken
  // connection is dropped so that the next call reconnects.
  template <typename F>
  Status Guard(const std::string& what, F&& body) {
    if (!conn_) {
      if (auto s = ConnectLocked(); !s.ok()) return s;
    }
    try {
      return body();
    } catch (const pqxx::in_doubt_error& e) {
      conn_.reset();
      return Status::Internal(
          described_ + ": " + what +
          ": connection lost during commit, outcome unknown: " + Trim(e.what()));
    } catch (const pqxx::broken_connection& e) {
      conn_.reset();
      return Status::Internal(described_ + ": " + what + ": connection lost: " + Trim(e.what()));
    } catch (const pqxx::sql_error& e) {
      return Status::Internal(described_ + ": " + what + ": " + Trim(e.what()));
    } catch (const std::exception& e) {
      return Status::Internal(described_ + ": " + what + ": " + Trim(e.what()));
    }
  }

  // `read(t)` in a read-only transaction (as Guard): its answer.
  template <typename Read>
  auto Reading(const std::string& what, Read read)
      -> Result<decltype(read(std::declval<pqxx::read_transaction&>()))> {
    decltype(read(std::declval<pqxx::read_transaction&>())) out{};
    Status s = Guard(what, [&]() -> Status {
      pqxx::read_transaction t(*conn_);
      out = read(t);
      return Status::Ok();
    });
    if (!s.ok()) return s;
    return out;
  }

  // `write(w)` in a transaction under the fence (as Guard), committed when it answers Ok; on any
  // failure the transaction rolls back.
  template <typename Write>
  Status FencedWrite(const std::string& what, Write write) {
    return Guard(what, [&]() -> Status {
      pqxx::work w(*conn_);
      if (Status f = CheckFence(w); !f.ok()) return f;
      if (Status s = write(w); !s.ok()) return s;
      w.commit();
      return Status::Ok();
    });
  }

  // Deletes under the fence (as FencedWrite): `remove(w)` answers the rows it removed.
  template <typename Remove>
  Result<int64_t> FencedDelete(const std::string& what, Remove remove) {
    int64_t rows = 0;
    Status s = FencedWrite(what, [&](pqxx::work& w) {
      rows = static_cast<int64_t>(remove(w));
      return Status::Ok();
    });
    if (!s.ok()) return s;
    return rows;
  }

  Status MigrateLocked(int target) {
    pqxx::work w(*conn_);
    w.exec1("SELECT pg_advisory_xact_lock(" + std::to_string(kMigrationLockKey) + ")");
    const int version = ReadVersion(w);
    if (version > Store::LatestSchemaVersion()) return NewerSchemaError(described_, version);
    if (version >= target) return Status::Ok();
    w.exec0(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        "id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)");
    for (const auto& step : Migrations()) {
      if (step.version <= version || step.version > target) continue;
      try {
        w.exec(step.postgres);
      } catch (const pqxx::sql_error& e) {
        return Status::Internal(described_ + ": migrating to schema version " +
                                std::to_string(step.version) + " (" + step.what +
                                "): " + Trim(e.what()));
      }
    }
    w.exec0("INSERT INTO schema_version (id, version) VALUES (1, " + std::to_string(target) +
            ") ON CONFLICT (id) DO UPDATE SET version = excluded.version");
    w.commit();
    return Status::Ok();
  }

  mutable std::mutex mu_;
  const std::string url_;
  const std::string described_;
  std::unique_ptr<pqxx::connection> conn_;  // guarded by mu_; null after a lost connection
  PgLease lease_;  // the leader lease (postgres_lease.h); its epoch fences the writes
};

}  // namespace

Result<std::unique_ptr<Store>> OpenPostgres(const std::string& url, int target_version) {
  auto store = std::make_unique<PostgresStore>(url);
  if (auto s = store->Init(target_version); !s.ok()) return s;
  return std::unique_ptr<Store>(std::move(store));
}

Status ExecPostgresScript(const std::string& url, const std::string& sql) {
  try {
    pqxx::connection c(url);
    pqxx::work w(c);
    w.exec(sql);
    w.commit();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Internal(RedactUrl(url) + ": " + Trim(e.what()));
  }
}

}  // namespace tessera::store::internal
