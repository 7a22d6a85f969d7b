// A submission's request body checked against the config and the policy, before it has an id:
// the queue and the caller's group, the command and environment, what the job needs (class,
// form, GPUs, quantities, each defaulting to the queue's profile), its walltime, the Unix account
// it runs as and, for an external queue, the form and MIG profile its backend is asked for.
// Pure: no engine state, no store; every refusal names the field.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "api/config.h"
#include "api/records.h"
#include "common/status.h"

namespace tessera::api {

// How long an Idempotency-Key names the job it made: a repeat within it returns that job.
inline constexpr int64_t kIdempotencyWindowMs = int64_t{24} * 3600 * 1000;

// Letters, digits and -_.:/+=, 1 to 200 of them (UUIDs and the like).
Status ValidIdempotencyKey(const std::string& key);

// The fields a submission may carry (any other is refused, named); docs/openapi.json's Submit
// schema lists the same.
const std::set<std::string>& SubmitFields();

Result<PendingSubmit> PrepareSubmit(const EngineConfig& config, const Identity& who,
                                    const Json& body);

}  // namespace tessera::api
