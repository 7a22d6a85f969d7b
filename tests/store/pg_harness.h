// PgServer: a private PostgreSQL server for tests, started from Debian's package in a temporary
// directory and stopped (its files removed) when the object is destroyed.
//
// It finds initdb and pg_ctl under /usr/lib/postgresql/*/bin (newest version first), creates a
// cluster with trust authentication for local connections, and listens on 127.0.0.1 at a free
// port and on a unix socket in its directory. PostgreSQL refuses to run as root: when the tests
// run as root (as in CI), the server's files are owned by, and its programs run as, the
// `postgres` system user (through runuser); otherwise they run as the current user.
//
// A missing PostgreSQL is an error with a message that says what to install, never a skip:
// scripts/setup.sh installs it.
//
// Usage:
//   auto server = tessera::testing::PgServer::Start();   // Result<std::unique_ptr<PgServer>>
//   ASSERT_TRUE(server.ok()) << server.status().ToString();
//   auto url = (*server)->CreateDatabase("t1");            //
//   "postgresql://postgres@127.0.0.1:P/t1"
//
// Or, shared by every test of one process: tessera::testing::SharedPgServer(), started on first
// use and stopped at exit.
//
// Thread-safety: Start and SharedPgServer may be called from any thread; CreateDatabase
// serialises internally.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace tessera::testing {

class PgServer {
 public:
  struct Options {
    // fsync=off makes database creation and commits much faster but the server not crash-safe
    // against power loss or an OS crash; a killed client or server process loses nothing
    // either way (the OS keeps the written pages). Tests leave it off; benchmarks turn it on.
    bool fsync = false;
  };

  static Result<std::unique_ptr<PgServer>> Start(const Options& options);
  static Result<std::unique_ptr<PgServer>> Start() { return Start(Options()); }
  ~PgServer();
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  // Creates database `name` (letters, digits, '_') and returns its URL.
  Result<std::string> CreateDatabase(const std::string& name);
  // A database with a fresh unique name ("<prefix>_<n>"), and its URL.
  Result<std::string> CreateUniqueDatabase(const std::string& prefix);

  // "postgresql://postgres@127.0.0.1:PORT/DB".
  std::string Url(const std::string& db) const;
  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  const std::string& version() const { return version_; }  // e.g. "15"
  // The server's log, for failure messages.
  std::string LogTail() const;

 private:
  PgServer() = default;
  Status Stop();

  std::string bin_dir_;  // .../bin of the chosen version
  std::string version_;
  std::string dir_;  // temporary root: data/, server.log, socket
  int port_ = 0;
  bool as_postgres_user_ = false;
  bool running_ = false;
  std::mutex mu_;
  int next_db_ = 0;
};

// A process-wide server (default options), started on first call and stopped at exit.
// Returns null and sets `error` when it cannot start.
PgServer* SharedPgServer(std::string* error);

}  // namespace tessera::testing
