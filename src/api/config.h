// EngineConfig: what `tessera serve --config FILE` declares: identities and their tokens,
// groups with reservations and limits, pools, resource profiles, queues and backends.
//
// Loaded from YAML; invalid config is refused with a message naming the field (e.g.
// "queues[2].profile: unknown profile 'gpu-big'"). Tokens are kept only as SHA-256 hashes; a
// plain `token:` in the file (convenient for examples) is hashed on load.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/cluster.h"
#include "model/resources.h"

namespace tessera::api {

enum class Role { kAdmin, kUser, kAgent };
const char* RoleName(Role r);

struct Identity {
  std::string name;
  Role role = Role::kUser;
  std::vector<std::string> groups;
  std::string token_sha256;  // lowercase hex
};

struct GroupConfig {
  std::string name;
  Resources reservation;  // guaranteed
  Resources limit;        // most held at once (0 in a field = no limit on it)
  int64_t weight = 1;
};

struct PoolConfig {
  std::string name;
  std::vector<AllocationForm> forms;
};

// What a job through a queue receives unless it asks for less (and the most it may ask for).
struct ProfileConfig {
  std::string name;
  int gpus = 0;                 // whole devices, or 1 for a share
  MiB gpu_memory_mib = 0;       // per device; a share's cap
  MilliGpu gpu_milli = 0;       // a share's compute weight (0: proportional to its memory)
  MilliCpu cpu_milli = 1000;
  MiB memory_mib = 1024;
  int max_gpus = 0;             // 0: same as gpus
  MiB max_gpu_memory_mib = 0;   // 0: same as gpu_memory_mib
  std::vector<AllocationForm> forms;  // acceptable, in order of preference
  std::vector<std::string> pools;     // empty: every pool
};

struct QueueConfig {
  std::string name;
  std::string profile;
  std::vector<std::string> groups;  // groups allowed to submit
  int priority = 0;
  bool preemptible = false;
  std::string default_class = "batch";  // training, inference, interactive, ci, batch
  bool requeue_on_loss = true;
  std::string backend = "local";  // "local" (node agents), or a registered backend: slurm, pbs
  // For an external backend (see backends/backend.h QueueMapping):
  std::string partition;           // Slurm partition / PBS queue
  std::string template_path;       // batch-script template; empty: the built-in default
  std::string gpu_type;            // whole cards as gpu:TYPE:N
  std::string gres_whole, gres_share, gres_partition;  // admin overrides of the GRES mapping
  // MIG instances: the cards' model (a MIG model of the partition catalog). A partition job then
  // gets the smallest MIG profile that gives its gpu_memory and gpu_fraction, as gpu:PROFILE:1
  // (or gres_partition with {profile} filled in).
  std::string mig_model;
  MiB shard_mib = 1024;            // GPU memory one Slurm shard stands for
  std::string cap_library;         // preloaded for shares
};

struct EngineConfig {
  std::string cluster = "tessera";
  int64_t heartbeat_timeout_ms = 10000;
  int64_t cancel_grace_ms = 5000;
  int64_t backend_poll_ms = 1000;  // how often external backends are asked about their jobs
  int backend_nice = 10;           // niceness added to the external schedulers' commands (0-19)
  int64_t utilization_sample_ms = 10000;  // how often the utilization history is sampled
  std::vector<Identity> identities;
  std::vector<GroupConfig> groups;
  std::vector<PoolConfig> pools;
  std::vector<ProfileConfig> profiles;
  std::vector<QueueConfig> queues;

  const Identity* FindIdentityByTokenHash(const std::string& hash) const;
  const GroupConfig* FindGroup(const std::string& name) const;
  const QueueConfig* FindQueue(const std::string& name) const;
  const ProfileConfig* FindProfile(const std::string& name) const;
};

Result<EngineConfig> ParseConfig(const std::string& yaml_text);
Result<EngineConfig> LoadConfig(const std::string& path);

// Lowercase hex SHA-256 of `text`.
std::string Sha256Hex(const std::string& text);
// A new random token ("tsk_" + 40 hex digits) from the OS's random source.
std::string NewToken();

}  // namespace tessera::api
