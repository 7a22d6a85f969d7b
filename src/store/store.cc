// Store::Open: picks the backend from the URL.
#include "store/store.h"

#include <string>

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

}  // namespace tessera::store
