// The agents' messages checked before anything changes (docs/agent-protocol.md): registrations,
// heartbeats and their job lists and telemetry. Pure functions of the body: a refusal names the
// field, and nothing is applied. Used by the AgentExecutor (api/agent_executor.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "api/records.h"
#include "common/status.h"

namespace tessera::api {

// Agents' messages carry only the fields the protocol names: anything else is a 400 naming it.
Status OnlyKnownFields(const nlohmann::json& obj, std::initializer_list<const char*> known,
                       const std::string& where);
// The agent's protocol version ("Versions"): absent is version 1, the protocol of agents from
// before versions; one this server does not serve is refused (409) with a message naming both.
Status CheckProtocolVersion(const nlohmann::json& body);
// A registration's fields and numbers, each within what a real machine could have.
Status CheckRegistration(const nlohmann::json& body);
// A heartbeat's (or registration's) `finished` and `running` lists: entries {job, ...}.
Status CheckHeartbeatJobs(const nlohmann::json& body);
// A heartbeat's telemetry: `devices` entries and the running entries' activity and swap state.
Status CheckTelemetry(const nlohmann::json& body);
// The jobs an agent says it runs as it registers (`running`: [{job}, ...]).
Result<std::set<std::string>> RunningOfRegistration(const nlohmann::json& body);
// A registration's node and devices, checked (the agent's `running` list aside).
Result<NodeInfo> NodeOfRegistration(const nlohmann::json& body);

}  // namespace tessera::api
