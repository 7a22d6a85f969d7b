// One SQLite connection and its cached statements: what the SQLite store and its job progress
// log run their SQL through. Not thread-safe: the store's mutex guards every call.
#pragma once

#include <sqlite3.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tessera::store::internal {

// A cached statement in use: bind, step, read; reset and unbound when it goes out of scope, so
// the cache never holds a statement mid-step.
class Stmt {
 public:
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  ~Stmt() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void BindNull(int i) { sqlite3_bind_null(s_, i); }
  // Binds `values` to the parameters first, first + 1, ...
  template <typename... Values>
  void BindFrom(int first, const Values&... values) {
    int i = first;
    (Bind(i++, values), ...);
  }
  int Step() { return sqlite3_step(s_); }

  std::string Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p == nullptr ? std::string()
                        : std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, col)));
  }
  int64_t Int64(int col) const { return sqlite3_column_int64(s_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  int Int(int col) const { return sqlite3_column_int(s_, col); }
  // Reads the columns first, first + 1, ... into `fields`.
  template <typename... Fields>
  void ReadFrom(int first, Fields*... fields) const {
    int col = first;
    (Read(col++, fields), ...);
  }

 private:
  void Read(int col, std::string* v) const { *v = Text(col); }
  void Read(int col, int64_t* v) const { *v = Int64(col); }

  sqlite3_stmt* s_;
};

class SqliteDb {
 public:
  // Takes `db` (closed with this); `described` ("sqlite:/path") starts every error message.
  SqliteDb(sqlite3* db, std::string described) : db_(db), described_(std::move(described)) {}
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& described() const { return described_; }

  // `what` failed, with SQLite's message for it.
  Status Error(const std::string& what) const;
  // Runs `sql` (one or more statements, nothing bound); `what` names it in an error.
  Status Exec(const std::string& sql, const std::string& what);
  // Ends a failed transaction. The failure that made it fail is what the caller returns, not
  // this: a ROLLBACK fails when SQLite already ended the transaction itself (it does on some
  // I/O and full-disk errors), which leaves nothing open. One that leaves the transaction open
  // is logged.
  void Rollback(const std::string& what);
  // The cached statement for `sql`, prepared on first use.
  Result<sqlite3_stmt*> Prepare(const std::string& sql);
  // Drops every cached statement (the schema changed under them).
  void ForgetStatements();

  static void NoBindings(Stmt&) {}

  // The rows of a query, `read(q)` of each; `bind(q)` binds its parameters. `what` names the
  // query in an error.
  template <typename Bind, typename Read>
  auto Rows(const std::string& sql, const std::string& what, Bind bind, Read read)
      -> Result<std::vector<decltype(read(std::declval<const Stmt&>()))>> {
    auto st = Prepare(sql);
    if (!st.ok()) return st.status();
    Stmt q(*st);
    bind(q);
    std::vector<decltype(read(q))> out;
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) out.push_back(read(q));
    if (rc != SQLITE_DONE) return Error(what);
    return out;
  }

  // The first row of a query, `read(q)` of it, or nothing when there is none; as Rows.
  template <typename Bind, typename Read>
  auto OptionalRow(const std::string& sql, const std::string& what, Bind bind, Read read)
      -> Result<std::optional<decltype(read(std::declval<const Stmt&>()))>> {
    using Value = decltype(read(std::declval<const Stmt&>()));
    auto st = Prepare(sql);
    if (!st.ok()) return st.status();
    Stmt q(*st);
    bind(q);
    const int rc = q.Step();
    if (rc == SQLITE_ROW) return std::optional<Value>(read(q));
    if (rc != SQLITE_DONE) return Error(what);
    return std::optional<Value>();
  }

  // Runs one statement that writes, `bind(q)` binding its parameters: the number of rows it
  // changed. `what` names it in an error.
  template <typename Bind>
  Result<int64_t> Write(const std::string& sql, const std::string& what, Bind bind) {
    auto st = Prepare(sql);
    if (!st.ok()) return st.status();
    Stmt q(*st);
    bind(q);
    if (q.Step() != SQLITE_DONE) return Error(what);
    return static_cast<int64_t>(sqlite3_changes(db_));
  }

 private:
  sqlite3* db_;
  const std::string described_;
  std::map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace tessera::store::internal
