#include "sim/swap_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <random>
#include <set>

namespace tessera::sim {
namespace {

struct Session {
  int64_t cap_mib = 0;
  bool active = false;
  bool resident = false;  // on the device (or coming back)
  bool waiting = false;
  bool on_disk = false;    // while swapped out: its bytes went to disk (host RAM budget spent)
  bool preempted = false;  // swapped out mid-burst to make room (slicing); waiting to come back
  int64_t last_active_us = 0;
  int64_t activated_us = 0;       // its wait for memory started here (activation or preemption)
  int64_t resident_since_us = 0;  // its memory came back (or it became active while resident)
  int64_t burst_end_us = 0;       // while active and resident: when its burst ends
  int64_t burst_left_us = 0;      // while preempted: what its burst still has to run
  int gen = 0;                    // bumped when a preemption cancels its scheduled burst end
};

// kIdleCheck: the session has been idle for idle_us (if it has not run since): it may be swapped
// out ahead of need. kSlice: an active session has held the device for slice_us: the sessions
// waiting may take its place.
enum class Kind { kActivate, kDeactivate, kIdleCheck, kSlice };

struct Event {
  int64_t at_us;
  int session;
  Kind kind;
  int gen = 0;  // kDeactivate: stale unless it matches the session's
  bool operator>(const Event& o) const {
    if (at_us != o.at_us) return at_us > o.at_us;
    if (session != o.session) return session > o.session;
    if (kind != o.kind) return kind > o.kind;
    return gen > o.gen;
  }
};

// Slicing: at most one swap-out of active sessions per card per this long (the agent's too).
constexpr int64_t kSliceGapUs = 2'000'000;

// First fit, largest first, under `budget_mib` per card; returns the card of each session.
std::vector<int> Pack(const std::vector<int64_t>& caps, int64_t budget_mib, int* cards) {
  std::vector<int> order(caps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return caps[a] > caps[b]; });
  std::vector<int64_t> used;
  std::vector<int> card_of(caps.size(), -1);
  for (int s : order) {
    size_t c = 0;
    while (c < used.size() && used[c] + caps[s] > budget_mib) ++c;
    if (c == used.size()) used.push_back(0);
    used[c] += caps[s];
    card_of[s] = static_cast<int>(c);
  }
  *cards = static_cast<int>(used.size());
  return card_of;
}

int64_t Percentile(std::vector<int64_t> v, int per_mille) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, v.size() * static_cast<size_t>(per_mille) / 1000)];
}

// Exponential with the given mean, in whole microseconds (at least 1).
int64_t Exponential(std::mt19937_64& rng, int64_t mean_us) {
  std::exponential_distribution<double> d(1.0 / static_cast<double>(mean_us));
  return std::max<int64_t>(1, static_cast<int64_t>(d(rng)));
}

}  // namespace

Status ValidateSwapEstate(const SwapEstate& e) {
  if (e.sessions < 1) return Status::InvalidArgument("sessions: at least 1");
  if (e.cap_min_mib < 1 || e.cap_max_mib < e.cap_min_mib) {
    return Status::InvalidArgument("cap: need 0 < cap-min <= cap-max");
  }
  if (e.card_memory_mib < e.cap_max_mib) {
    return Status::InvalidArgument("card-memory: smaller than the largest cap");
  }
  if (e.active_percent < 1 || e.active_percent > 100) {
    return Status::InvalidArgument("active: a percentage from 1 to 100");
  }
  if (e.overcommit_percent < 100) return Status::InvalidArgument("overcommit: at least 100%");
  if (e.burst_us < 1 || e.duration_us < 1)
    return Status::InvalidArgument("burst and duration: positive");
  if (e.host_mbps < 1 || e.disk_mbps < 1) return Status::InvalidArgument("bandwidths: positive");
  if (e.host_ram_mib < 0) return Status::InvalidArgument("host-ram: not negative");
  if (e.idle_us < 0) return Status::InvalidArgument("idle: not negative");
  if (e.slice_us < 0) return Status::InvalidArgument("slice: not negative");
  return Status::Ok();
}

