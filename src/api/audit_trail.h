// AuditTrail: who was refused, and who signed in, as events in the store: a request refused for
// its credentials ("auth.failed"), a known identity refused a route ("auth.refused"), an identity
// of the OpenID Connect provider signing in ("auth.signin"), an agent speaking for a node it is
// not bound to ("agent.refused"). Each is queued with the next batch, not waited for. Refusals
// are at most kPerSecond events a second of each kind; the rest are counted into the next one
// ("suppressed"), so that a flood of bad tokens cannot flood the event log.
//
// It reaches the engine only through a LedgerPort (api/ledger_port.h): the lock, the clock and
// the commit pipeline's queue.
//
// Thread-safety: AuthFailure and IdentityEvent from any thread, without the engine's lock;
// RecordLocked with it held.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/config.h"
#include "api/ledger_port.h"
#include "api/view_cache.h"

namespace tessera::api {

class AuditTrail {
 public:
  using Json = nlohmann::json;
  explicit AuditTrail(std::unique_ptr<LedgerPort> ledger);

  // A request refused for its credentials (missing or unknown token): "auth.failed".
  void AuthFailure(const std::string& method, const std::string& path, const std::string& why);
  // A known identity refused a route ("auth.refused"), or a provider's identity signing in
  // ("auth.signin"): the event names `who` and its role.
  void IdentityEvent(const std::string& kind, const Identity& who, const std::string& subject,
                     const std::string& why, Json data);
  // Any audit event, under the engine's lock (nothing while memory could not be rebuilt).
  void RecordLocked(const std::string& actor, const std::string& kind, const std::string& subject,
                    const std::string& reason, Json data);
  static constexpr int kPerSecond = 20;

 private:
  std::unique_ptr<LedgerPort> ledger_;
  // Under the engine's lock: one a kind, so that an agent's refusals cannot use up the budget
  // that records failed sign-ins (nor their suppressed counts land on another kind's event).
  PerSecondLimit failed_{kPerSecond}, refused_{kPerSecond}, agent_refused_{kPerSecond};
};

}  // namespace tessera::api
