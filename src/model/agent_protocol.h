// The version of the control plane <-> node agent protocol (docs/agent-protocol.md, "Versions"),
// shared by both sides: the agent sends kAgentProtocolVersion in its registration (`"protocol"`),
// the control plane serves every version from kAgentProtocolMinServed to kAgentProtocolVersion
// and refuses any other with a message naming both.
//
// Version 1 is the protocol of agents that send no `protocol` field (the release before
// versions); version 2 adds the field, and nothing else; version 3 adds each device's `health`
// ("ok" or "unhealthy") and `health_reason`, in registrations and heartbeats' `devices`, and its
// `isolation` grade ("hardware", "driver", "mps", "preload" or "none") in registrations. A server
// serving 1-2 refuses a version-3 agent with a message saying to upgrade the server. Version 4
// adds a device's `"mps": true` in registrations (the agent offers MPS there for sm-sharing
// shares) and a start order's `"compute"` ({"mode": "sm-sharing", "percent": P}), sent only for
// devices whose agent said `mps`: a server serving 1-3 refuses a version-4 agent the same way.
// Version 5 adds a `finished` entry's `run_ms` (how long the job ran, by the agent's monotonic
// clock): a job that ends before any heartbeat lists it running gets its start from it. A server
// serving 1-4 refuses a version-5 agent the same way; this one takes `run_ms` from any version.
// Version 6 adds the `finished` entry's `"stopped_by": "shutdown"` (the agent stopped the job as it
// was itself stopped); a server serving 1-5 refuses a version-6 agent the same way.
//
// Thread-safety: constants and a pure function.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

inline constexpr int64_t kAgentProtocolVersion = 6;
inline constexpr int64_t kAgentProtocolMinServed = 1;
// The version of a registration without a `protocol` field.
inline constexpr int64_t kAgentProtocolUnversioned = 1;

// A `finished` entry's `stopped_by` (optional, no version of its own: a server before it answers
// 400 naming the field and the agent sends its exits without it from then on): the agent stopped
// the job itself, cut off from every server for partition_stop_ms. The job did not end: the
// leader requeues it (or ends it lost), as a lost node's.
inline constexpr const char* kStoppedByPartition = "partition";
// The agent stopped the job as its operator stopped the agent (SIGTERM: an upgrade, a reboot;
// protocol 6). It ends as it ended (never run again from scratch), its reason naming the
// shutdown rather than a bare signal.
inline constexpr const char* kStoppedByShutdown = "shutdown";

// Every refusal of a version starts with this: the agent recognizes it and exits.
inline constexpr const char* kAgentProtocolRefusalPrefix = "agent protocol ";

// "" when this control plane serves `version`; else the refusal, naming both versions and which
// side to upgrade.
inline std::string AgentProtocolRefusal(int64_t version) {
  if (version >= kAgentProtocolMinServed && version <= kAgentProtocolVersion) return "";
  return std::string(kAgentProtocolRefusalPrefix) + std::to_string(version) +
         " is not served by this server (it serves " + std::to_string(kAgentProtocolMinServed) +
         "-" + std::to_string(kAgentProtocolVersion) + "); upgrade the " +
         (version > kAgentProtocolVersion ? "server" : "agent");
}

}  // namespace tessera
