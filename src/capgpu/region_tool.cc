// tessera-capgpu-region: the node agent's tool for an allocation's cap region.
//
//   tessera-capgpu-region create PATH --limit 8GiB[,4GiB...] [--mode 0600] [--replace]
//                         [--swap [--swap-ram 16GiB] [--swap-dir DIR]]
//   tessera-capgpu-region show PATH
//   tessera-capgpu-region reap PATH
//   tessera-capgpu-region swap-out PATH [--hold] [--wait MS]
//   tessera-capgpu-region swap-in PATH [--wait MS]
//
// `--swap` lets the share's device memory be swapped (swap.h): to host RAM up to --swap-ram
// (default unlimited), then to unlinked files under --swap-dir (default none). `swap-out` asks
// every process of the share to move its device memory off the device (with --hold, driver calls
// wait until `swap-in`; without, the next driver call brings the share back); `swap-in` asks it
// back (a prefetch). With --wait both wait up to MS milliseconds for every process to settle and
// print what moved; exit status 3 when they did not settle in time.
//
// `create` must run before the workload starts (its processes then join the region and share its
// limit); `show` prints limits, usage and the processes holding charges; `reap` reclaims the
// charges of dead processes at once (they are otherwise reclaimed when found). Exit status 0 on
// success, 1 on a usage error, 2 when the region cannot be created or opened.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capgpu/accounting.h"
#include "capgpu/limits.h"
#include "capgpu/region.h"

namespace capgpu = tessera::capgpu;

namespace {

int Usage() {
  fprintf(stderr,
          "usage: tessera-capgpu-region create PATH --limit 8GiB[,8GiB...] [--mode 0600] "
          "[--replace]\n"
          "       tessera-capgpu-region show PATH\n"
          "       tessera-capgpu-region reap PATH\n"
          "       tessera-capgpu-region swap-out PATH [--hold] [--wait MS]\n"
          "       tessera-capgpu-region swap-in PATH [--wait MS]\n");
  return 1;
}

void PrintBytes(uint64_t bytes) {
  if (bytes == capgpu::kNoLimit) {
    printf("unlimited");
  } else {
    printf("%llu (%.2f GiB)", static_cast<unsigned long long>(bytes),
           static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  }
}

int Create(const char* path, int argc, char** argv) {
  const char* limit = nullptr;
  mode_t mode = 0600;
  bool replace = false;
  bool swap = false;
  uint64_t swap_ram = capgpu::kNoLimit;
  const char* swap_dir = "";
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
      limit = argv[++i];
    } else if (strcmp(argv[i], "--swap") == 0) {
      swap = true;
    } else if (strcmp(argv[i], "--swap-ram") == 0 && i + 1 < argc) {
      capgpu::LimitList ram;
      if (!capgpu::ParseLimitList(argv[++i], capgpu::UnitStyle::kTessera, &ram) || ram.count != 1) {
        fprintf(stderr, "create: --swap-ram needs one size such as 16GiB\n");
        return 1;
      }
      swap_ram = ram.bytes[0];
    } else if (strcmp(argv[i], "--swap-dir") == 0 && i + 1 < argc) {
      swap_dir = argv[++i];
      if (strlen(swap_dir) >= sizeof(capgpu::RegionData{}.swap_dir)) {
        fprintf(stderr, "create: --swap-dir is longer than 255 bytes\n");
        return 1;
      }
    } else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
      mode = static_cast<mode_t>(strtoul(argv[++i], nullptr, 8));
    } else if (strcmp(argv[i], "--replace") == 0) {
      replace = true;
    } else {
      return Usage();
    }
  }
  capgpu::LimitList limits;
  if (limit == nullptr || !capgpu::ParseLimitList(limit, capgpu::UnitStyle::kTessera, &limits)) {
    fprintf(stderr, "create: --limit needs sizes such as 8GiB or 8GiB,4GiB\n");
    return 1;
  }
  if (!swap && (swap_ram != capgpu::kNoLimit || swap_dir[0] != '\0')) {
    fprintf(stderr, "create: --swap-ram and --swap-dir need --swap\n");
    return 1;
  }
  int rc = capgpu::CreateRegionFile(path, limits, mode, replace);
  if (rc != 0) {
    fprintf(stderr, "create %s: %s\n", path, strerror(rc));
    return 2;
  }
  if (swap) {
    // Before any workload process exists: they read swap_enabled when they join.
    capgpu::Region region;
    rc = region.Open(path);
    if (rc == 0) {
      capgpu::RegionLock lock(region);
      if (!lock.held() || !capgpu::ConfigureSwap(region.data(), swap_ram, swap_dir)) rc = EINVAL;
    }
    if (rc != 0) {
      fprintf(stderr, "create %s: cannot turn swapping on: %s\n", path, strerror(rc));
      return 2;
    }
  }
  return 0;
}

void PrintSwap(const capgpu::SwapSummary& s) {
  printf(
      "swap: %u processes: %u resident, %u swapping out, %u swapped, %u resuming, %u unswappable\n",
      s.processes, s.resident, s.swapping_out, s.swapped, s.swapping_in, s.unswappable);
  printf(
      "swap: device %llu bytes, host %llu bytes, disk %llu bytes, waits at the gate %llu, "
      "waiting for room %llu bytes\n",
      static_cast<unsigned long long>(s.resident_bytes),
      static_cast<unsigned long long>(s.host_bytes), static_cast<unsigned long long>(s.disk_bytes),
      static_cast<unsigned long long>(s.gate_waits),
      static_cast<unsigned long long>(s.room_wanted));
  if (s.unswappable > 0)
    printf("swap: unswappable: %s\n", capgpu::UnswappableReason(s.first_reason));
}

