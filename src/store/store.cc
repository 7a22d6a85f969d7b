// Store::Open: picks the backend from the URL.
#include "store/store.h"

#include <algorithm>
#include <string>

#include "model/job_state.h"
#include "store/internal.h"

namespace tessera::store {

namespace internal {

namespace {
bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
}  // namespace

Result<ParsedUrl> ParseUrl(const std::string& url) {
  if (url.empty()) {
    return Status::InvalidArgument(
        "store URL is empty; give a file path, sqlite:PATH or postgresql://HOST/DB");
  }
  if (StartsWith(url, "postgresql://") || StartsWith(url, "postgres://")) {
    const std::string rest = url.substr(url.find("://") + 3);
    if (rest.empty()) {
      return Status::InvalidArgument("store URL '" + url +
                                     "' names no PostgreSQL server or database");
    }
    return ParsedUrl{Backend::kPostgres, url};
  }
  if (StartsWith(url, "sqlite:")) {
    std::string path = url.substr(7);
    if (path.empty()) {
      return Status::InvalidArgument("store URL '" + url +
                                     "' names no SQLite file after 'sqlite:'");
    }
    return ParsedUrl{Backend::kSqlite, path};
  }
  const auto scheme_end = url.find("://");
  if (scheme_end != std::string::npos) {
    return Status::InvalidArgument("store URL '" + RedactUrl(url) + "' has unsupported scheme '" +
                                   url.substr(0, scheme_end) +
                                   "'; use a file path, sqlite:PATH or postgresql://HOST/DB");
  }
  return ParsedUrl{Backend::kSqlite, url};
}

std::string RedactUrl(const std::string& url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return url;
  const auto authority = scheme_end + 3;
  const auto at = url.find('@', authority);
  const auto slash = url.find('/', authority);
  if (at == std::string::npos || (slash != std::string::npos && slash < at)) return url;
  const auto colon = url.find(':', authority);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

Result<std::unique_ptr<Store>> OpenAtVersion(const std::string& url, int version) {
  if (version < 1 || version > Store::LatestSchemaVersion()) {
    return Status::InvalidArgument("schema version " + std::to_string(version) +
                                   " is not one this Tessera knows (1.." +
                                   std::to_string(Store::LatestSchemaVersion()) + ")");
  }
  auto parsed = ParseUrl(url);
  if (!parsed.ok()) return parsed.status();
  if (parsed->backend == Backend::kPostgres) return OpenPostgres(parsed->target, version);
  return OpenSqlite(parsed->target, version);
}

int64_t JobNumber(const std::string& id) {
  if (id.size() < 3 || id.compare(0, 2, "j-") != 0 || id.size() > 20) return 0;
  int64_t n = 0;
  for (size_t i = 2; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return 0;
    n = n * 10 + (id[i] - '0');
  }
  return n;
}

Result<bool> StartCommit(const std::vector<Event>& events, const std::vector<JobRecord>& jobs,
                         std::vector<int64_t>* seqs) {
  for (const auto& j : jobs) {
    if (j.id.empty()) return Status::InvalidArgument("job record with an empty id");
  }
  if (seqs != nullptr) seqs->clear();
  return !events.empty() || !jobs.empty();
}

Status ExecSql(const std::string& url, const std::string& sql) {
  auto parsed = ParseUrl(url);
  if (!parsed.ok()) return parsed.status();
  if (parsed->backend == Backend::kPostgres) return ExecPostgresScript(parsed->target, sql);
  return ExecSqliteScript(parsed->target, sql);
}

}  // namespace internal

int Store::LatestSchemaVersion() { return internal::Migrations().back().version; }

Result<std::unique_ptr<Store>> Store::Open(const std::string& url) {
  return internal::OpenAtVersion(url, LatestSchemaVersion());
}

bool Store::EndedState(const std::string& state) {
  const Result<JobState> s = ParseJobState(state);
  return s.ok() && IsTerminal(*s);
}

// Defaults over LoadJobs() for stores that do not index these (test doubles); the SQLite and
// PostgreSQL stores answer them with their own queries.
Result<std::vector<JobRecord>> Store::LoadLiveJobs() {
  auto all = LoadJobs();
  if (!all.ok()) return all.status();
  std::vector<JobRecord> out;
  for (auto& j : *all) {
    if (!EndedState(j.state)) out.push_back(std::move(j));
  }
  return out;
}

namespace {

// The newest `limit` records LoadJobs gives in `state` ('' any), ended ones only if `ended_only`.
Result<std::vector<JobRecord>> NewestJobs(StoreReader& r, const std::string& state, int limit,
                                          bool ended_only) {
  auto all = r.LoadJobs();
  if (!all.ok()) return all.status();
  std::vector<JobRecord> out;
  for (auto it = all->rbegin(); it != all->rend() && static_cast<int>(out.size()) < limit; ++it) {
    if ((state.empty() || it->state == state) && (!ended_only || Store::EndedState(it->state)))
      out.push_back(std::move(*it));
  }
  return out;
}

}  // namespace

Result<std::vector<JobRecord>> StoreReader::ListJobs(const std::string& state, int limit) {
  return NewestJobs(*this, state, limit, false);
}

Result<std::vector<JobRecord>> StoreReader::ListEndedJobs(const std::string& state, int limit) {
  return NewestJobs(*this, state, limit, true);
}

Result<int64_t> Store::MaxJobNumber() {
  auto all = LoadJobs();
  if (!all.ok()) return all.status();
  int64_t n = 0;
  for (const auto& j : *all) n = std::max(n, internal::JobNumber(j.id));
  return n;
}

Result<std::optional<JobRecord>> Store::FindByIdempotencyKey(const std::string& key,
                                                             int64_t since_ms) {
  auto all = LoadJobs();
  if (!all.ok()) return all.status();
  for (JobRecord& j : *all) {
    if (!key.empty() && j.idempotency_key == key && j.submit_ms >= since_ms)
      return std::optional<JobRecord>(std::move(j));
  }
  return std::optional<JobRecord>();
}

Result<int64_t> Store::Prune(int64_t) {
  return Status::FailedPrecondition(Describe() + ": retention is not supported");
}
Result<int64_t> Store::PruneEventsOfKind(const std::string&, int64_t) {
  return Status::FailedPrecondition(Describe() + ": retention is not supported");
}

}  // namespace tessera::store
