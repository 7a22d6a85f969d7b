// ReplaySwapCard (usage_whatif.h): the swap model's rules (swap_model.h) on one card, driven by
// observed active spans instead of drawn ones.
#include <algorithm>
#include <climits>
#include <queue>
#include <set>

#include "sim/swap_model.h"
#include "sim/usage_whatif.h"

namespace tessera::sim::usage {
namespace {

// At one time: departures, arrivals, then the ends of active spans, wakes, idle checks.
enum class Kind {
  kDepart = 0,
  kArrive = 1,
  kDeactivate = 2,
  kActivate = 3,
  kIdleCheck = 4,
  kSlice = 5
};

struct Ev {
  int64_t at_us;
  Kind kind;
  int who;
  bool operator>(const Ev& o) const {
    if (at_us != o.at_us) return at_us > o.at_us;
    if (kind != o.kind) return kind > o.kind;
    return who > o.who;
  }
};

struct State {
  bool present = false, resident = false, active = false, waiting = false, on_disk = false;
  bool preempted = false;  // swapped out while active to make room (slicing), waiting to return
  int64_t last_active_us = 0, activated_us = 0, resident_since_us = 0;
  int64_t running_since_us = 0;  // active and on the card since
};

}  // namespace

SwapCardResult ReplaySwapCard(std::vector<SwapOccupant>* occupants, int64_t card_memory_mib,
                              const WhatIfOptions& o) {
  SwapCardResult r;
  std::vector<SwapOccupant>& occ = *occupants;
  std::vector<State> st(occ.size());
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> events;
  for (size_t i = 0; i < occ.size(); ++i) {
    const int w = static_cast<int>(i);
    occ[i].resident_ms = 0;
    events.push({occ[i].arrive_ms * 1000, Kind::kArrive, w});
    events.push({occ[i].depart_ms * 1000, Kind::kDepart, w});
    for (const Span& s : occ[i].active) {
      const int64_t from = std::max(s.from_ms, occ[i].arrive_ms);
      const int64_t to = std::min(s.to_ms, occ[i].depart_ms);
      if (from >= to) continue;
      events.push({from * 1000, Kind::kActivate, w});
      events.push({to * 1000, Kind::kDeactivate, w});
    }
  }
  int64_t resident_mib = 0, host_mib = 0, link_free_us = 0;
  int64_t next_preempt_us = 0;  // slicing: at most one preemption per card per 2 s
  std::set<int64_t> slice_checks;
  const int64_t slice_us = o.slice_ms * 1000;
  std::vector<int> waiting;
  auto cap = [&](int j) { return occ[static_cast<size_t>(j)].cap_mib; };
  auto transfer_us = [&](int64_t mib, bool disk) {
    return mib * 1'048'576 / (disk ? o.disk_mbps : o.host_mbps);
  };
  auto leave_card = [&](int j, int64_t t) {
    State& s = st[static_cast<size_t>(j)];
    occ[static_cast<size_t>(j)].resident_ms += (t - s.resident_since_us) / 1000;
    s.resident = false;
    resident_mib -= cap(j);
  };
  auto swap_out = [&](int j, int64_t t) -> int64_t {
    State& s = st[static_cast<size_t>(j)];
    const bool disk = host_mib + cap(j) > o.host_ram_mib;
    leave_card(j, t);
    s.on_disk = disk;
    if (!disk) host_mib += cap(j);
    r.disk_swap_outs += disk;
    ++r.swap_outs;
    r.swapped_mib += cap(j);
    r.peak_host_mib = std::max(r.peak_host_mib, host_mib);
    return t + transfer_us(cap(j), disk);
  };
  // Resident idle occupants idle since `before` or earlier, least recently active first.
  auto idle_ones = [&](int64_t before) {
    std::vector<int> idle;
    for (size_t j = 0; j < st.size(); ++j) {
      const State& s = st[j];
      if (s.present && s.resident && !s.active && !s.waiting && s.last_active_us <= before)
        idle.push_back(static_cast<int>(j));
    }
    std::sort(idle.begin(), idle.end(), [&](int a, int b) {
      const int64_t x = st[static_cast<size_t>(a)].last_active_us,
                    y = st[static_cast<size_t>(b)].last_active_us;
      return x != y ? x < y : a < b;
    });
    return idle;
  };
  auto largest_cap = [&] {
    int64_t m = 0;
    for (size_t j = 0; j < st.size(); ++j) {
      if (st[j].present) m = std::max(m, occ[j].cap_mib);
    }
    return m;
  };
  auto keep_headroom = [&](int64_t now) {
    const int64_t want = largest_cap();
    if (card_memory_mib - resident_mib >= want) return;
    for (int j : idle_ones(now - o.idle_ms * 1000)) {
      if (card_memory_mib - resident_mib >= want) break;
      link_free_us = swap_out(j, std::max(now, link_free_us));
    }
  };
  auto resume = [&](int i, int64_t now) -> bool {
    State& s = st[static_cast<size_t>(i)];
    int64_t free = card_memory_mib - resident_mib;
    std::vector<int> victims;
    if (free < cap(i)) {
      for (int j : idle_ones(now)) {
        if (free >= cap(i)) break;
        victims.push_back(j);
        free += cap(j);
      }
    }
    std::vector<int> preempt;
    if (free < cap(i) && slice_us > 0 && now >= next_preempt_us) {
      // Slicing: active shares that have run a slice or longer make room, longest first.
      std::vector<int> held;
      for (size_t j = 0; j < st.size(); ++j) {
        if (st[j].present && st[j].resident && st[j].active && !st[j].waiting &&
            now - st[j].running_since_us >= slice_us)
          held.push_back(static_cast<int>(j));
      }
      std::sort(held.begin(), held.end(), [&](int a, int b) {
        return st[static_cast<size_t>(a)].running_since_us <
               st[static_cast<size_t>(b)].running_since_us;
      });
      for (int j : held) {
        if (free >= cap(i)) break;
        preempt.push_back(j);
        free += cap(j);
      }
    }
    if (free < cap(i)) return false;
    int64_t t = std::max(now, link_free_us);
    for (int j : victims) t = swap_out(j, t);
    for (int j : preempt) {
      State& v = st[static_cast<size_t>(j)];
      t = swap_out(j, t);
      v.waiting = v.preempted = true;
      v.activated_us = now;
      waiting.push_back(j);
      ++r.preemptions;
    }
    if (!preempt.empty()) next_preempt_us = now + 2'000'000;
    t += transfer_us(cap(i), s.on_disk);
    if (!s.on_disk) host_mib -= cap(i);
    s.on_disk = false;
    link_free_us = t;
    s.resident = true;
    s.resident_since_us = now;  // the card's memory is kept for it from now
    resident_mib += cap(i);
    if (s.active && s.preempted) {
      r.returns_us.push_back(t - s.activated_us);
    } else if (s.active) {
      r.wakes_us.push_back(t - s.activated_us);
      r.activations_us.push_back(t - s.activated_us);
    }
    s.running_since_us = t;
    s.waiting = s.preempted = false;
    keep_headroom(now);
    return true;
  };
  auto serve_waiting = [&](int64_t now) {
    ServeInTurn(waiting, [&](int share) { return resume(share, now); });
    if (slice_us == 0 || waiting.empty()) return;
    // Called again when the next active share reaches its slice.
    int64_t next = INT64_MAX;
    for (const State& v : st) {
      if (!v.present || !v.resident || !v.active || v.waiting) continue;
      const int64_t at = std::max(v.running_since_us + slice_us, next_preempt_us);
      if (at > now) next = std::min(next, at);
    }
    if (next != INT64_MAX && slice_checks.insert(next).second) events.push({next, Kind::kSlice, 0});
  };
  // A wait for memory ends without it (the span or the workload ended first).
  auto wait_ended = [&](State& v, int64_t now) {
    (v.preempted ? r.returns_us : r.wakes_us).push_back(now - v.activated_us);
    if (!v.preempted) r.activations_us.push_back(now - v.activated_us);
  };
  auto drop_waiting = [&](int i) {
    waiting.erase(std::remove(waiting.begin(), waiting.end(), i), waiting.end());
  };
  while (!events.empty()) {
    const Ev ev = events.top();
    events.pop();
    const int i = ev.who;
    State& s = st[static_cast<size_t>(i)];
    switch (ev.kind) {
      case Kind::kArrive:
        s.present = true;
        s.last_active_us = ev.at_us;
        if (card_memory_mib - resident_mib >= cap(i)) {
          s.resident = true;
          s.resident_since_us = ev.at_us;
          resident_mib += cap(i);
        } else if (host_mib + cap(i) <= o.host_ram_mib) {
          host_mib += cap(i);
          r.peak_host_mib = std::max(r.peak_host_mib, host_mib);
        } else {
          s.on_disk = true;
        }
        events.push({ev.at_us + o.idle_ms * 1000, Kind::kIdleCheck, i});
        break;
      case Kind::kDepart:
        if (s.waiting) {
          wait_ended(s, ev.at_us);
          drop_waiting(i);
        }
        if (s.resident) {
          leave_card(i, ev.at_us);
        } else if (!s.on_disk) {
          host_mib -= cap(i);
        }
        s = State{};
        serve_waiting(ev.at_us);
        break;
      case Kind::kActivate:
        if (!s.present) break;
        s.active = true;
        s.activated_us = ev.at_us;
        if (s.resident) {
          r.activations_us.push_back(0);
          s.running_since_us = ev.at_us;
        } else {
          waiting.push_back(i);
          s.waiting = true;
          serve_waiting(ev.at_us);
          if (s.waiting) ++r.waits_for_room;
        }
        break;
      case Kind::kDeactivate:
        if (!s.present || !s.active) break;
        if (s.waiting) {  // the rest of its span went by waiting for room
          wait_ended(s, ev.at_us);
          drop_waiting(i);
          s.waiting = s.preempted = false;
        }
        s.active = false;
        s.last_active_us = ev.at_us;
        events.push({ev.at_us + o.idle_ms * 1000, Kind::kIdleCheck, i});
        serve_waiting(ev.at_us);
        break;
      case Kind::kSlice:
        slice_checks.erase(ev.at_us);
        serve_waiting(ev.at_us);
        break;
      case Kind::kIdleCheck:
        if (s.present && !s.active && s.last_active_us + o.idle_ms * 1000 <= ev.at_us)
          keep_headroom(ev.at_us);
        break;
    }
  }
  return r;
}

}  // namespace tessera::sim::usage
