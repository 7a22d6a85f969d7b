// PostgreSQL's renewed leader lease (postgres_lease.h). pqxx's exceptions do not leave this file.
#include "store/postgres_lease.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>
#include <utility>

#include "store/internal.h"

namespace tessera::store::internal {
namespace {

// The second key of each leader's advisory lock; the first is its epoch.
constexpr int32_t kLeaseLockKey = 0x7e55e7a1;
// The one lock servers before the renewed lease waited on: the leader takes it too when it can,
// so that such a server, as a standby, does not take over from a running leader of this version.
constexpr int64_t kLegacyLockKey = 0x7e55e7a1;
// The database's clock in milliseconds: the only clock the lease's expiry is judged by.
constexpr const char* kDbNowMs = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";
// What a lock_timeout ends with (SQLSTATE lock_not_available).
constexpr const char* kLockNotAvailable = "55P03";

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// "(epoch, key)": the arguments of the advisory lock functions for the leader of `epoch`.
std::string LockArgs(int64_t epoch) {
  return "(" + std::to_string(static_cast<int32_t>(epoch & 0x7fffffff)) + ", " +
         std::to_string(kLeaseLockKey) + ")";
}

struct Row {
  int64_t epoch = 0;
  std::string holder;
  int64_t since_ms = 0;  // taken or last renewed, by the database's clock
  int64_t now_ms = 0;    // the database's clock as it read the row
  bool Expired() const { return holder.empty() || now_ms >= since_ms + PgLease::kTtlMs; }
};

Row ReadRow(pqxx::transaction_base& t, bool for_update) {
  auto r = t.exec1(std::string("SELECT epoch, holder, since_ms, ") + kDbNowMs +
                   " FROM leadership WHERE id = 1" + (for_update ? " FOR UPDATE" : ""));
  return {r[0].as<int64_t>(), r[1].as<std::string>(), r[2].as<int64_t>(), r[3].as<int64_t>()};
}

}  // namespace

struct PgLease::Impl {
  Impl(std::string u, std::string d) : url(std::move(u)), described(std::move(d)) {}

  const std::string url;
  const std::string described;
  std::mutex mu;
  std::unique_ptr<pqxx::connection> conn;  // guarded by mu: holds the lease's advisory lock
  Status lost;                             // guarded by mu: why the lease was lost, for good
  bool legacy_held = false;                // guarded by mu
  bool stopping = false;                   // guarded by mu
  std::condition_variable wake;
  std::thread renewer;
  std::atomic<int64_t> fence{0};
  std::atomic<int64_t> fresh_until{0};  // steady ms
  std::atomic<bool> gone{false};        // lost: Fresh() is false for good

  void ConnectLocked() {
    conn = std::make_unique<pqxx::connection>(url);
    pqxx::nontransaction n(*conn);
    // A renewal or a check never hangs on a lock for long: past it, it is tried again.
    n.exec0("SET statement_timeout = '3s'");
  }

  Status LoseLocked(Status why) {
    lost = std::move(why);
    gone.store(true);
    fresh_until.store(0);
    conn.reset();  // the session's locks go with it
    return lost;
  }

  Status DeposedLocked(pqxx::transaction_base& t) {
    Row now = ReadRow(t, false);
    return LoseLocked(Status::FailedPrecondition(
        DeposedMessage(described, fence.load(), Store::Leadership{now.epoch, now.holder})));
  }

  void TakeLegacyLockLocked(pqxx::transaction_base& t) {
    if (!legacy_held) {
      legacy_held =
          t.exec1("SELECT pg_try_advisory_lock(" + std::to_string(kLegacyLockKey) + ")")[0]
              .as<bool>();
    }
  }

  void RenewLocked() {
    if (gone.load() || fence.load() == 0) return;
    const int64_t sent = SteadyMs();
    try {
      if (!conn) {
        (void)LoseLocked(Status::FailedPrecondition(described + ": the leader lease was lost"));
        return;
      }
      pqxx::nontransaction n(*conn);
      auto r = n.exec_params(std::string("UPDATE leadership SET since_ms = ") + kDbNowMs +
                                 " WHERE id = 1 AND epoch = $1 RETURNING epoch",
                             fence.load());
      if (r.empty()) {
        (void)DeposedLocked(n);
        return;
      }
      fresh_until.store(sent + kTtlMs - kMarginMs);
      TakeLegacyLockLocked(n);
    } catch (const pqxx::sql_error&) {
      // A statement timeout, say: the session and the lease are still this server's until the
      // lease expires; the next renewal tries again.
    } catch (const std::exception& e) {
      // The session ended, and its lock with it: a standby may take the lease now.
      (void)LoseLocked(
          Status::FailedPrecondition(described + ": the leader lease was lost: " + Trim(e.what())));
    }
  }

