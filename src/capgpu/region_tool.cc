// tessera-capgpu-region: the node agent's tool for an allocation's cap region.
//
//   tessera-capgpu-region create PATH --limit 8GiB[,4GiB...] [--mode 0600] [--replace]
//   tessera-capgpu-region show PATH
//   tessera-capgpu-region reap PATH
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
          "       tessera-capgpu-region reap PATH\n");
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
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
      limit = argv[++i];
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
  int rc = capgpu::CreateRegionFile(path, limits, mode, replace);
  if (rc != 0) {
    fprintf(stderr, "create %s: %s\n", path, strerror(rc));
    return 2;
  }
  return 0;
}

int Show(capgpu::Region& region) {
  capgpu::RegionLock lock(region);
  if (!lock.held()) return 2;
  const capgpu::RegionData& d = region.data();
  printf("processes: %u  reaped so far: %llu\n", d.slots_in_use,
         static_cast<unsigned long long>(d.reaped_processes));
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
  if (argc != 3) return Usage();
  capgpu::Region region;
  int rc = region.Open(path);
  if (rc != 0) {
    fprintf(stderr, "%s %s: %s\n", command, path, rc == EINVAL ? "not a cap region" : strerror(rc));
    return 2;
  }
  if (strcmp(command, "show") == 0) return Show(region);
  if (strcmp(command, "reap") == 0) {
    capgpu::RegionLock lock(region);
    if (!lock.held()) return 2;
    int n = capgpu::ReapDead(region.data(), capgpu::ProcessIsAlive, nullptr);
    printf("reaped %d dead process%s\n", n, n == 1 ? "" : "es");
    return 0;
  }
  return Usage();
}
