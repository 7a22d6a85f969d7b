// The ports' named changes of the jobs and the quota engine: each change of the quota engine
// records what it decided in the caller's batch (Translate), so an executor cannot change it and
// leave the batch behind.
#include "api/ledger_port.h"

#include <algorithm>

#include "api/recovery.h"

namespace tessera::api {

void LedgerPort::Decided(size_t mark, Batch& b) {
  Translate(mark, b);
  WantCycle();
}

void LedgerPort::Stopped(const Job& j, Batch& b) {
  const size_t mark = Quota().events().size();
  QuotaToChange().Stopped(j.handle, NowMs() / 1000);
  Decided(mark, b);  // job.requeued: pending again, its submit time kept
}

void LedgerPort::Requeue(const Job& j, const std::string& why, Batch& b) {
  const size_t mark = Quota().events().size();
  QuotaToChange().Requeue(j.handle, NowMs() / 1000, why);
  Decided(mark, b);
}

void LedgerPort::Evict(const Job& j, const std::string& why, Batch& b) {
  const size_t mark = Quota().events().size();
  QuotaToChange().Evict(j.handle, NowMs() / 1000, why);
  Decided(mark, b);  // job.preempted: the agent's stop order, the policy's grace
}

void LedgerPort::SetReason(const Job& j, std::string reason, std::optional<int64_t> update_ms) {
  Job& own = JobsToChange().Own(j);
  own.rec.reason = std::move(reason);
  if (update_ms) own.rec.update_ms = *update_ms;
}

void LedgerPort::SetExitCode(const Job& j, std::optional<int> code) {
  JobsToChange().Own(j).rec.exit_code = code;
}

void LedgerPort::SetRanFor(const Job& j, int64_t run_ms) {
  Job& own = JobsToChange().Own(j);
  if (own.start_ms == 0) own.start_ms = std::max(own.rec.submit_ms, NowMs() - run_ms);
}

void LedgerPort::SetIdle(const Job& j, int64_t since_s) {
  QuotaToChange().SetIdle(j.handle, since_s);
}

void LedgerPort::SetExternalAnswering(const std::string& backend, bool answering) {
  QuotaToChange().SetExternalAnswering(backend, answering);
  WantCycle();
}

void LedgerPort::SetExternalCapacity(const std::string& backend, int64_t gpu_milli) {
  QuotaToChange().SetExternalCapacity(backend, gpu_milli);
  WantCycle();
}

Status AgentPort::AddNode(const quota::NodeSpec& spec, bool down) {
  auto added = QuotaToChange().AddNode(spec, NowMs() / 1000);
  if (!added.ok()) return added.status();
  if (down) QuotaToChange().SetNodeDown(spec.name, true);
  return Status::Ok();
}

void AgentPort::SetNodeDown(const std::string& node, bool down) {
  QuotaToChange().SetNodeDown(node, down);
  WantCycle();
}

void AgentPort::ApplyIsolation(const NodeInfo& n) { api::ApplyIsolation(QuotaToChange(), n); }

}  // namespace tessera::api
