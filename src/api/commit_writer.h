// CommitWriter: the one writer of the control plane's durable state. Batches of events and job
// records are handed over in the order they were decided, each numbered (its sequence) and
// tagged with the memory epoch it was decided on; one thread writes them to the store, as many
// as have queued up in one transaction, so deciding goes on while the last decisions are written.
//
//   Push(seq, epoch, ...) ─► queue ─► writer thread ─► Write(events, records) ─► written_seq
//                                                     └► replies (WhenDurable), news for watches
//
// A failed write fails its batches, and every batch of the same or an older epoch queued behind
// it is dropped unwritten ("not recorded: an earlier commit failed"): they rest on memory that ran
// ahead of the store. The owner learns of it (TakeProgress: `reload`), rebuilds its memory from
// the store, and queues the batches that follow under a new epoch.
//
// It knows nothing of jobs or nodes beyond the node names a batch carries; the owner
// supplies the write (the store's Commit) and what to do with the nodes a written batch gives
// new orders (order watches). Thread-safety: every method may be called from any thread; `Write`
// runs on the writer's thread with no lock held, replies and news after it, also without it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace tessera::api {

class CommitWriter {
 public:
  struct Batch {
    int64_t seq = 0;    // numbered by the owner, 1, 2, ... in the order pushed
    int64_t epoch = 0;  // the owner's memory reloads before it was decided
    std::vector<store::Event> events;
    std::vector<store::JobRecord> records;
    std::vector<std::string> watched;  // nodes it gives new orders: News once durable
  };
  using Write =
      std::function<Status(const std::vector<store::Event>&, const std::vector<store::JobRecord>&)>;
  using News = std::function<void(const std::vector<std::pair<std::string, int64_t>>&)>;

  // Starts the writer thread. `idle`, when set, is called on it once the queue has stayed empty
  // for `settle` after a write, or the writer stops (the store's upkeep: store::Store::Tidy). A
  // cycle queues its decisions in chunks tens of milliseconds apart: upkeep between two of them
  // would hold up the rest of the cycle's commit. `idle` does a step and says whether more is
  // left: it is called again while the queue stays empty, and a batch queued meanwhile is
  // written first (upkeep resumes once the queue has been empty for `settle` again).
  using Idle = std::function<bool()>;
  CommitWriter(Write write, News news, Idle idle = nullptr,
               std::chrono::milliseconds settle = kDefaultSettle);
  static constexpr std::chrono::milliseconds kDefaultSettle{250};
  ~CommitWriter();  // Stop()
  CommitWriter(const CommitWriter&) = delete;
  CommitWriter& operator=(const CommitWriter&) = delete;

  // Writes what is queued, then ends the thread. Idempotent.
  void Stop();
  void Push(Batch b);
  // Waits until every batch up to `target` was written or dropped; the failure that took
  // `target`'s batch, if one did.
  Status Await(int64_t target);
  // The same without a waiting thread: `done` is called once they are (from the writer's thread;
  // at once, on this one, if they are already). `done` must not call back into the writer's
  // waits.
  void WhenDurable(int64_t target, std::function<void(Status)> done);
  // Waits until every batch up to `target` is written and no reply is being called.
  void AwaitQuiet(int64_t target);
  // Waits until every batch up to `target` was written (or the writer stops); true when a write
  // failed for a batch of epoch `epoch` or later, its error in *failure.
  bool AwaitDropped(int64_t target, int64_t epoch, Status* failure);
  // What happened since the last call: whether a write failed for `epoch` (the owner's current
  // one) so memory must be rebuilt, and why.
  struct Progress {
    bool reload = false;
    Status cause;
    int64_t written = 0;
  };
  Progress TakeProgress(int64_t epoch);
  // The outcome of batch `seq`: nullopt while it is not written yet.
  std::optional<Status> OutcomeOf(int64_t seq);
  int64_t Written();
  int64_t Durable();  // every batch up to it that was not dropped is in the store

 private:
  struct Failure {
    int64_t first = 0, last = 0;  // the batches that were not written
    Status why;
  };
  void Loop();
  Status FailureUpToLocked(int64_t target) const;  // REQUIRES: mu_ held
  // Drops the prefix of `group` of a failed epoch. REQUIRES: mu_ held.
  void DropFailedLocked(std::deque<Batch>& group);

  const Write write_;
  const News news_;
  const Idle idle_;
  const std::chrono::milliseconds settle_;
  std::mutex mu_;
  std::condition_variable work_cv_;     // the writer: something was queued, or stop
  std::condition_variable durable_cv_;  // waiters: written_ moved, or a reply round ended
  std::deque<Batch> queue_;
  int64_t written_ = 0;         // every batch up to this one was written or dropped
  int64_t durable_ = 0;         // every batch up to this one that was not dropped is in the store
  int64_t dropped_epoch_ = -1;  // a write failed: batches of this epoch or older are dropped
  Status last_failure_;
  std::deque<Failure> failures_;                                 // the most recent ones
  std::multimap<int64_t, std::function<void(Status)>> waiters_;  // by the batch they rest on
  bool replying_ = false;  // replies and news are being called without mu_
  bool stop_ = false;
  // The writer thread's own: where the batches of one write are gathered when there are several
  // (emptied after each write, their capacity kept).
  std::vector<store::Event> events_;
  std::vector<store::JobRecord> records_;
  std::thread thread_;
};

}  // namespace tessera::api
