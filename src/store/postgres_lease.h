// PostgreSQL's leader lease: a renewed lease with an expiry, in the store's leadership row, so
// that a leader that stalls (SIGSTOP, a long pause, a frozen VM) loses it like one that died.
//
// The row (id 1 of `leadership`): epoch, holder (the leader's advertised URL) and since_ms, which
// the leader sets to the database's clock when it takes the lease and again at every renewal
// (every kRenewMs). The lease is held while since_ms + kTtlMs is in the future, by the database's
// clock (the servers' clocks never compare).
//
// Besides, the leader holds a session advisory lock keyed by its epoch (epoch, 0x7e55e7a1) on a
// connection of its own: a standby that can take that lock knows the holder's session has ended
// (the process died, or its connection was cut) and takes the lease at once, without waiting for
// the expiry. A stopped process keeps its session, and with it that lock: then the expiry decides.
//
// A standby takes the lease when it is free (nobody led), expired, or its holder's session has
// ended: in one transaction that locks the row (waiting at most 1 s for a write in flight of the
// old leader, which holds it FOR SHARE), bumps the epoch and records itself. Every write of the
// store checks, inside its transaction, that the epoch is still its own (postgres_store.cc), so
// the old leader's later writes are refused whatever it believes.
//
// The leader's own view: Fresh() is true while its last renewal (counted from when it was sent,
// by this process's monotonic clock) is younger than kTtlMs - kMarginMs, i.e. while no standby can
// have taken the lease yet. A leader that resumes from a stall sees it false at once, before it
// learns (Check()) that it was deposed; it must not act on its memory meanwhile.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace tessera::store::internal {

class PgLease {
 public:
  static constexpr int64_t kTtlMs = 5000;     // how long a renewal holds the lease
  static constexpr int64_t kRenewMs = 1000;   // how often the leader renews
  static constexpr int64_t kMarginMs = 1000;  // Fresh() ends this much before the expiry

  // `url`: the libpq URI; `described`: the URL as logs show it (no password).
  PgLease(std::string url, std::string described);
  ~PgLease();
  PgLease(const PgLease&) = delete;
  PgLease& operator=(const PgLease&) = delete;

  // Takes the lease when it is free, expired or its holder's session has ended: the new
  // leadership; nullopt while another server holds it (or a write of the old leader still holds
  // the row). Once taken, a thread renews it until this object goes.
  Result<std::optional<Store::Leadership>> TryLead(const std::string& holder);
  // OK while this process leads: its lease session is alive, its renewals land and the epoch is
  // its own. FailedPrecondition ("deposed", or "the leader lease was lost") otherwise, for good.
  Status Check();
  // See above; true when TryLead never succeeded (nothing to be fresh about).
  bool Fresh() const;
  // The epoch this process took the lease in (kept once deposed: its writes stay refused); 0 if
  // it never did (writes unfenced).
  int64_t epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::store::internal
