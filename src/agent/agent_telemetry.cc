// The node agent's device telemetry (CPU time, kernel launches, NVML) and its swapping shares.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "agent/agent_internal.h"

namespace tessera::agent::internal {

void Agent::WatchSwap(const JobSpec& spec) {
  const int index = spec.devices[0].index;
  if (index < 0 || index >= static_cast<int>(inventory_.devices.size())) return;
  auto& manager = swap_[index];
  if (manager == nullptr) {
    const uint64_t bytes = static_cast<uint64_t>(inventory_.devices[index].memory_mib) << 20;
    manager =
        std::make_unique<SwapManager>(SwapManager::Options{.device_memory = bytes,
                                                           .idle_ms = options_.swap_idle_ms,
                                                           .slice_ms = options_.swap_slice_ms});
  }
  std::string region;
  uid_t owner = 0;
  if (!launcher_.ShareRegion(spec.id, &region, &owner)) return;
  Status s = manager->Add(spec.id, region, NowMs(), owner);
  if (!s.ok()) Warn("job " + spec.id + ": " + s.message(), {{"job", spec.id}});
}

void Agent::ApplySwapOrder(const std::string& job, const std::string& order) {
  for (auto& [device, manager] : swap_) {
    Result<bool> changed = manager->Order(job, order);
    if (!changed.ok()) continue;  // not on this device
    if (*changed)
      Info("job " + job + ": swap " + order + " (ordered by the control plane)", {{"job", job}});
    return;
  }
  Warn("job " + job + ": swap " + order + " ordered, but it is no swapping share here",
       {{"job", job}});
}

void Agent::TickSwap() {
  if (swap_.empty()) return;
  const int64_t now = NowMs();
  if (now - last_swap_tick_ms_ < 100) return;
  last_swap_tick_ms_ = now;
  // The node's swap RAM budget, the same the agent reports: shared by every device's shares.
  const uint64_t budget = options_.swap_ram_bytes > 0
                              ? static_cast<uint64_t>(options_.swap_ram_bytes)
                              : static_cast<uint64_t>(inventory_.host.memory_mib / 2) << 20;
  uint64_t held = 0;
  for (auto& [device, manager] : swap_) held += manager->HostBytes();
  uint64_t left = budget > held ? budget - held : 0;
  for (auto& [device, manager] : swap_) {
    for (const std::string& line : manager->Tick(now, &left)) {
      Info("device " + std::to_string(device) + ": " + line);
    }
  }
}

std::vector<DeviceTelemetry> Agent::Telemetry(std::vector<RunningJob>& running) {
  const auto now = Clock::now();
  const int64_t elapsed_ms =
      last_telemetry_ == Clock::time_point{}
          ? 0
          : std::chrono::duration_cast<milliseconds>(now - last_telemetry_).count();
  last_telemetry_ = now;
  static const long kTicksPerSecond = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
  std::map<int, int64_t> util_milli, memory_mib;  // by device
  std::map<std::string, uint64_t> seen;
  std::map<std::string, int64_t> launches;
  for (RunningJob& r : running) {
    auto prev = cpu_ticks_.find(r.id);
    const uint64_t delta =
        prev == cpu_ticks_.end() || r.cpu_ticks < prev->second ? 0 : r.cpu_ticks - prev->second;
    r.active = prev == cpu_ticks_.end() || delta > 0 ? 1 : 0;  // its first report: just started
    seen[r.id] = r.cpu_ticks;
    // A share whose processes launched kernels since the last heartbeat (its region counts them).
    if (r.gpu_launches >= 0) {
      auto pl = launches_.find(r.id);
      if (pl != launches_.end() && r.gpu_launches > pl->second) r.active = 1;
      launches[r.id] = r.gpu_launches;
    }
    for (int d : r.devices) {
      if (elapsed_ms > 0)
        util_milli[d] += static_cast<int64_t>(delta) * 1000 * 1000 / (kTicksPerSecond * elapsed_ms);
      if (r.gpu_memory_used_bytes >= 0) memory_mib[d] += MiBRoundedUp(r.gpu_memory_used_bytes);
    }
  }
  cpu_ticks_ = std::move(seen);
  launches_ = std::move(launches);
  std::vector<DeviceTelemetry> out;
  if (nvml_) {
    // Real devices: NVML's utilization and memory; a job with compute processes on a busy
    // device is active, and its processes' device memory is what it uses.
    std::map<int, NvmlSample> by_index;
    for (NvmlSample& d : nvml_->Sample()) by_index[d.index] = std::move(d);
    for (RunningJob& r : running) {
      int64_t used = 0;
      bool seen_on_device = false, busy = false;
      for (int d : r.devices) {
        auto it = by_index.find(d);
        if (it == by_index.end()) continue;
        for (const auto& [pid, bytes] : it->second.processes) {
          if (SessionOf(pid) != r.pid) continue;
          seen_on_device = true;
          used += bytes;
          busy = busy || it->second.util_pct > 0;
        }
      }
      if (seen_on_device && r.gpu_memory_used_bytes < 0) r.gpu_memory_used_bytes = used;
      if (busy) r.active = 1;
    }
    for (const auto& [index, d] : by_index) {
      out.push_back({index, d.util_pct,
                     d.memory_used_bytes < 0 ? -1 : (d.memory_used_bytes + (1 << 20) - 1) >> 20, "",
                     ""});
    }
    return out;
  }
  if (!inventory_.simulated || elapsed_ms == 0) return out;
  for (const DiscoveredDevice& d : inventory_.devices) {
    const int64_t u = util_milli.count(d.index) ? util_milli[d.index] : 0;
    // No more than the device has, whatever its shares' regions claim.
    out.push_back({d.index, static_cast<int>(std::min<int64_t>(100, u / 10)),
                   std::min<int64_t>(memory_mib.count(d.index) ? memory_mib[d.index] : 0,
                                     std::max<int64_t>(0, d.memory_mib)),
                   "", ""});
  }
  return out;
}

void Agent::CheckHealth(std::vector<DeviceTelemetry>* devices) {
  if (health_ == nullptr) return;
  std::vector<std::string> lines;
  for (const DeviceHealth& h : health_->Check(0, &lines)) {
    if (h.index < 0 || h.index >= static_cast<int>(inventory_.devices.size())) continue;
    DiscoveredDevice& d = inventory_.devices[h.index];
    if (d.healthy && !h.healthy) {
      Warn("device " + std::to_string(h.index) + " (" + d.uuid + ") is unhealthy: " + h.reason +
               "; it takes no new work",
           {{"device", std::to_string(h.index)}, {"reason", h.reason}});
    }
    d.healthy = h.healthy;
    d.health_reason = h.reason;
    if (devices == nullptr) continue;
    auto it = std::find_if(devices->begin(), devices->end(),
                           [&](const DeviceTelemetry& t) { return t.index == h.index; });
    if (it == devices->end())
      it = devices->insert(devices->end(), DeviceTelemetry{h.index, -1, -1, "", ""});
    it->health = h.healthy ? "ok" : "unhealthy";
    it->health_reason = h.reason;
  }
  for (const std::string& line : lines) Info(line);
}

pid_t Agent::SessionOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line) || line.rfind(')') == std::string::npos) return 0;
  std::istringstream rest(line.substr(line.rfind(')') + 1));
  std::string state;
  long long ppid = 0, pgrp = 0, session = 0;
  rest >> state >> ppid >> pgrp >> session;
  return rest ? static_cast<pid_t>(session) : 0;
}

}  // namespace tessera::agent::internal
