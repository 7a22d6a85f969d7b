// PgServer: see pg_harness.h.
#include "pg_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

struct Command {
  std::vector<std::string> argv;
  std::string log;  // stdout and stderr go here
  std::string cwd;
};

std::string ReadTail(const std::string& path, size_t max = 4000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max ? s.substr(s.size() - max) : s;
}

std::string Join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// Runs a command to completion (no shell); a non-zero exit is an error quoting its output.
Status Run(const Command& cmd) {
  std::vector<char*> args;
  for (const auto& a : cmd.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Status::Internal("fork failed for " + Join(cmd.argv));
  if (pid == 0) {
    const int fd = open(cmd.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (!cmd.cwd.empty() && chdir(cmd.cwd.c_str()) != 0) _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::Internal("waitpid failed for " + Join(cmd.argv));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  const std::string how = WIFEXITED(status)
                              ? "exited with " + std::to_string(WEXITSTATUS(status))
                              : "was killed by signal " + std::to_string(WTERMSIG(status));
  return Status::Internal("'" + Join(cmd.argv) + "' " + how + ":\n" + ReadTail(cmd.log));
}

Result<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return Status::Internal("cannot find a free port on 127.0.0.1");
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// The newest installed version with both initdb and pg_ctl: {bin dir, version}.
Result<std::pair<std::string, std::string>> FindBinaries() {
  const fs::path root = "/usr/lib/postgresql";
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  if (fs::is_directory(root, ec)) {
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      const fs::path bin = entry.path() / "bin";
      if (!fs::exists(bin / "initdb") || !fs::exists(bin / "pg_ctl")) continue;
      const std::string name = entry.path().filename().string();
      int major = 0;
      try {
        major = std::stoi(name);
      } catch (...) {
        continue;
      }
      found.emplace_back(major, name);
    }
  }
  if (found.empty()) {
    return Status::FailedPrecondition(
        "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/{initdb,pg_ctl}); "
        "install the Debian package 'postgresql' (bash scripts/setup.sh does)");
  }
  std::sort(found.begin(), found.end());
  const auto& best = found.back();
  return std::make_pair((root / best.second / "bin").string(), best.second);
}

std::string Runuser() {
  for (const char* p : {"/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

Result<std::unique_ptr<PgServer>> PgServer::Start(const Options& options) {
  auto bins = FindBinaries();
  if (!bins.ok()) return bins.status();
  std::unique_ptr<PgServer> server(new PgServer());
  server->bin_dir_ = bins->first;
  server->version_ = bins->second;

  uid_t uid = 0;
  gid_t gid = 0;
  std::string runuser;
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      return Status::FailedPrecondition(
          "running as root, PostgreSQL must run as the 'postgres' user, which does not exist "
          "(the Debian package 'postgresql' creates it)");
    }
    uid = pw->pw_uid;
    gid = pw->pw_gid;
    runuser = Runuser();
    if (runuser.empty()) {
      return Status::FailedPrecondition(
          "running as root and runuser(1) is missing; "
          "cannot start PostgreSQL as the 'postgres' user");
    }
    server->as_postgres_user_ = true;
  }

  char tmpl[] = "/tmp/tessera-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::Internal("mkdtemp failed under /tmp");
  server->dir_ = tmpl;
  if (server->as_postgres_user_ && chown(tmpl, uid, gid) != 0) {
    return Status::Internal(std::string("cannot chown ") + tmpl + " to postgres");
  }

  auto as_server = [&](std::vector<std::string> argv) {
    if (server->as_postgres_user_) argv.insert(argv.begin(), {runuser, "-u", "postgres", "--"});
    return argv;
  };
  const std::string data = server->dir_ + "/data";
  if (auto s = Run({as_server({server->bin_dir_ + "/initdb", "-D", data, "-A", "trust", "-U",
                               "postgres", "--no-sync", "-E", "UTF8", "--locale=C"}),
                    server->dir_ + "/initdb.log", server->dir_});
      !s.ok()) {
    return s;
  }
  Status started;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto port = FreePort();
    if (!port.ok()) return port.status();
    server->port_ = *port;
    const std::string opts = "-c listen_addresses=127.0.0.1 -p " + std::to_string(*port) + " -k " +
                             server->dir_ + " -c fsync=" + (options.fsync ? "on" : "off") +
                             " -c max_connections=64 -c shared_buffers=32MB";
    started = Run({as_server({server->bin_dir_ + "/pg_ctl", "-D", data, "-l",
                              server->dir_ + "/server.log", "-w", "-t", "30", "-o", opts, "start"}),
                   server->dir_ + "/pg_ctl.log", server->dir_});
    if (started.ok()) break;
  }
  if (!started.ok()) {
    return Status::Internal(started.message() + "\nserver log:\n" + server->LogTail());
  }
  server->running_ = true;
  return server;
}

PgServer::~PgServer() {
  // A destructor has no one to report to: a server that would not stop is said on stderr (its
  // files are removed next either way).
  if (Status st = Stop(); !st.ok())
    std::fprintf(stderr, "pg_harness: stopping the server: %s\n", st.ToString().c_str());
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Status PgServer::Stop() {
  if (!running_) return Status::Ok();
  running_ = false;
  // Immediate: no shutdown checkpoint, since the files are removed next.
  std::vector<std::string> argv = {bin_dir_ + "/pg_ctl", "-D", dir_ + "/data", "-m",
                                   "immediate",          "-w", "stop"};
  if (as_postgres_user_) argv.insert(argv.begin(), {Runuser(), "-u", "postgres", "--"});
  return Run({argv, dir_ + "/pg_ctl_stop.log", dir_});
}

std::string PgServer::Url(const std::string& db) const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + db;
}

std::string PgServer::LogTail() const { return ReadTail(dir_ + "/server.log"); }

Result<std::string> PgServer::CreateDatabase(const std::string& name) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
      })) {
    return Status::InvalidArgument("database name '" + name + "' must be letters, digits, '_'");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = Run({{bin_dir_ + "/createdb", "-h", "127.0.0.1", "-p", std::to_string(port_), "-U",
                     "postgres", name},
                    dir_ + "/createdb.log",
                    dir_});
      !s.ok()) {
    return s;
  }
  return Url(name);
}

Result<std::string> PgServer::CreateUniqueDatabase(const std::string& prefix) {
  int n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = ++next_db_;
  }
  return CreateDatabase(prefix + "_" + std::to_string(n));
}

PgServer* SharedPgServer(std::string* error) {
  static std::mutex mu;
  static std::unique_ptr<PgServer> server;
  static std::string start_error;
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mu);
  if (!tried) {
    tried = true;
    auto started = PgServer::Start();
    if (started.ok()) {
      server = std::move(*started);
    } else {
      start_error = started.status().ToString();
    }
  }
  if (!server && error != nullptr) *error = start_error;
  return server.get();
}

}  // namespace tessera::testing
