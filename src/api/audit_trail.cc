// The audit trail's events (api/audit_trail.h).
#include "api/audit_trail.h"

#include <utility>

#include "common/text.h"

namespace tessera::api {

AuditTrail::AuditTrail(std::unique_ptr<LedgerPort> ledger) : ledger_(std::move(ledger)) {}

void AuditTrail::RecordLocked(const std::string& actor, const std::string& kind,
                              const std::string& subject, const std::string& reason, Json data) {
  if (!ledger_->Broken().ok()) return;
  const int64_t now = ledger_->NowMs();
  // Refusals anyone with a token (or none) may cause at will: at most kPerSecond a second, the
  // rest counted into the next (an agent bound to one node sent 3,000 heartbeats for others in
  // 0.6 s: 3,000 events).
  PerSecondLimit* limit = kind == "auth.failed"     ? &failed_
                          : kind == "auth.refused"  ? &refused_
                          : kind == "agent.refused" ? &agent_refused_
                                                    : nullptr;
  if (limit != nullptr) {
    const int64_t suppressed = limit->Admit(now / 1000);
    if (suppressed < 0) return;
    if (suppressed > 0) data["suppressed"] = suppressed;
  }
  Batch b;
  b.Add(EventAt(now, actor, kind, subject, reason, std::move(data)), nullptr);
  ledger_->Queue(b);
}

void AuditTrail::AuthFailure(const std::string& method, const std::string& path,
                             const std::string& why) {
  auto lock = ledger_->Lock();
  // Anyone may send it: a path of 60 KB each time once grew the store by 80 MB in 30 s.
  RecordLocked("-", "auth.failed", CutForRecord(path), why, {{"method", CutForRecord(method, 32)}});
}

void AuditTrail::IdentityEvent(const std::string& kind, const Identity& who,
                               const std::string& subject, const std::string& why, Json data) {
  auto lock = ledger_->Lock();
  data["role"] = RoleName(who.role);
  RecordLocked(who.name, kind, subject, why, std::move(data));
}

}  // namespace tessera::api