Result<SwapEstateReport> RunSwapEstate(const SwapEstate& e) {
  if (Status s = ValidateSwapEstate(e); !s.ok()) return s;
  std::mt19937_64 rng(e.seed);
  std::uniform_int_distribution<int64_t> cap_gib(e.cap_min_mib / 1024, e.cap_max_mib / 1024);
  std::vector<int64_t> caps(static_cast<size_t>(e.sessions));
  for (auto& c : caps) {
    c = e.cap_max_mib - e.cap_min_mib >= 1024 ? cap_gib(rng) * 1024 : e.cap_min_mib;
  }
  SwapEstateReport r;
  Pack(caps, e.card_memory_mib, &r.cards_without_swap);
  Pack(caps, e.card_memory_mib * e.overcommit_percent / 100, &r.cards_with_swap);
  // With swapping, the sessions are then spread over the cards needed (largest first, onto the
  // card with the least caps so far), so no card carries more active memory than it must.
  std::vector<int> card_of(caps.size(), 0);
  {
    std::vector<int> order(caps.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return caps[a] > caps[b]; });
    std::vector<int64_t> load(static_cast<size_t>(r.cards_with_swap), 0);
    for (int s : order) {
      const size_t c =
          static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[c] += caps[static_cast<size_t>(s)];
      card_of[static_cast<size_t>(s)] = static_cast<int>(c);
    }
  }

  const int64_t idle_mean_us = e.burst_us * (100 - e.active_percent) / e.active_percent;
  std::vector<int64_t> resumes, activations, prompt, returns;
  for (int card = 0; card < r.cards_with_swap; ++card) {
    std::vector<int> ids;
    for (int s = 0; s < e.sessions; ++s) {
      if (card_of[static_cast<size_t>(s)] == card) ids.push_back(s);
    }
    std::vector<Session> ss(ids.size());
    int64_t resident_mib = 0, host_mib = 0, link_free_us = 0, headroom_mib = 0;
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
    for (size_t i = 0; i < ids.size(); ++i) {
      ss[i].cap_mib = caps[static_cast<size_t>(ids[i])];
      headroom_mib = std::max(headroom_mib, ss[i].cap_mib);
      // Start idle; resident while the card has room, the rest already swapped out.
      if (resident_mib + ss[i].cap_mib <= e.card_memory_mib) {
        ss[i].resident = true;
        resident_mib += ss[i].cap_mib;
      } else if (host_mib + ss[i].cap_mib <= e.host_ram_mib) {
        host_mib += ss[i].cap_mib;
      } else {
        ss[i].on_disk = true;
      }
      events.push({Exponential(rng, idle_mean_us), static_cast<int>(i), Kind::kActivate});
      events.push({e.idle_us, static_cast<int>(i), Kind::kIdleCheck});
    }
    r.peak_host_mib = std::max(r.peak_host_mib, host_mib);
    std::vector<int> waiting;        // sessions waiting for room, in order
    int64_t next_preempt_us = 0;     // slicing: no preemption on this card before this
    std::set<int64_t> slice_checks;  // slicing: times a kSlice event is queued for

    // Session j's bytes leave the device over the link from `t`; returns when they are off.
    auto swap_out = [&](int j, int64_t t) -> int64_t {
      Session& v = ss[static_cast<size_t>(j)];
      const bool to_disk = host_mib + v.cap_mib > e.host_ram_mib;
      t += v.cap_mib * 1'048'576 / (to_disk ? e.disk_mbps : e.host_mbps);
      v.resident = false;
      v.on_disk = to_disk;
      resident_mib -= v.cap_mib;
      if (!to_disk) host_mib += v.cap_mib;
      ++r.swap_outs;
      r.swapped_mib += v.cap_mib;
      r.peak_host_mib = std::max(r.peak_host_mib, host_mib);
      return t;
    };

    // Resident idle sessions, least recently active first; only those idle since `before` or
    // earlier.
    auto idle_sessions = [&](int64_t before) {
      std::vector<int> idle;
      for (size_t j = 0; j < ss.size(); ++j) {
        if (ss[j].resident && !ss[j].active && !ss[j].waiting && ss[j].last_active_us <= before) {
          idle.push_back(static_cast<int>(j));
        }
      }
      std::sort(idle.begin(), idle.end(), [&](int a, int b) {
        return ss[static_cast<size_t>(a)].last_active_us <
               ss[static_cast<size_t>(b)].last_active_us;
      });
      return idle;
    };

    // Ahead of need: sessions idle for idle_us go while the card has less free than its largest
    // cap, so the next wake finds room.
    auto keep_headroom = [&](int64_t now) {
      if (e.lazy) return;
      if (e.card_memory_mib - resident_mib >= headroom_mib) return;
      for (int j : idle_sessions(now - e.idle_us)) {
        if (e.card_memory_mib - resident_mib >= headroom_mib) break;
        link_free_us = swap_out(j, std::max(now, link_free_us));
        ++r.swap_outs_ahead;
      }
    };

    // Active resident sessions that have held the device for slice_us or longer, longest first:
    // what a waiting session may take the place of when slicing is on.
    auto sliced_sessions = [&](int64_t now) {
      std::vector<int> held;
      if (e.slice_us == 0 || now < next_preempt_us) return held;
      for (size_t j = 0; j < ss.size(); ++j) {
        if (ss[j].resident && ss[j].active && now - ss[j].resident_since_us >= e.slice_us) {
          held.push_back(static_cast<int>(j));
        }
      }
      std::sort(held.begin(), held.end(), [&](int a, int b) {
        return ss[static_cast<size_t>(a)].resident_since_us <
               ss[static_cast<size_t>(b)].resident_since_us;
      });
      return held;
    };

    // Brings session i back at or after `now`; false when it has to wait: no idle session (nor,
    // with slicing, active one past its slice) can make room.
    auto resume = [&](int i, int64_t now) -> bool {
      Session& s = ss[static_cast<size_t>(i)];
      int64_t free = e.card_memory_mib - resident_mib;
      std::vector<int> victims, preempt;
      if (free < s.cap_mib) {
        for (int j : idle_sessions(now)) {
          if (free >= s.cap_mib) break;
          victims.push_back(j);
          free += ss[static_cast<size_t>(j)].cap_mib;
        }
        if (free < s.cap_mib) {
          for (int j : sliced_sessions(now)) {
            if (free >= s.cap_mib) break;
            preempt.push_back(j);
            free += ss[static_cast<size_t>(j)].cap_mib;
          }
        }
        if (free < s.cap_mib) return false;
      }
      int64_t t = std::max(now, link_free_us);
      for (int j : victims) t = swap_out(j, t);
      for (int j : preempt) {
        // Its burst pauses from now (new driver calls wait at the gate) until it is back.
        Session& v = ss[static_cast<size_t>(j)];
        v.burst_left_us = std::max<int64_t>(1, v.burst_end_us - now);
        ++v.gen;
        v.preempted = true;
        v.waiting = true;
        v.activated_us = now;
        t = swap_out(j, t);
        ++r.preemptions;
        waiting.push_back(j);
      }
      if (!preempt.empty()) next_preempt_us = now + kSliceGapUs;
      t += s.cap_mib * 1'048'576 / (s.on_disk ? e.disk_mbps : e.host_mbps);
      if (!s.on_disk) host_mib -= s.cap_mib;
      s.on_disk = false;
      link_free_us = t;
      s.resident = true;
      s.active = true;
      s.resident_since_us = t;
      resident_mib += s.cap_mib;
      const int64_t waited = t - s.activated_us;
      r.waited_us += waited;
      if (s.preempted) {
        returns.push_back(waited);
        r.stalled_us += waited;
      } else {
        resumes.push_back(waited);
        if (!s.waiting) prompt.push_back(waited);
        activations.push_back(waited);
      }
      const int64_t burst = s.preempted ? s.burst_left_us : Exponential(rng, e.burst_us);
      s.preempted = false;
      s.waiting = false;
      s.burst_end_us = t + burst;
      events.push({s.burst_end_us, i, Kind::kDeactivate, s.gen});
      keep_headroom(now);
      return true;
    };

    // Serves the waiting sessions in order, as far as room allows; with slicing, asks to be
    // called again when the next active session reaches its slice.
    auto serve_waiting = [&](int64_t now) {
      ServeInTurn(waiting, [&](int session) { return resume(session, now); });
      if (e.slice_us == 0 || waiting.empty()) return;
      // The next moment an active session becomes one to take the place of (one that already is
      // did not make enough room: then only a session going idle or reaching its slice helps).
      int64_t next = INT64_MAX;
      for (const Session& v : ss) {
        if (!v.resident || !v.active) continue;
        const int64_t at = std::max(v.resident_since_us + e.slice_us, next_preempt_us);
        if (at > now) next = std::min(next, at);
      }
      if (next != INT64_MAX && slice_checks.insert(next).second)
        events.push({next, 0, Kind::kSlice, 0});
    };

    while (!events.empty()) {
      const Event ev = events.top();
      events.pop();
      if (ev.at_us > e.duration_us) break;
      Session& s = ss[static_cast<size_t>(ev.session)];
      if (ev.kind == Kind::kSlice) {
        slice_checks.erase(ev.at_us);
        serve_waiting(ev.at_us);
      } else if (ev.kind == Kind::kIdleCheck) {
        if (!s.active && !s.waiting && s.last_active_us + e.idle_us <= ev.at_us)
          keep_headroom(ev.at_us);
      } else if (ev.kind == Kind::kActivate) {
        ++r.activations;
        s.activated_us = ev.at_us;
        if (s.resident) {
          s.active = true;
          s.resident_since_us = ev.at_us;
          activations.push_back(0);
          s.burst_end_us = ev.at_us + Exponential(rng, e.burst_us);
          events.push({s.burst_end_us, ev.session, Kind::kDeactivate, s.gen});
        } else {
          // In turn: behind the sessions already waiting, if any.
          waiting.push_back(ev.session);
          serve_waiting(ev.at_us);
          if (std::find(waiting.begin(), waiting.end(), ev.session) != waiting.end()) {
            s.waiting = true;
            ++r.waits_for_active;
          }
        }
      } else {
        if (ev.gen != s.gen || !s.active || !s.resident) continue;  // preempted: burst paused
        s.active = false;
        s.last_active_us = ev.at_us;
        events.push({ev.at_us + Exponential(rng, idle_mean_us), ev.session, Kind::kActivate});
        events.push({ev.at_us + e.idle_us, ev.session, Kind::kIdleCheck});
        serve_waiting(ev.at_us);  // someone waiting may fit now
      }
    }
  }
  r.resumes = static_cast<int64_t>(resumes.size());
  r.resume_p50_us = Percentile(resumes, 500);
  r.resume_p99_us = Percentile(resumes, 990);
  r.prompt_resume_p99_us = Percentile(prompt, 990);
  r.resume_max_us = resumes.empty() ? 0 : *std::max_element(resumes.begin(), resumes.end());
  r.return_p99_us = Percentile(returns, 990);
  r.return_max_us = returns.empty() ? 0 : *std::max_element(returns.begin(), returns.end());
  {
    std::vector<int64_t> all = resumes;
    all.insert(all.end(), returns.begin(), returns.end());
    r.wait_p99_us = Percentile(all, 990);
  }
  r.activation_p99_us = Percentile(activations, 990);
  return r;
}

