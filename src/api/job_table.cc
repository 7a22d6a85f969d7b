#include "api/job_table.h"

#include <algorithm>
#include <cassert>
#include <set>

namespace tessera::api {

std::vector<std::string> NodesOf(const Job& j) {
  std::vector<std::string> out;
  for (const auto& g : j.grants) {
    if (std::find(out.begin(), out.end(), g.node) == out.end()) out.push_back(g.node);
  }
  return out;
}

Job* JobTable::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const Job* JobTable::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Job* JobTable::handle_at(int handle) const {
  if (handle < 0 || handle >= static_cast<int>(by_handle_.size())) return nullptr;
  return by_handle_[handle];
}

Job& JobTable::Own(const Job& j) {
  assert(jobs_.count(j.rec.id) == 1 && &jobs_.at(j.rec.id) == &j);
  return const_cast<Job&>(j);  // the table's own record: it is not const here
}

void JobTable::ForEach(const std::function<void(const Job&)>& fn) const {
  for (const auto& [id, j] : jobs_) fn(j);
}

void JobTable::SeeId(int64_t number) { next_ = std::max(next_, number + 1); }

Job& JobTable::Insert(Job j) {
  const std::string id = j.rec.id;
  order_.push_back(id);
  if (!j.rec.idempotency_key.empty()) idem_[j.rec.idempotency_key] = id;
  return jobs_[id] = std::move(j);
}

void JobTable::Erase(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  if (!it->second.rec.idempotency_key.empty()) idem_.erase(it->second.rec.idempotency_key);
  jobs_.erase(it);
  if (!order_.empty() && order_.back() == id) order_.pop_back();
}

int64_t CommandBytes(const Json& spec) {
  // Each argument and variable also costs what holding it costs (a string, a JSON node, its
  // text): 4,095 empty arguments counted nothing and took 400 KB.
  constexpr int64_t kEach = 64;
  int64_t n = 0;
  if (const auto c = spec.find("command"); c != spec.end() && c->is_array()) {
    for (const Json& a : *c)
      n += kEach +
           (a.is_string() ? static_cast<int64_t>(a.get_ref<const std::string&>().size()) : 0);
  }
  if (const auto e = spec.find("env"); e != spec.end() && e->is_object()) {
    for (const auto& [k, v] : e->items())
      n += kEach + static_cast<int64_t>(k.size()) + 1 +
           (v.is_string() ? static_cast<int64_t>(v.get_ref<const std::string&>().size()) : 0);
  }
  return n;
}

void JobTable::Enter(Job& j) {
  live_.push_back(j.rec.id);
  j.counted_live = true;
  ++live_by_identity_[j.rec.identity];
  live_bytes_by_identity_[j.rec.identity] += CommandBytes(j.spec);
  if (j.handle >= 0) {
    if (j.handle >= static_cast<int>(by_handle_.size())) by_handle_.resize(j.handle + 1, nullptr);
    by_handle_[j.handle] = &j;
  }
  if (HoldsCapacity(j.state) || !j.agent.swap.held_on.empty()) NoteNodes(j);
}

void JobTable::NoteNodes(const Job& j) {
  if (!j.ext.backend.empty()) return;
  std::vector<std::string> nodes = NodesOf(j);
  // Held swapped out (loaded so after a restart): its paused processes are on that node.
  if (j.state == JobState::kPending && !j.agent.swap.held_on.empty())
    nodes = {j.agent.swap.held_on};
  for (const std::string& node : nodes) {
    std::vector<std::string>& ids = node_jobs_[node];
    if (std::find(ids.begin(), ids.end(), j.rec.id) == ids.end()) ids.push_back(j.rec.id);
  }
}

void JobTable::NoteEnded(const std::string& id) {
  ended_.push_back(id);
  ++ended_since_prune_;
}

void JobTable::CountOut(Job& j) {
  if (!j.counted_live || !IsTerminal(j.state)) return;
  j.counted_live = false;
  if (--live_by_identity_[j.rec.identity] <= 0) live_by_identity_.erase(j.rec.identity);
  int64_t& bytes = live_bytes_by_identity_[j.rec.identity];
  bytes -= CommandBytes(j.spec);
  if (bytes <= 0 || !live_by_identity_.count(j.rec.identity))
    live_bytes_by_identity_.erase(j.rec.identity);
}

const std::vector<std::string>& JobTable::LiveIds() const {
  // Pruned when ended ones are more than half the list: each scan stays proportional to the
  // live jobs without a pass over the list at every end.
  if (ended_since_prune_ > 64 && 2 * ended_since_prune_ > live_.size()) {
    live_.erase(std::remove_if(live_.begin(), live_.end(),
                               [&](const std::string& id) {
                                 auto it = jobs_.find(id);
                                 return it == jobs_.end() || IsTerminal(it->second.state);
                               }),
                live_.end());
    ended_since_prune_ = 0;
  }
  return live_;
}

void JobTable::ForEachLive(const std::function<void(const Job&)>& fn) const {
  for (const std::string& id : live_) {
    auto it = jobs_.find(id);
    if (it != jobs_.end() && !IsTerminal(it->second.state)) fn(it->second);
  }
}

const std::vector<std::string>& JobTable::OnNode(const std::string& node) const {
  std::vector<std::string>& ids = node_jobs_[node];
  ids.erase(std::remove_if(ids.begin(), ids.end(),
                           [&](const std::string& id) {
                             auto it = jobs_.find(id);
                             if (it == jobs_.end()) return true;
                             const Job& j = it->second;
                             if (j.state == JobState::kPending && !j.agent.swap.held_on.empty())
                               return j.agent.swap.held_on != node;  // held swapped out there
                             const auto nodes = NodesOf(j);
                             return !HoldsCapacity(j.state) || !j.ext.backend.empty() ||
                                    std::find(nodes.begin(), nodes.end(), node) == nodes.end();
                           }),
            ids.end());
  return ids;
}

const std::string* JobTable::IdempotentJob(const std::string& scoped) const {
  auto it = idem_.find(scoped);
  return it == idem_.end() ? nullptr : &it->second;
}

int64_t JobTable::LiveBytesOf(const std::string& identity) const {
  auto it = live_bytes_by_identity_.find(identity);
  return it == live_bytes_by_identity_.end() ? 0 : it->second;
}

int64_t JobTable::LiveOf(const std::string& identity) const {
  auto it = live_by_identity_.find(identity);
  return it == live_by_identity_.end() ? 0 : it->second;
}

void JobTable::EvictEnded(size_t keep, int64_t written) {
  // One pass over the indexes for a thousand or more at a time.
  std::set<std::string> gone;
  std::deque<std::string> kept;
  while (ended_.size() > keep) {
    std::string id = std::move(ended_.front());
    ended_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !IsTerminal(it->second.state)) continue;  // gone, or requeued since
    if (it->second.last_seq > written) {
      kept.push_back(std::move(id));
      continue;
    }
    const int h = it->second.handle;
    if (h >= 0 && h < static_cast<int>(by_handle_.size())) by_handle_[h] = nullptr;
    if (!it->second.rec.idempotency_key.empty()) idem_.erase(it->second.rec.idempotency_key);
    jobs_.erase(it);
    gone.insert(std::move(id));
  }
  for (auto& id : kept) ended_.push_front(std::move(id));
  if (gone.empty()) return;
  auto out = [&](const std::string& id) { return gone.count(id) != 0; };
  live_.erase(std::remove_if(live_.begin(), live_.end(), out), live_.end());
  order_.erase(std::remove_if(order_.begin(), order_.end(), out), order_.end());
  for (auto& [node, ids] : node_jobs_)
    ids.erase(std::remove_if(ids.begin(), ids.end(), out), ids.end());
}

void JobTable::Clear() { *this = JobTable(); }

}  // namespace tessera::api
