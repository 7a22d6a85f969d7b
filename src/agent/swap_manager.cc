#include "agent/swap_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "agent/host_files.h"
#include "capgpu/region.h"

namespace tessera::agent {

// The region belongs to the job's account: the manager never maps it nor takes its lock, it
// reads a copy and writes single fields (capgpu/region.h, "An observer outside the workload").
struct SwapManager::Share {
  std::string id;
  std::string path;
  int fd = -1;  // the region file as the agent made it (opened once: the path may change)
  std::unique_ptr<capgpu::RegionFile> copy = std::make_unique<capgpu::RegionFile>();
  ~Share() {
    if (fd >= 0) close(fd);
  }
  bool Read() { return capgpu::ReadRegionCopy(fd, copy.get()) == 0; }
  const capgpu::RegionData& data() const { return copy->data; }
  uint64_t launches = 0, gate_waits = 0, resident = 0, cap = 0;
  int64_t last_active_ms = 0;
  int64_t resident_since_ms = 0;  // since its swapped bytes last came back (or it was added)
  bool was_out = false;           // asked out, or not all resident, as of the last tick
  uint64_t room_wanted = 0;       // as of the last tick
  int64_t held_since_ms = -1;     // slicing: asked out while active and held out since then
  int64_t swap_outs = 0, sliced = 0;
  capgpu::SwapSummary summary;
  uint32_t target = 0;
  bool ordered_idle = false;  // the control plane ordered it out while idle (once per order)
};

namespace {

// Under pressure a share this long without activity may make room for another.
constexpr int64_t kPressureIdleMs = 2000;
// Slicing: at most one round of active shares asked out per device per this long.
constexpr int64_t kSliceGapMs = 2000;

// "8.0 GiB", or "512.0 MiB" below a GiB.
std::string Gib(uint64_t bytes) {
  char buf[32];
  if (bytes < (1ULL << 30)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1ULL << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1ULL << 30));
  }
  return buf;
}

// "2.5 s".
std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms) / 1000);
  return buf;
}

}  // namespace

SwapManager::SwapManager(Options options) : options_(options) {}
SwapManager::~SwapManager() = default;

Status SwapManager::Add(const std::string& id, const std::string& region_path, int64_t now_ms,
                        uid_t owner) {
  auto share = std::make_unique<Share>();
  share->id = id;
  share->path = region_path;
  // The region as the agent made it: no symbolic link, no second name, the job's account's.
  Result<int> fd =
      internal::OpenRegionFile(region_path, owner == static_cast<uid_t>(-1) ? geteuid() : owner);
  if (!fd.ok())
    return Status::NotFound("swap: cannot open the region of " + id + ": " + fd.status().message());
  share->fd = *fd;
  if (!share->Read()) {
    return Status::NotFound("swap: cannot read the region of " + id + " (" + region_path + ")");
  }
  if (share->data().swap_enabled == 0) {
    return Status::FailedPrecondition("swap: the region of " + id + " does not have swapping on");
  }
  share->last_active_ms = now_ms;
  share->resident_since_ms = now_ms;
  shares_[id] = std::move(share);
  return Status::Ok();
}

void SwapManager::Remove(const std::string& id) { shares_.erase(id); }

Result<bool> SwapManager::Order(const std::string& id, const std::string& order) {
  auto it = shares_.find(id);
  if (it == shares_.end()) return Status::NotFound("swap: no share " + id);
  capgpu::SwapTarget target;
  if (order == "out") {
    target = capgpu::SwapTarget::kHold;
  } else if (order == "idle") {
    target = capgpu::SwapTarget::kOut;
  } else if (order == "in") {
    target = capgpu::SwapTarget::kResident;
  } else {
    return Status::InvalidArgument("swap: order '" + order + "' is not out, in or idle");
  }
  Share& s = *it->second;
  if (!s.Read()) return false;  // the next heartbeat orders it again
  const uint32_t now = s.data().swap_target;
  // "idle" once out (or back by itself since): nothing to do until the next order.
  if (now == static_cast<uint32_t>(target) ||
      (order == "idle" && now != static_cast<uint32_t>(capgpu::SwapTarget::kResident))) {
    return false;
  }
  if (order == "idle" && s.ordered_idle) return false;  // once per order: it comes back on use
  if (capgpu::WriteSwapTarget(s.fd, target) != 0) return false;
  s.held_since_ms = -1;  // not a slice: held until ordered in
  s.ordered_idle = order == "idle";
  if (target != capgpu::SwapTarget::kResident) {
    ++s.swap_outs;
    s.was_out = true;
  }
  s.target = static_cast<uint32_t>(target);
  return true;
}

void SwapManager::OrdersNow(const std::map<std::string, std::string>& orders) {
  for (auto& [id, s] : shares_) {
    auto o = orders.find(id);
    if (o == orders.end() || o->second != "idle") s->ordered_idle = false;
  }
}

