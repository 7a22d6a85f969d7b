// A store written by the release at 29e72e9 (tests/store/fixtures/release-29e72e9, its README says
// how it was made), opened by today's server: the checks shared by the SQLite and the PostgreSQL
// migration tests.
//
// The fixture holds, per backend, the store and what the release's own API answered just before
// it stopped (GET /v1/jobs, GET /v1/jobs/{id} of each job, GET /v1/events). CheckReleaseStore
// opens the store as `tessera serve` does (Store::Open runs the migrations, then TryLead), opens
// today's engine on it under the fixture's config, and checks that today's views answer what the
// release answered, that the Idempotency-Key the release recorded still finds its job, and that a
// new submission is accepted, numbered after the release's jobs and placed.
//
// Thread-safety: test code, one test at a time.
#pragma once

#include <string>

namespace tessera::store::testing {

// The fixture's directory (config.yaml, sqlite/, postgresql/).
std::string ReleaseFixtureDir();

// Runs every check on the store at `url` (already holding the release's data for `backend`,
// "sqlite" or "postgresql"), with job output under `data_dir`. Fails the running test (gtest
// assertions) with what differs.
void CheckReleaseStore(const std::string& url, const std::string& data_dir,
                       const std::string& backend);

}  // namespace tessera::store::testing
