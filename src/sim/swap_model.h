// Swapping in the simulator (`tessera sim swap`): interactive sessions with memory caps on cards,
// each active part of the time in bursts, packed with and without swapping, then run on a
// virtual clock to see what resuming an idle session costs.
//
// Packing: sessions by cap, largest first, first fit onto cards whose caps sum to at most
// card_memory (without swapping) or card_memory x overcommit (with). The count of cards used is
// "cards needed".
//
// Dynamics, per card (each card has its own host link): a session alternates idle and active
// periods (exponential, mean burst and burst x (1 - active) / active). The agent's swap manager
// (src/agent/swap_manager.h) is modelled as it decides:
// - ahead of need: a session idle for idle_us or longer is swapped out while the card's free
//   memory is below the largest cap on the card, so that the next session to wake finds room
//   and only has to copy its own bytes back (off with `lazy`: idle sessions stay until room is
//   needed);
// - under pressure: a session that activates while swapped out needs its cap back on the
//   device; if the card lacks room, the least recently active idle sessions are swapped out
//   first (device-to-host at host_mbps), then its bytes come back (host-to-device at host_mbps).
//   With no idle session to evict it waits until an active one goes idle.
// - slicing (`slice_us`, off by default): a session that would wait for an active one to go
//   idle takes the place of the active sessions that have held the device slice_us or longer
//   instead; they pause (their burst resumes where it stopped) and wait in turn, so no wait
//   lasts much past a slice, at the price of more, shorter pauses.
// The link carries one transfer at a time, ahead-of-need swap-outs included. A session's
// time-to-resume runs from its activation to the moment its memory is back. Sessions whose
// swapped bytes pass the node's host RAM budget go to disk (disk_mbps) instead.
//
// Integers throughout: bytes in MiB, time in microseconds, bandwidth in MB/s (= bytes/us).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::sim {

struct SwapEstate {
  int sessions = 50;
  int64_t cap_min_mib = 8 * 1024, cap_max_mib = 16 * 1024;  // each session's cap, uniform
  int64_t card_memory_mib = 80 * 1024;
  int active_percent = 20;             // share of time each session is active
  int64_t burst_us = 120'000'000;      // mean active period
  int64_t overcommit_percent = 200;    // caps may sum to this much of a card with swapping
  int64_t host_mbps = 50'000;          // PCIe Gen5 x16, achievable (64 GB/s theoretical)
  int64_t disk_mbps = 5'000;           // NVMe
  int64_t host_ram_mib = 1024 * 1024;  // per card's share of the node's swap_ram
  int64_t idle_us = 30'000'000;  // the agent's --swap-idle: idle this long, swapped ahead of need
  bool lazy = false;             // no swap-out ahead of need: only when room is needed
  // Slicing (the agent's --swap-slice): 0, a session that finds the card's active sessions
  // filling it waits for one to go idle; else it may take the place of active sessions that have
  // held the device this long, longest first, at most one such swap-out per card per 2 s.
  int64_t slice_us = 0;
  int64_t duration_us = 24LL * 3600 * 1'000'000;
  uint64_t seed = 1;
};

struct SwapEstateReport {
  int cards_without_swap = 0;
  int cards_with_swap = 0;
  int64_t activations = 0;
  int64_t resumes = 0;           // activations that found the session swapped out
  int64_t waits_for_active = 0;  // resumes that had to wait for an active session to go idle
  int64_t swap_outs = 0;
  int64_t swap_outs_ahead = 0;  // of those, ahead of need (keeping room for the next wake)
  int64_t swapped_mib = 0;      // bytes moved off the devices in all
  int64_t resume_p50_us = 0, resume_p99_us = 0, resume_max_us = 0;
  int64_t activation_p99_us = 0;  // over every activation (0 for a resident session)
  // Over the resumes that did not wait for an active session: what the link and the swap
  // manager cost, without the waits for a card whose active sessions fill it.
  int64_t prompt_resume_p99_us = 0;
  int64_t waited_us = 0;    // every wait for memory (wakes and returns), in all
  int64_t preemptions = 0;  // active sessions swapped out for a waiting one (slicing)
  int64_t stalled_us = 0;   // what those preemptions paused active sessions for, in all
  int64_t return_p99_us = 0, return_max_us = 0;  // a preempted session's wait to come back
  int64_t wait_p99_us = 0;    // over every wait for memory: wakes and returns together
  int64_t peak_host_mib = 0;  // swapped-out bytes held at once, on the busiest card
  std::string Text(const SwapEstate& e) const;
};

// The waiting sessions of the dynamics above (RunSwapEstate, and ReplaySwapCard in
// usage_whatif.h), served in turn: each one `resume(i)` brings back leaves `waiting`, the others
// keep their place; sessions a resume pauses to make room (slicing) join the end and are served
// in the same pass.
template <typename Resume>
void ServeInTurn(std::vector<int>& waiting, Resume resume) {
  for (size_t w = 0; w < waiting.size();) {
    if (resume(waiting[w])) {
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(w));
    } else {
      ++w;
    }
  }
}

Status ValidateSwapEstate(const SwapEstate& e);
Result<SwapEstateReport> RunSwapEstate(const SwapEstate& e);

}  // namespace tessera::sim
