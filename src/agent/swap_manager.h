// The node side of swapping (src/capgpu/swap.h is the process side): keeps the resident set of
// the shares on one device within its memory when their caps overcommit it.
//
// Each Tick reads every share's region: resident bytes, bytes swapped out, the bytes an
// allocation waits for (room_wanted), processes resuming without room, and activity (the
// library's kernel-launch counter, driver calls waiting at the gate, a change of resident
// bytes). Two rules, least recently active share first (target kOut: its next driver call
// brings it back, and waits for room in turn):
// - under pressure: when the shares that want memory need more than the device has free (or is
//   freeing), shares idle for min(idle_ms, 2 s) or longer are swapped out until the need fits.
//   A share that wants room and finds no idle share to evict waits; the wait is visible in its
//   region (state "resuming", room_wanted) and in Tick's report;
// - ahead of need (`ahead`): while the device has less free than the largest cap among its
//   shares, shares idle for idle_ms or longer are swapped out, so the next share to wake finds
//   room and only copies its own bytes back;
// - slicing (`slice_ms`, off by default): when no idle share can meet the need, active shares
//   that have held the device slice_ms or longer (since their memory came back, or they woke,
//   or their last allocation got room) are swapped out, longest first, at most one round per
//   device per 2 s, and only if together they make the room. They are held at the gate (target
//   kHold) until the shares they made room for have it (or, once out, for max(slice, 2 s)),
//   then released to come back in turn, so a wait lasts about a slice instead of until an active
//   share goes idle.
// `tessera sim swap` models these rules (src/sim/swap_model.h): at PCIe Gen5 ahead-of-need
// halves the median time-to-resume, and slicing cuts the longest waits from minutes to seconds.
//
//   SwapManager m({.device_memory = 80 * GiB, .idle_ms = 30000});
//   m.Add("job-7", launcher.RegionPath("job-7"), NowMs(), job_uid);
//   every second: for (auto& line : m.Tick(NowMs())) log(line);
//
// Thread-safety: not thread-safe; one thread ticks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::agent {

class SwapManager {
 public:
  struct Options {
    uint64_t device_memory = 0;  // bytes of the device the shares sit on
    int64_t idle_ms = 30000;     // idle this long: swapped out ahead of need (pressure: 2 s)
    bool ahead = true;           // keep room for the next wake (false: swap out only on need)
    int64_t slice_ms = 0;        // 0: a share in need waits for an active one to go idle
  };
  struct ShareState {
    std::string id;
    std::string state;  // resident, swapped, resuming, swapping-out, unswappable, mixed
    uint64_t resident_bytes = 0, swapped_bytes = 0, room_wanted = 0;
    int64_t last_active_ms = 0;
    int64_t swap_outs = 0;  // requested by this manager
    int64_t sliced = 0;     // of those, while it was active (slicing)
  };

  explicit SwapManager(Options options);
  ~SwapManager();

  // The share's region must exist and have swapping on, be a regular file with one name and
  // belong to `owner` (the job's account; uid_t(-1): this process's). It is never opened through
  // a symbolic link.
  Status Add(const std::string& id, const std::string& region_path, int64_t now_ms,
             uid_t owner = static_cast<uid_t>(-1));
  void Remove(const std::string& id);

  // An order of the control plane (agent protocol "swap"): "out" holds the share off the device,
  // its driver calls waiting at the gate, until "in" (preemption by swapping); "idle" moves it
  // off until its next driver call; "in" brings it back now. The manager's own rules leave a
  // share ordered out alone. True when the share's target changed; NotFound when `id` is not
  // one of its shares; InvalidArgument for another order.
  Result<bool> Order(const std::string& id, const std::string& order);
  // A heartbeat's orders, all of them: an "idle" order is carried out once while it lasts (its
  // share comes back on its next use and stays); one no longer given may be carried out again.
  void OrdersNow(const std::map<std::string, std::string>& orders);

  // One pass. `host_ram_left`, when given, is what the node's swap RAM budget (--swap-ram) has
  // left for all its devices' shares: each share asked out may put at most that much in pinned
  // host memory (its region's limit is set so; the rest goes to its disk tier), and it is
  // decremented by what each asked-out share may take. Returns one line per action taken
  // ("swap-out job-7: idle 41 s, frees 8.0 GiB for job-9", "swap-out job-3: idle 95 s, ahead of
  // need: keeps 16.0 GiB free for the next wake", "swap-out job-5: active, held the device
  // 12.0 s (slice 10.0 s), frees ...", "release job-5: ..."), and a "waiting" line when a need
  // no share can meet begins or changes (not again at every tick while it lasts).
  std::vector<std::string> Tick(int64_t now_ms, uint64_t* host_ram_left = nullptr);

  // Host RAM the shares hold or are about to (swapped out to RAM, or asked out and still
  // resident), as of the last Tick: what they take from the node's budget.
  uint64_t HostBytes() const;

  std::vector<ShareState> States() const;

 private:
  struct Share;
  Options options_;
  int64_t next_slice_ms_ = 0;  // slicing: no active share asked out before this
  std::string last_waiting_;   // the "waiting" line of the last tick ("" if none)
  std::map<std::string, std::unique_ptr<Share>> shares_;
};

}  // namespace tessera::agent
