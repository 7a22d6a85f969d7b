// JobTable: the jobs in memory, by id, and the indexes the engine's steps walk instead of every
// job: submit order, the live (not yet ended) ones, by quota handle, by agent node, by
// idempotency key, live jobs per identity, and the ended ones waiting to leave memory.
//
// It owns the records. The engine and its cycle change a record's fields through the reference
// they get, and the indexes only through these methods; the executors see the table const
// (api/ledger_port.h). The table never reaches the store or the quota engine. Not thread-safe:
// the engine calls it under its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "api/records.h"

namespace tessera::api {

// The bytes a job's command and environment hold (its spec's "command" strings, and each
// variable's name, '=' and value): what max_command_bytes_per_identity bounds.
int64_t CommandBytes(const Json& spec);

class JobTable {
 public:
  // The job `id`, or nullptr when it is not in memory (never submitted, or ended and evicted).
  Job* Find(const std::string& id);
  const Job* Find(const std::string& id) const;
  // REQUIRES: `id` is in the table (an id from LiveIds, OnNode or Order).
  Job& Get(const std::string& id) { return jobs_[id]; }
  const Job& Get(const std::string& id) const { return jobs_.at(id); }
  // By its quota engine handle; nullptr when none.
  Job* ByHandle(int handle) { return handle_at(handle); }
  const Job* ByHandle(int handle) const { return handle_at(handle); }
  // The table's own record `j` (a reference this table gave), to change: for the ledger, which
  // lends the executors the table const and changes what they report through it.
  // REQUIRES: `j` is in this table.
  Job& Own(const Job& j);
  size_t size() const { return jobs_.size(); }
  void ForEach(const std::function<void(const Job&)>& fn) const;

  // "j-N", N one more than any number seen or handed out.
  std::string NewId() { return "j-" + std::to_string(next_++); }
  void SeeId(int64_t number);  // a job number in use (a loaded job's, the store's largest)

  // Enters `j` (rec.id set): in submit order, and found by its idempotency key.
  Job& Insert(Job j);
  // Takes back an Insert nothing else saw (a submission the quota engine refused).
  void Erase(const std::string& id);
  // `j` is live (not ended): walked by LiveIds, counted for its identity, found by its handle
  // and, while it holds grants on agent nodes, by OnNode.
  void Enter(Job& j);
  // `j` holds grants on the agent nodes NodesOf(j): OnNode finds it there.
  void NoteNodes(const Job& j);
  // Job `id` ended: it may leave memory (EvictEnded) once its last record is durable.
  void NoteEnded(const std::string& id);
  // `j`'s end is queued for the store: no longer counted for its identity.
  void CountOut(Job& j);

  // The live ids in submit order (ended jobs are dropped from the list lazily).
  // REQUIRES: no job is added while walking the result.
  const std::vector<std::string>& LiveIds() const;
  // The live jobs in submit order, for readers (ended ones the list still holds are skipped).
  void ForEachLive(const std::function<void(const Job&)>& fn) const;
  // The ids of the jobs holding grants on `node` (entries no longer true are dropped here).
  const std::vector<std::string>& OnNode(const std::string& node) const;
  const std::vector<std::string>& Order() const { return order_; }  // submit order
  // The job id an idempotency key ("identity\nkey") names, or nullptr.
  const std::string* IdempotentJob(const std::string& scoped) const;
  void ForgetKey(const std::string& scoped) { idem_.erase(scoped); }
  int64_t LiveOf(const std::string& identity) const;  // jobs of `identity` not yet ended
  // Bytes of command and environment (CommandBytes) of those jobs.
  int64_t LiveBytesOf(const std::string& identity) const;

  // Ended jobs waiting to leave memory.
  size_t EndedWaiting() const { return ended_.size(); }
  // Their ids, oldest end first: every ended job in memory but one the first tick after a
  // restart has yet to end (recovery's failed_on_load), and none of another state.
  const std::deque<std::string>& EndedIds() const { return ended_; }
  // The oldest ended jobs leave memory until `keep` remain, each once its last batch
  // (Job::last_seq) is at most `written`.
  void EvictEnded(size_t keep, int64_t written);
  void Clear();

 private:
  std::map<std::string, Job> jobs_;          // by id
  std::map<std::string, std::string> idem_;  // scoped idempotency key -> job id
  std::vector<std::string> order_;           // ids, in submit order
  std::deque<std::string> ended_;            // ended ids, oldest end first
  std::vector<Job*> by_handle_;              // quota handle -> job (map nodes do not move)
  Job* handle_at(int handle) const;
  // The lazily pruned indexes (pruning changes no answer, so readers of a const table prune).
  mutable std::vector<std::string> live_;  // ids not yet ended
  mutable size_t ended_since_prune_ = 0;   // jobs ended since live_ was last pruned
  std::map<std::string, int64_t> live_by_identity_;
  std::map<std::string, int64_t> live_bytes_by_identity_;
  mutable std::unordered_map<std::string, std::vector<std::string>> node_jobs_;  // node -> ids
  int64_t next_ = 1;
};

}  // namespace tessera::api