uint64_t SwapManager::HostBytes() const {
  uint64_t bytes = 0;
  for (const auto& [id, s] : shares_) {
    bytes += s->summary.host_bytes;
    if (s->target != static_cast<uint32_t>(capgpu::SwapTarget::kResident))
      bytes += s->summary.resident_bytes;
  }
  return bytes;
}

std::vector<std::string> SwapManager::Tick(int64_t now_ms, uint64_t* host_ram_left) {
  std::vector<std::string> actions;
  uint64_t resident_total = 0;
  // Read every share, and note activity. A region cut short (or no longer a region) is
  // dropped: it can no longer swap anyway.
  for (auto it = shares_.begin(); it != shares_.end();) {
    if (it->second->Read()) {
      ++it;
      continue;
    }
    actions.push_back("dropped " + it->first + ": its region file is gone or cut short");
    it = shares_.erase(it);
  }
  for (auto& [id, s] : shares_) {
    // The copy is the manager's own: dead processes' slots are left out of it, not reclaimed in
    // the file (the processes do that under their lock).
    capgpu::ReapDead(s->copy->data, capgpu::ProcessIsAlive, nullptr);
    const uint64_t launches = s->data().launches;
    s->summary = capgpu::SummarizeSwap(s->data());
    s->target = s->data().swap_target;
    s->cap = capgpu::LimitFor(s->data(), 0);
    const bool wants = s->summary.room_wanted > 0 || s->summary.swapping_in > 0;
    if (launches != s->launches || s->summary.gate_waits != s->gate_waits ||
        s->summary.resident_bytes != s->resident || wants) {
      // Its slice starts again when it runs after being idle, as when its memory comes back.
      if (now_ms - s->last_active_ms >= std::min(options_.idle_ms, kPressureIdleMs))
        s->resident_since_ms = now_ms;
      s->last_active_ms = now_ms;
    }
    const bool out = s->summary.host_bytes + s->summary.disk_bytes > 0 || s->summary.swapped > 0 ||
                     s->summary.swapping_in > 0 || s->summary.swapping_out > 0;
    if (s->was_out && !out) s->resident_since_ms = now_ms;  // back (or not out after all)
    if (s->room_wanted > 0 && s->summary.room_wanted == 0)
      s->resident_since_ms = now_ms;  // it got its room
    s->was_out = out;
    s->room_wanted = s->summary.room_wanted;
    s->launches = launches;
    s->gate_waits = s->summary.gate_waits;
    s->resident = s->summary.resident_bytes;
    resident_total += s->summary.resident_bytes;
  }
  // What the shares waiting for memory need: new allocations, and swapped bytes coming back.
  // What is being freed: shares asked out that still hold memory.
  uint64_t need = 0, leaving = 0, headroom = 0;
  std::string needy;
  for (auto& [id, s] : shares_) {
    uint64_t n = s->summary.room_wanted;
    if (s->summary.swapping_in > 0) n += s->summary.host_bytes + s->summary.disk_bytes;
    if (n > 0) {
      need += n;
      needy += (needy.empty() ? "" : ", ") + id;
    }
    if (s->target != static_cast<uint32_t>(capgpu::SwapTarget::kResident) &&
        s->summary.unswappable == 0) {
      leaving += s->summary.resident_bytes;
    }
    if (s->cap != capgpu::kNoLimit)
      headroom = std::max(headroom, std::min(s->cap, options_.device_memory));
  }
  // A share sliced out is held at the gate until the shares it made room for have it (or, once
  // its bytes are off the device, for max(slice, 2 s) at most), so that its own next driver call
  // does not take the room back first; then it waits in turn like any share that wants its
  // bytes back.
  for (auto& [id, s] : shares_) {
    if (s->held_since_ms < 0) continue;
    if (s->target != static_cast<uint32_t>(capgpu::SwapTarget::kHold)) {
      s->held_since_ms = -1;  // someone else changed its target
      continue;
    }
    uint64_t own = s->summary.room_wanted;
    if (s->summary.swapping_in > 0) own += s->summary.host_bytes + s->summary.disk_bytes;
    const bool others_served = need <= own;
    if (s->summary.resident_bytes > 0 || s->summary.swapping_out > 0)
      s->held_since_ms = now_ms;  // still leaving
    if (!others_served && now_ms - s->held_since_ms < std::max(options_.slice_ms, kSliceGapMs))
      continue;
    if (capgpu::WriteSwapTarget(s->fd, capgpu::SwapTarget::kOut) != 0) continue;  // next tick
    actions.push_back(
        "release " + s->id + ": " +
        (others_served ? std::string("the room it left is taken") : "held out a slice") +
        "; it comes back when it next runs and there is room");
    s->held_since_ms = -1;
  }
  const uint64_t free =
      options_.device_memory > resident_total ? options_.device_memory - resident_total : 0;
  const bool pressure = need > free + leaving;
  if (!pressure && (!options_.ahead || free + leaving >= headroom)) {
    last_waiting_.clear();
    return actions;
  }
  // The least recently active shares idle for `idle_for` or longer, not already leaving.
  const int64_t idle_for =
      pressure ? std::min(options_.idle_ms, kPressureIdleMs) : options_.idle_ms;
  std::vector<Share*> idle;
  for (auto& [id, s] : shares_) {
    const bool in_need = s->summary.room_wanted > 0 || s->summary.swapping_in > 0;
    if (in_need || s->summary.resident_bytes == 0 || s->summary.unswappable > 0 ||
        s->target != static_cast<uint32_t>(capgpu::SwapTarget::kResident) ||
        now_ms - s->last_active_ms < idle_for) {
      continue;
    }
    idle.push_back(s.get());
  }
  std::sort(idle.begin(), idle.end(),
            [](const Share* a, const Share* b) { return a->last_active_ms < b->last_active_ms; });
  const uint64_t goal = pressure ? need : headroom;
  uint64_t freeing = leaving;
  // Asks share s out; its pinned copies may take what the node's budget has left, the rest goes
  // to disk.
  auto ask_out = [&](Share* s, capgpu::SwapTarget target) {
    if (host_ram_left != nullptr) {
      if (capgpu::WriteSwapRamLimit(s->fd, s->data().host_used + *host_ram_left) != 0) return false;
      *host_ram_left -= std::min(*host_ram_left, s->summary.resident_bytes);
    }
    if (capgpu::WriteSwapTarget(s->fd, target) != 0) return false;
    ++s->swap_outs;
    s->was_out = true;  // its return is seen even if it comes back before the next tick
    freeing += s->summary.resident_bytes;
    return true;
  };
  for (Share* s : idle) {
    if (free + freeing >= goal) break;
    if (!ask_out(s, capgpu::SwapTarget::kOut)) continue;
    const std::string idle_s = std::to_string((now_ms - s->last_active_ms) / 1000);
    actions.push_back(pressure
                          ? "swap-out " + s->id + ": idle " + idle_s + " s, frees " +
                                Gib(s->summary.resident_bytes) + " for " + needy
                          : "swap-out " + s->id + ": idle " + idle_s + " s, ahead of need: keeps " +
                                Gib(headroom) + " free for the next wake");
  }
  // Slicing: active shares that have held the device a slice or longer, longest first.
  const bool slicing = pressure && options_.slice_ms > 0;
  std::string slice_note = " and none active past its slice";
  if (slicing && free + freeing < need) {
    std::vector<Share*> held;
    for (auto& [id, s] : shares_) {
      const bool in_need = s->summary.room_wanted > 0 || s->summary.swapping_in > 0;
      if (in_need || s->summary.resident_bytes == 0 || s->summary.unswappable > 0 ||
          s->target != static_cast<uint32_t>(capgpu::SwapTarget::kResident) ||
          now_ms - s->resident_since_ms < options_.slice_ms ||
          std::find(idle.begin(), idle.end(), s.get()) != idle.end()) {
        continue;
      }
      held.push_back(s.get());
    }
    std::sort(held.begin(), held.end(), [](const Share* a, const Share* b) {
      return a->resident_since_ms < b->resident_since_ms;
    });
    // All or nothing: pausing shares that cannot make the room would only cost them.
    uint64_t could = 0;
    for (const Share* s : held) could += s->summary.resident_bytes;
    if (!held.empty() && free + freeing + could < need) {
      slice_note = " and those active past their slice would not make enough room";
      held.clear();
    } else if (!held.empty() && now_ms < next_slice_ms_) {
      slice_note = "; the next slice is due within 2 s";
      held.clear();
    }
    for (Share* s : held) {
      if (free + freeing >= need) break;
      if (!ask_out(s, capgpu::SwapTarget::kHold)) continue;
      ++s->sliced;
      s->held_since_ms = now_ms;
      next_slice_ms_ = now_ms + kSliceGapMs;
      actions.push_back("swap-out " + s->id + ": active, held the device " +
                        Seconds(now_ms - s->resident_since_ms) + " (slice " +
                        Seconds(options_.slice_ms) + "), frees " + Gib(s->summary.resident_bytes) +
                        " for " + needy);
    }
  }
  std::string waiting;
  if (pressure && free + freeing < need) {
    waiting = "waiting: " + needy + " need " + Gib(need) + ", " + Gib(free + freeing) +
              " free or being freed, no idle share to swap out" + (slicing ? slice_note : "");
  }
  // Said once, not at every tick while it lasts.
  if (!waiting.empty() && waiting != last_waiting_) actions.push_back(waiting);
  last_waiting_ = waiting;
  return actions;
}

std::vector<SwapManager::ShareState> SwapManager::States() const {
  std::vector<ShareState> out;
  for (const auto& [id, s] : shares_) {
    ShareState st;
    st.id = id;
    const capgpu::SwapSummary& m = s->summary;
    st.state = capgpu::ShareSwapState(m);
    st.resident_bytes = m.resident_bytes;
    st.swapped_bytes = m.host_bytes + m.disk_bytes;
    st.room_wanted = m.room_wanted;
    st.last_active_ms = s->last_active_ms;
    st.swap_outs = s->swap_outs;
    st.sliced = s->sliced;
    out.push_back(st);
  }
  return out;
}

}  // namespace tessera::agent