int Swap(capgpu::Region& region, capgpu::SwapTarget target, int argc, char** argv) {
  long wait_ms = -1;
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--hold") == 0 && target == capgpu::SwapTarget::kOut) {
      target = capgpu::SwapTarget::kHold;
    } else if (strcmp(argv[i], "--wait") == 0 && i + 1 < argc) {
      char* end = nullptr;
      wait_ms = strtol(argv[++i], &end, 10);
      if (*end != '\0' || wait_ms < 0) return Usage();
    } else {
      return Usage();
    }
  }
  if (!capgpu::RequestSwap(region, target)) {
    fprintf(stderr, "swap: this region was not created with --swap\n");
    return 2;
  }
  if (wait_ms < 0) return 0;
  capgpu::SwapSummary summary;
  const bool settled = capgpu::WaitSwapSettled(region, wait_ms, &summary);
  PrintSwap(summary);
  return settled ? 0 : 3;
}

int Show(capgpu::Region& region) {
  capgpu::RegionLock lock(region);
  if (!lock.held()) return 2;
  const capgpu::RegionData& d = region.data();
  printf("processes: %u  reaped so far: %llu\n", d.slots_in_use,
         static_cast<unsigned long long>(d.reaped_processes));
  if (d.swap_enabled != 0) {
    static const char* kTargets[] = {"resident", "out", "hold"};
    printf("swap: target %s, host RAM budget ", d.swap_target < 3 ? kTargets[d.swap_target] : "?");
    PrintBytes(d.swap_ram_limit);
    printf(", host RAM used %llu, disk tier %s, woken by demand %llu times\n",
           static_cast<unsigned long long>(d.host_used), d.swap_dir[0] ? d.swap_dir : "none",
           static_cast<unsigned long long>(d.demand_wakes));
    PrintSwap(capgpu::SummarizeSwap(d));
  }
  for (uint32_t dev = 0; dev < capgpu::kMaxDevices; ++dev) {
    if (d.limit[dev] == capgpu::kNoLimit && d.used[dev] == 0) continue;
    if (dev > 0 && d.limit[dev] == d.limit[0] && d.used[dev] == 0 && d.device_count > 1 &&
        d.device_count == capgpu::kMaxDevices) {
      continue;  // one limit for all devices: print only those in use
    }
    printf("device %u: limit ", dev);
    PrintBytes(d.limit[dev]);
    printf("  used ");
    PrintBytes(d.used[dev]);
    printf("\n");
  }
  for (uint32_t i = 0; i < capgpu::kMaxSlots; ++i) {
    const capgpu::Slot& s = d.slots[i];
    if (s.pid == 0) continue;
    printf("slot %u: pid %d%s", i, s.pid,
           capgpu::ProcessIsAlive({s.pid, s.start_time}, nullptr) ? "" : " (dead)");
    if (d.swap_enabled != 0) {
      printf("  %s", capgpu::SwapStateName(s.swap_state));
      if (s.unswappable != 0) printf(" (%s)", capgpu::UnswappableReason(s.unswappable));
      printf("  swaps out/in %llu/%llu, last %llu/%llu us",
             static_cast<unsigned long long>(s.swap_outs),
             static_cast<unsigned long long>(s.swap_ins),
             static_cast<unsigned long long>(s.last_swap_out_us),
             static_cast<unsigned long long>(s.last_swap_in_us));
    }
    for (uint32_t dev = 0; dev < capgpu::kMaxDevices; ++dev) {
      if (s.charged[dev] != 0) {
        printf("  device %u: %llu", dev, static_cast<unsigned long long>(s.charged[dev]));
      }
    }
    printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const char* command = argv[1];
  const char* path = argv[2];
  if (strcmp(command, "create") == 0) return Create(path, argc - 3, argv + 3);
  const bool swap_out = strcmp(command, "swap-out") == 0;
  const bool swap_in = strcmp(command, "swap-in") == 0;
  if (argc != 3 && !swap_out && !swap_in) return Usage();
  capgpu::Region region;
  int rc = region.Open(path);
  if (rc != 0) {
    fprintf(stderr, "%s %s: %s\n", command, path, rc == EINVAL ? "not a cap region" : strerror(rc));
    return 2;
  }
  if (strcmp(command, "show") == 0) return Show(region);
  if (swap_out) return Swap(region, capgpu::SwapTarget::kOut, argc - 3, argv + 3);
  if (swap_in) return Swap(region, capgpu::SwapTarget::kResident, argc - 3, argv + 3);
  if (strcmp(command, "reap") == 0) {
    capgpu::RegionLock lock(region);
    if (!lock.held()) return 2;
    int n = capgpu::ReapDead(region.data(), capgpu::ProcessIsAlive, nullptr);
    printf("reaped %d dead process%s\n", n, n == 1 ? "" : "es");
    return 0;
  }
  return Usage();
}
