#include "store/sqlite_db.h"

#include "common/log.h"

namespace tessera::store::internal {

SqliteDb::~SqliteDb() {
  ForgetStatements();
  sqlite3_close_v2(db_);
}

Status SqliteDb::Error(const std::string& what) const {
  return Status::Internal(described_ + ": " + what + ": " + sqlite3_errmsg(db_));
}

Status SqliteDb::Exec(const std::string& sql, const std::string& what) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return Status::Internal(described_ + ": " + what + ": " + msg);
  }
  return Status::Ok();
}

void SqliteDb::Rollback(const std::string& what) {
  Status st = Exec("ROLLBACK", what);
  if (!st.ok() && sqlite3_get_autocommit(db_) == 0) {
    static const log::Logger logger("store");
    logger.Error("a failed transaction stayed open", {{"error", st.message()}});
  }
}

Result<sqlite3_stmt*> SqliteDb::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) !=
      SQLITE_OK) {
    return Error("preparing '" + sql + "'");
  }
  cache_.emplace(sql, stmt);
  return stmt;
}

void SqliteDb::ForgetStatements() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  cache_.clear();
}

}  // namespace tessera::store::internal