std::string SwapEstateReport::Text(const SwapEstate& e) const {
  const std::string ahead = e.lazy
                                ? std::string("idle sessions swapped out only when room is needed")
                                : "sessions idle " + std::to_string(e.idle_us / 1'000'000) +
                                      " s swapped out ahead of need";
  char buf[2048];
  std::snprintf(
      buf, sizeof(buf),
      "estate: %d interactive sessions, caps %lld-%lld GiB, active %d%% in bursts of %lld s "
      "(mean), "
      "cards of %lld GiB\n"
      "swapping: overcommit %lld%%, host link %lld MB/s, disk %lld MB/s, %s, %lld h simulated, "
      "seed %llu\n"
      "cards needed: %d without swapping, %d with\n"
      "activations %lld; resumes from swap %lld (waited for room that active sessions held: %lld); "
      "swap-outs %lld, "
      "%lld of them ahead of need (%lld GiB moved)\n"
      "time-to-resume: p50 %.3f s  p99 %.3f s  max %.3f s;  p99 over every activation %.3f s\n"
      "time-to-resume of the wakes that found room or idle sessions to evict: p99 %.3f s\n"
      "waits for memory: %.0f s in all\n"
      "slicing: %lld active sessions swapped out for a waiting one, paused %.1f s in all; their "
      "wait to "
      "come back p99 %.3f s max %.3f s; p99 over every wait for memory %.3f s\n"
      "peak swapped-out bytes on one card's host: %lld GiB\n",
      e.sessions, static_cast<long long>(e.cap_min_mib / 1024),
      static_cast<long long>(e.cap_max_mib / 1024), e.active_percent,
      static_cast<long long>(e.burst_us / 1'000'000),
      static_cast<long long>(e.card_memory_mib / 1024),
      static_cast<long long>(e.overcommit_percent), static_cast<long long>(e.host_mbps),
      static_cast<long long>(e.disk_mbps), ahead.c_str(),
      static_cast<long long>(e.duration_us / 3'600'000'000LL),
      static_cast<unsigned long long>(e.seed), cards_without_swap, cards_with_swap,
      static_cast<long long>(activations), static_cast<long long>(resumes),
      static_cast<long long>(waits_for_active), static_cast<long long>(swap_outs),
      static_cast<long long>(swap_outs_ahead), static_cast<long long>(swapped_mib / 1024),
      static_cast<double>(resume_p50_us) / 1e6, static_cast<double>(resume_p99_us) / 1e6,
      static_cast<double>(resume_max_us) / 1e6, static_cast<double>(activation_p99_us) / 1e6,
      static_cast<double>(prompt_resume_p99_us) / 1e6, static_cast<double>(waited_us) / 1e6,
      static_cast<long long>(preemptions), static_cast<double>(stalled_us) / 1e6,
      static_cast<double>(return_p99_us) / 1e6, static_cast<double>(return_max_us) / 1e6,
      static_cast<double>(wait_p99_us) / 1e6, static_cast<long long>(peak_host_mib / 1024));
  return buf;
}

}  // namespace tessera::sim