  void RenewLoop() {
    std::unique_lock<std::mutex> l(mu);
    while (!stopping) {
      wake.wait_for(l, std::chrono::milliseconds(kRenewMs), [&] { return stopping; });
      if (!stopping) RenewLocked();
    }
  }
};

PgLease::PgLease(std::string url, std::string described)
    : impl_(std::make_unique<Impl>(std::move(url), std::move(described))) {}

PgLease::~PgLease() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->renewer.joinable()) impl_->renewer.join();
}

Result<std::optional<Store::Leadership>> PgLease::TryLead(const std::string& holder) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> l(m.mu);
  if (m.gone.load()) return m.lost;  // a server that lost the lease does not take it again
  const int64_t sent = SteadyMs();
  try {
    if (!m.conn) m.ConnectLocked();
    Row seen;
    {
      pqxx::nontransaction n(*m.conn);
      seen = ReadRow(n, false);
    }
    if (m.fence.load() != 0 && seen.epoch == m.fence.load()) {
      return std::optional<Store::Leadership>(Store::Leadership{seen.epoch, seen.holder});
    }
    // A lease not yet expired is taken only from a holder whose session has ended: its lock is
    // free. Held here until the epoch has moved on, so that two standbys do not both see it free.
    bool probed = false;
    if (!seen.Expired()) {
      pqxx::nontransaction n(*m.conn);
      probed = n.exec1("SELECT pg_try_advisory_lock" + LockArgs(seen.epoch))[0].as<bool>();
      if (!probed) return std::optional<Store::Leadership>();
    }
    std::optional<Store::Leadership> took;
    {
      pqxx::work w(*m.conn);
      // The old leader's write in flight holds the row FOR SHARE: it commits (or its session is
      // ended by idle_in_transaction_session_timeout, when it stalled) before the epoch moves, so
      // that everything it wrote is there before this server loads the store. At most 1 s here;
      // the standby asks again.
      w.exec0("SET LOCAL lock_timeout = '1s'");
      Row now = ReadRow(w, true);
      const int64_t mine = now.epoch + 1;
      if (now.epoch == seen.epoch && (probed || now.Expired()) &&
          w.exec1("SELECT pg_try_advisory_lock" + LockArgs(mine))[0].as<bool>()) {
        w.exec_params0(std::string("UPDATE leadership SET epoch = $1, holder = $2, since_ms = ") +
                           kDbNowMs + " WHERE id = 1",
                       mine, holder);
        w.commit();
        took = Store::Leadership{mine, holder};
      }
    }
    if (probed) {
      pqxx::nontransaction n(*m.conn);
      n.exec1("SELECT pg_advisory_unlock" + LockArgs(seen.epoch));
    }
    if (!took) return took;  // someone else was quicker, or the holder renewed meanwhile
    m.fence.store(took->epoch);
    m.fresh_until.store(sent + kTtlMs - kMarginMs);
    {
      pqxx::nontransaction n(*m.conn);
      m.TakeLegacyLockLocked(n);
    }
    if (!m.renewer.joinable()) m.renewer = std::thread([&m] { m.RenewLoop(); });
    return took;
  } catch (const pqxx::sql_error& e) {
    m.conn.reset();  // whatever it locked goes with the session
    if (e.sqlstate() == kLockNotAvailable) return std::optional<Store::Leadership>();
    return Status::Internal(m.described + ": taking the lead: " + Trim(e.what()));
  } catch (const std::exception& e) {
    m.conn.reset();
    return Status::Internal(m.described + ": taking the lead: " + Trim(e.what()));
  }
}

Status PgLease::Check() {
  Impl& m = *impl_;
  if (m.fence.load() == 0) return Status::Ok();
  std::lock_guard<std::mutex> l(m.mu);
  if (m.gone.load()) return m.lost;
  try {
    if (!m.conn)
      return m.LoseLocked(Status::FailedPrecondition(m.described + ": the leader lease was lost"));
    // The session (and with it the lock) is alive, and nobody took the lead since.
    pqxx::nontransaction n(*m.conn);
    if (ReadRow(n, false).epoch != m.fence.load()) return m.DeposedLocked(n);
    return Status::Ok();
  } catch (const std::exception& e) {
    return m.LoseLocked(
        Status::FailedPrecondition(m.described + ": the leader lease was lost: " + Trim(e.what())));
  }
}

bool PgLease::Fresh() const {
  const Impl& m = *impl_;
  if (m.fence.load() == 0) return true;
  return !m.gone.load() && SteadyMs() < m.fresh_until.load();
}

int64_t PgLease::epoch() const { return impl_->fence.load(); }

int64_t PgLeaseTtlMs() { return PgLease::kTtlMs; }
int64_t PgLeaseRenewMs() { return PgLease::kRenewMs; }

}  // namespace tessera::store::internal
