#include "api/commit_writer.h"

#include <iterator>

namespace tessera::api {

CommitWriter::CommitWriter(Write write, News news, Idle idle, std::chrono::milliseconds settle)
    : write_(std::move(write)), news_(std::move(news)), idle_(std::move(idle)), settle_(settle) {
  thread_ = std::thread([this] { Loop(); });
}

CommitWriter::~CommitWriter() { Stop(); }

void CommitWriter::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CommitWriter::Push(Batch b) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(b));
  }
  work_cv_.notify_one();
}

Status CommitWriter::Await(int64_t target) {
  std::unique_lock<std::mutex> l(mu_);
  durable_cv_.wait(l, [&] { return written_ >= target; });
  return FailureUpToLocked(target);
}

void CommitWriter::WhenDurable(int64_t target, std::function<void(Status)> done) {
  Status now;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (written_ < target) {
      waiters_.emplace(target, std::move(done));
      return;
    }
    now = FailureUpToLocked(target);
  }
  done(now);
}

void CommitWriter::AwaitQuiet(int64_t target) {
  std::unique_lock<std::mutex> l(mu_);
  durable_cv_.wait(l, [&] { return written_ >= target && !replying_; });
}

bool CommitWriter::AwaitDropped(int64_t target, int64_t epoch, Status* failure) {
  std::unique_lock<std::mutex> l(mu_);
  durable_cv_.wait(l, [&] { return written_ >= target || stop_; });
  *failure = last_failure_;
  return dropped_epoch_ >= epoch;
}

CommitWriter::Progress CommitWriter::TakeProgress(int64_t epoch) {
  std::lock_guard<std::mutex> l(mu_);
  Progress p;
  p.reload = dropped_epoch_ >= epoch;
  p.cause = last_failure_;
  p.written = written_;
  return p;
}

std::optional<Status> CommitWriter::OutcomeOf(int64_t seq) {
  std::lock_guard<std::mutex> l(mu_);
  if (seq > written_) return std::nullopt;
  return FailureUpToLocked(seq);
}

int64_t CommitWriter::Written() {
  std::lock_guard<std::mutex> l(mu_);
  return written_;
}

int64_t CommitWriter::Durable() {
  std::lock_guard<std::mutex> l(mu_);
  return durable_;
}

Status CommitWriter::FailureUpToLocked(int64_t target) const {
  for (const Failure& f : failures_) {
    if (f.first <= target && target <= f.last) return f.why;
  }
  return Status::Ok();
}

void CommitWriter::DropFailedLocked(std::deque<Batch>& group) {
  // What was queued before the reload that follows a failed write rests on the memory that ran
  // ahead: dropped (epochs only grow along the queue, so it is a prefix).
  size_t dropped = 0;
  while (dropped < group.size() && group[dropped].epoch <= dropped_epoch_) ++dropped;
  if (dropped == 0) return;
  failures_.push_back({group.front().seq, group[dropped - 1].seq,
                       Status::Internal("not recorded: an earlier commit failed (" +
                                        last_failure_.message() + ")")});
  written_ = group[dropped - 1].seq;
  group.erase(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(dropped));
}

namespace {

// Empties `c` and gives its memory back.
template <typename Container>
void Free(Container& c) {
  Container().swap(c);
}

}  // namespace

void CommitWriter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    work_cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued was written
    std::deque<Batch> group;
    group.swap(queue_);
    DropFailedLocked(group);
    std::vector<std::pair<std::string, int64_t>> news;  // watched nodes with new orders
    const bool wrote = !group.empty();
    if (wrote) {
      // One batch is written as it is; several are gathered into buffers that keep their
      // capacity from one write to the next (a fresh vector of a cycle's events each time would
      // be new memory, and new memory costs a page fault per page).
      const std::vector<store::Event>* events = &group.front().events;
      const std::vector<store::JobRecord>* records = &group.front().records;
      if (group.size() > 1) {
        size_t n_events = 0, n_records = 0;
        for (const Batch& b : group) {
          n_events += b.events.size();
          n_records += b.records.size();
        }
        events_.reserve(n_events);
        records_.reserve(n_records);
        for (Batch& b : group) {
          std::move(b.events.begin(), b.events.end(), std::back_inserter(events_));
          std::move(b.records.begin(), b.records.end(), std::back_inserter(records_));
        }
        events = &events_;
        records = &records_;
      }
      l.unlock();
      const Status st = write_(*events, *records);
      l.lock();
      written_ = group.back().seq;
      if (st.ok()) {
        durable_ = group.back().seq;
        for (Batch& b : group) {
          for (std::string& n : b.watched) news.emplace_back(std::move(n), b.seq);
        }
      } else {
        dropped_epoch_ = group.back().epoch;
        last_failure_ = st;
        failures_.push_back({group.front().seq, group.back().seq, st});
      }
    }
    // Replies whose batches were written, with their outcome (before older failures are let go).
    std::vector<std::pair<std::function<void(Status)>, Status>> replies;
    for (auto it = waiters_.begin(); it != waiters_.end() && it->first <= written_;) {
      replies.emplace_back(std::move(it->second), FailureUpToLocked(it->first));
      it = waiters_.erase(it);
    }
    while (failures_.size() > 64) failures_.pop_front();
    durable_cv_.notify_all();
    if (!news.empty() || !replies.empty()) {
      replying_ = true;
      l.unlock();
      for (auto& [reply, st] : replies) reply(st);
      replies.clear();
      if (!news.empty() && news_) news_(news);
      l.lock();
      replying_ = false;
      durable_cv_.notify_all();
    }
    // What was written is freed last, without the lock: after a cycle, tens of thousands of
    // strings, which neither the waiters answered above nor Push (the engine, under its own
    // mutex) should wait for.
    l.unlock();
    events_.clear();
    records_.clear();
    Free(group);
    l.lock();
    if (idle_ && wrote && queue_.empty()) {  // the store's upkeep, once nothing more comes
      work_cv_.wait_for(l, settle_, [&] { return stop_ || !queue_.empty(); });
    }
    // A step at a time while nothing is queued; when stopping, to the end.
    while (idle_ && wrote && queue_.empty()) {
      l.unlock();
      const bool more = idle_();
      l.lock();
      if (!more) break;
    }
  }
}

}  // namespace tessera::api
