// POST /v1/whatif/usage's replay: an uploaded GPU usage history (usage_history.h: Prometheus
// range-query JSON of the DCGM exporter's series, or the CSV
// `workload,timestamp,gpu_util_pct,gpu_memory_bytes[,team][,requested_gpus]`), read by the same
// parser as `tessera whatif --usage FILE` and replayed under the three plans (usage_whatif.h).
// The control plane never includes sim/ (tools/checks/layering.sh): `tessera serve` wires this
// in as api::EngineConfig::whatif.usage.
//
// Parameters (the request's query), each optional:
//   card       a model of the partition catalog (default H100-80GB)
//   host_gbps  each card's host link in GB/s, a positive decimal (default 50)
//   headroom   caps at the observed peak plus this percentage, 0 to 1000 (default 10)
//   name       the uploaded file's name, which errors name with the line ("fleet.csv: line 7: ...")
// Any other parameter is refused, named.
//
// The answer is UsageJson's object (usage_whatif.h): cards per plan, the lower bound, per
// workload its peak memory, duty cycle and idle spans.
//
// Thread-safety: a pure function.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera::sim::usage {

Result<nlohmann::json> WhatIfUsageReport(std::string_view history,
                                         const std::map<std::string, std::string>& params);

}  // namespace tessera::sim::usage
