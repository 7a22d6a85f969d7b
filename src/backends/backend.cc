#include "backends/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/accounts.h"
#include "common/enum_names.h"

namespace tessera::backends {

namespace {
constexpr auto kUnendedNames =
    NamesUpTo<ExternalState::kSuspended>("pending", "running", "suspended");
}  // namespace

const char* ExternalStateName(ExternalState s) {
  // The three ends carry the names of the served job states they end in.
  if (auto end = EndStateOf(s)) return JobStateName(*end);
  return kUnendedNames.Of(s, "?");
}

Result<ExternalState> ParseExternalState(std::string_view name) {
  for (ExternalState s :
       {ExternalState::kPending, ExternalState::kRunning, ExternalState::kSuspended,
        ExternalState::kSucceeded, ExternalState::kFailed, ExternalState::kCancelled}) {
    if (name == ExternalStateName(s)) return s;
  }
  return Status::InvalidArgument("unknown backend job state '" + std::string(name) +
                                 "' (pending, running, suspended, succeeded, failed, cancelled)");
}

std::optional<JobState> EndStateOf(ExternalState s) {
  switch (s) {
    case ExternalState::kSucceeded:
      return JobState::kSucceeded;
    case ExternalState::kFailed:
      return JobState::kFailed;
    case ExternalState::kCancelled:
      return JobState::kCancelled;
    default:
      return std::nullopt;
  }
}

void Registry::Register(const std::string& name, BackendFactory factory) {
  factories_[name] = std::move(factory);
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> out;
  for (const auto& [n, f] : factories_) out.push_back(n);
  return out;
}

Result<std::unique_ptr<Backend>> Registry::Make(const std::string& name,
                                                const BackendOptions& options) const {
  auto it = factories_.find(name);
  if (it == factories_.end()) return Status::NotFound("no backend named '" + name + "'");
  return it->second(options);
}

void RegisterBuiltins(Registry& r) {
  r.Register("slurm", MakeSlurmBackend);
  r.Register("pbs", MakePbsBackend);
  r.Register("kubernetes", MakeKubernetesBackend);
}

const Registry& BuiltinRegistry() {
  static const Registry* r = [] {
    auto* reg = new Registry();
    RegisterBuiltins(*reg);
    return reg;
  }();
  return *r;
}

namespace {

// The command's stdin, stdout and stderr pipes (close-on-exec); false, with none left open,
// when one cannot be made.
bool OpenPipes(int in_p[2], int out_p[2], int err_p[2]) {
  if (pipe2(in_p, O_CLOEXEC) != 0) return false;
  if (pipe2(out_p, O_CLOEXEC) != 0) {
    close(in_p[0]);
    close(in_p[1]);
    return false;
  }
  if (pipe2(err_p, O_CLOEXEC) != 0) {
    close(in_p[0]);
    close(in_p[1]);
    close(out_p[0]);
    close(out_p[1]);
    return false;
  }
  return true;
}

// Starts argv (under `nice` when nice > 0) on the pipes' child ends, then closes those ends.
// Returns its pid, or -1 with *spawn_error set.
pid_t Spawn(const std::vector<std::string>& argv, int nice, const int in_p[2], const int out_p[2],
            const int err_p[2], int* spawn_error) {
  // posix_spawn (a vfork-style clone in glibc), not fork: the engine is a large multithreaded
  // process, and fork would copy its page tables and interrupt its API threads for each command.
  // A nicer command runs under coreutils' `nice`, which needs no privilege.
  std::vector<std::string> full;
  if (nice > 0) full = {"nice", "-n", std::to_string(nice)};
  full.insert(full.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (const auto& a : full) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_p[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_p[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_p[1], 2);
  pid_t pid = -1;
  *spawn_error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (*spawn_error != 0) pid = -1;
  close(in_p[0]);
  close(out_p[1]);
  close(err_p[1]);
  return pid;
}

// Feeds `input` to in_fd and drains out_fd and err_fd into res together, so that no pipe fills
// up, until both are closed or `timeout_ms` has passed (then true). Closes in_fd.
bool Exchange(int in_fd, int out_fd, int err_fd, const std::string& input, int64_t timeout_ms,
              CommandResult* res) {
  size_t written = 0;
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  } else {
    fcntl(in_fd, F_SETFL, O_NONBLOCK);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool out_open = true, err_open = true, timed_out = false;
  char buf[8192];
  while (out_open || err_open) {
    pollfd fds[3];
    int n = 0;
    int i_out = -1, i_err = -1, i_in = -1;
    if (out_open) {
      fds[n] = {out_fd, POLLIN, 0};
      i_out = n++;
    }
    if (err_open) {
      fds[n] = {err_fd, POLLIN, 0};
      i_err = n++;
    }
    if (in_fd >= 0) {
      fds[n] = {in_fd, POLLOUT, 0};
      i_in = n++;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int r = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (i_in >= 0 && (fds[i_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = write(in_fd, input.data() + written, input.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN) written = input.size();
      if (written >= input.size()) {
        close(in_fd);
        in_fd = -1;
      }
    }
    auto drain = [&](int idx, int fd, std::string& into, bool& open_flag) {
      if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) return;
      ssize_t got = read(fd, buf, sizeof buf);
      if (got > 0) {
        into.append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        open_flag = false;
      }
    };
    drain(i_out, out_fd, res->out, out_open);
    drain(i_err, err_fd, res->err, err_open);
  }
  if (in_fd >= 0) close(in_fd);
  return timed_out;
}

// Reaps pid (killed first when it timed out) and says how it ended in res.
void Reap(pid_t pid, bool timed_out, const std::string& command, int64_t timeout_ms,
          CommandResult* res) {
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    res->exit_code = -1;
    res->err += "timed out after " + std::to_string(timeout_ms) + " ms";
  } else if (WIFEXITED(status)) {
    res->exit_code = WEXITSTATUS(status);
    if (res->exit_code == 127 && res->err.empty()) res->err = "cannot run '" + command + "'";
  } else {
    res->exit_code = -1;
    res->err += "killed by signal " + std::to_string(WTERMSIG(status));
  }
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input,
                         int64_t timeout_ms, int nice) {
  CommandResult res;
  if (argv.empty()) return res;
  int in_p[2], out_p[2], err_p[2];
  if (!OpenPipes(in_p, out_p, err_p)) return res;
  int spawn_error = 0;
  const pid_t pid = Spawn(argv, nice, in_p, out_p, err_p, &spawn_error);
  if (pid < 0) {
    close(in_p[1]);
    close(out_p[0]);
    close(err_p[0]);
    res.err = "cannot run '" + argv[0] + "': " + std::strerror(spawn_error);
    return res;
  }
  const bool timed_out = Exchange(in_p[1], out_p[0], err_p[0], input, timeout_ms, &res);
  close(out_p[0]);
  close(err_p[0]);
  Reap(pid, timed_out, argv[0], timeout_ms, &res);
  return res;
}

Result<std::string> RenderTemplate(const std::string& text,
                                   const std::map<std::string, std::string>& vars) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t open = text.find("{{", pos);
    if (open == std::string::npos) {
      out += text.substr(pos);
      return out;
    }
    size_t close = text.find("}}", open + 2);
    if (close == std::string::npos) return Status::InvalidArgument("template: '{{' without '}}'");
    out += text.substr(pos, open - pos);
    std::string key = text.substr(open + 2, close - open - 2);
    while (!key.empty() && key.front() == ' ') key.erase(key.begin());
    while (!key.empty() && key.back() == ' ') key.pop_back();
    auto it = vars.find(key);
    if (it == vars.end())
      return Status::InvalidArgument("template: unknown placeholder '{{" + key + "}}'");
    out += it->second;
    pos = close + 2;
  }
}

Status CheckScriptTemplate(const std::string& text, const std::string& backend) {
  const std::string directive = backend == "slurm" ? "#SBATCH" : backend == "pbs" ? "#PBS" : "";
  if (directive.empty()) return Status::Ok();
  const std::string reader = backend == "slurm" ? "sbatch" : "qsub";
  std::stringstream in(text);
  std::string line;
  int first_command = 0;
  for (int n = 1; std::getline(in, line); ++n) {
    if (n == 1 && line.rfind("#!", 0) == 0) continue;
    // Leading {{sbatch_...}} / {{pbs_...}}: a whole directive line each, or nothing.
    std::string rest = line;
    bool directives = false;
    while (rest.rfind("{{", 0) == 0 && rest.find("}}") != std::string::npos) {
      const std::string key = TrimSpace(rest.substr(2, rest.find("}}") - 2));
      if (key.rfind("sbatch_", 0) != 0 && key.rfind("pbs_", 0) != 0) break;
      directives = true;
      rest = rest.substr(rest.find("}}") + 2);
    }
    std::string expands;  // the first placeholder of the line that expands to commands
    for (size_t open = rest.find("{{"); open != std::string::npos && expands.empty();
         open = rest.find("{{", open + 2)) {
      const size_t close = rest.find("}}", open + 2);
      if (close == std::string::npos) break;
      const std::string key = TrimSpace(rest.substr(open + 2, close - open - 2));
      if (key == "env" || key == "command") expands = "{{" + key + "}}";
    }
    const std::string body = TrimSpace(rest);
    const bool comment = !body.empty() && body.front() == '#';
    if (comment && !expands.empty()) {
      return Status::InvalidArgument(
          "template line " + std::to_string(n) + ": " + expands +
          " in a comment expands to commands there, and " + reader + " reads no " + directive +
          " line after the first command (name placeholders in comments without their braces)");
    }
    if ((directives || body.rfind(directive, 0) == 0) && first_command > 0) {
      return Status::InvalidArgument("template line " + std::to_string(n) + " ('" + line +
                                     "') comes after the first command (line " +
                                     std::to_string(first_command) + "), and " + reader +
                                     " reads no " + directive + " line after it");
    }
    if (!comment && !body.empty() && first_command == 0) first_command = n;
  }
  return Status::Ok();
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

Result<std::string> TemplateText(const JobRequest& job, const char* default_text) {
  if (job.mapping.template_path.empty()) return std::string(default_text);
  std::ifstream in(job.mapping.template_path);
  if (!in) return Status::NotFound("cannot read template '" + job.mapping.template_path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TrimSpace(std::string s) {
  auto space = [](char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t start = 0;
  while (start < s.size() && space(s[start])) ++start;
  return s.substr(start);
}

Result<std::string> PrintedJobId(const Result<std::string>& output, const std::string& command,
                                 char end) {
  if (!output.ok()) return output.status();
  std::string id = TrimSpace(*output);
  if (end != '\0') id = id.substr(0, id.find(end));
  if (id.empty()) return Status::Internal(command + " printed no job id");
  return id;
}

Result<std::string> RunSchedulerCommand(const BackendOptions& o, std::vector<std::string> argv,
                                        const std::string& input,
                                        const std::vector<std::string>& wrapper) {
  if (argv.empty()) return Status::InvalidArgument("no command");
  const std::string name = argv[0];
  if (!o.bin_dir.empty() && !o.runner) argv[0] = o.bin_dir + "/" + name;
  argv.insert(argv.begin(), wrapper.begin(), wrapper.end());
  CommandResult r = o.runner ? o.runner(argv, input)
                             : RunCommand(argv, input, o.command_timeout_ms, o.command_nice);
  if (r.exit_code != 0)
    return Status::FailedPrecondition(name + ": " + TrimSpace(r.err.empty() ? r.out : r.err));
  return std::move(r.out);
}

Result<SubmitAccount> ResolveSubmitAccount(const std::string& backend, const std::string& run_as,
                                           uid_t server_uid) {
  SubmitAccount a;
  if (run_as.empty()) return a;
  const std::optional<AccountEntry> pw = FindAccount(run_as);
  if (!pw) {
    return Status::FailedPrecondition("run_as: the account '" + run_as +
                                      "' does not exist on the server's host, so no " + backend +
                                      " job can be submitted as it");
  }
  if (pw->uid == server_uid) return a;  // the server's own account: submitted as before
  if (server_uid != 0) {
    return Status::PermissionDenied(
        "run_as: tessera serve runs as uid " + std::to_string(server_uid) +
        ", not root, so it cannot submit " + backend + " jobs as '" + run_as + "' (uid " +
        std::to_string(pw->uid) +
        "); refused rather than run under the server's account (run tessera serve as root)");
  }
  a.other = true;
  a.name = run_as;
  a.uid = pw->uid;
  a.gid = pw->gid;
  a.home = pw->home;
  a.groups = GroupsOfAccount(run_as, a.gid);
  struct stat st {};
  a.work_dir = stat(a.home.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? a.home : "/tmp";
  return a;
}

Result<JobRequest> ForSubmitAccount(const std::string& backend, const JobRequest& job) {
  auto account = ResolveSubmitAccount(backend, job.run_as, geteuid());
  if (!account.ok()) return account.status();
  JobRequest as = job;
  if (account->other) {
    as.env["HOME"] = account->home;
    as.env["USER"] = as.env["LOGNAME"] = account->name;
  }
  return as;
}

namespace {

// Whether `account` may search (pass through) the directory `st` describes, by its mode bits
// (ACLs are not read): the owner's, else the group's, else the others' execute bit.
bool Searchable(const struct stat& st, const SubmitAccount& account) {
  if (st.st_uid == account.uid) return (st.st_mode & S_IXUSR) != 0;
  const bool member =
      st.st_gid == account.gid ||
      std::find(account.groups.begin(), account.groups.end(), st.st_gid) != account.groups.end();
  return (st.st_mode & (member ? S_IXGRP : S_IXOTH)) != 0;
}

}  // namespace

Status PrepareOutputFor(const SubmitAccount& account, const std::string& path) {
  if (!account.other || path.empty()) return Status::Ok();
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::absolute(path, ec);
  if (ec) return Status::Internal("cannot resolve the output path '" + path + "': " + ec.message());
  for (std::filesystem::path dir = file.parent_path();; dir = dir.parent_path()) {
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0) {
      return Status::FailedPrecondition("cannot read the output directory " + dir.string() + ": " +
                                        std::strerror(errno));
    }
    if (!Searchable(st, account)) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return Status::FailedPrecondition(
          "run_as: the account '" + account.name + "' cannot reach its job's output file " +
          file.string() + ": " + dir.string() + " (mode " + mode + ", uid " +
          std::to_string(st.st_uid) +
          ") does not let it search; give others search permission (chmod o+x) on the data "
          "directory and the directories above it");
    }
    if (dir == dir.parent_path()) break;
  }
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status::FailedPrecondition("cannot create the output file " + file.string() + ": " +
                                      std::strerror(errno));
  }
  struct stat st {};
  Status s = Status::Ok();
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    s = Status::FailedPrecondition("the output path " + file.string() + " is not a plain file");
  } else if (fchown(fd, account.uid, account.gid) != 0 || fchmod(fd, 0600) != 0) {
    s = Status::FailedPrecondition("cannot give the output file " + file.string() + " to '" +
                                   account.name + "': " + std::strerror(errno));
  }
  close(fd);
  return s;
}

std::vector<std::string> SubmitWrapper(const SubmitAccount& account, bool switch_user) {
  if (!account.other) return {};
  std::vector<std::string> w;
  if (switch_user) {
    w = {"setpriv", "--reuid=" + std::to_string(account.uid),
         "--regid=" + std::to_string(account.gid), "--init-groups"};
  }
  w.insert(w.end(), {"env", "-i", "-C", account.work_dir});
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string var = *e;
    const std::string key = var.substr(0, var.find('='));
    if (key == "PATH" || key == "LANG" || key == "TZ" || key.rfind("LC_", 0) == 0 ||
        key.rfind("SLURM_", 0) == 0 || key.rfind("SBATCH_", 0) == 0 || key.rfind("PBS_", 0) == 0) {
      w.push_back(var);
    }
  }
  w.insert(w.end(), {"HOME=" + account.home, "USER=" + account.name, "LOGNAME=" + account.name});
  return w;
}

std::string ExpandGres(std::string pattern, int gpus, const std::string& type, int64_t shards,
                       const std::string& profile) {
  auto repl = [&](const std::string& key, const std::string& val) {
    for (size_t p = pattern.find(key); p != std::string::npos;
         p = pattern.find(key, p + val.size())) {
      pattern.replace(p, key.size(), val);
    }
  };
  repl("{gpus}", std::to_string(gpus));
  repl("{type}", type);
  repl("{shards}", std::to_string(shards));
  repl("{profile}", profile);
  return pattern;
}

std::vector<int> ParseIndexList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) return {};
    size_t dash = part.find('-');
    try {
      if (dash == std::string::npos) {
        out.push_back(std::stoi(part));
      } else {
        int a = std::stoi(part.substr(0, dash)), b = std::stoi(part.substr(dash + 1));
        if (b < a || b - a > 1024) return {};
        for (int64_t k = a; k <= b; ++k) out.push_back(static_cast<int>(k));
      }
    } catch (...) {
      return {};
    }
  }
  return out;
}

std::string ClockText(int64_t seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%02lld:%02lld:%02lld", static_cast<long long>(seconds / 3600),
                static_cast<long long>(seconds / 60 % 60), static_cast<long long>(seconds % 60));
  return text;
}

int64_t ClockSeconds(const std::string& text) {
  std::string rest = text;
  int64_t days = -1;
  const size_t dash = rest.find('-');
  const auto number = [](const std::string& t, int64_t* out) {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
      return false;
    *out = std::stoll(t);
    return true;
  };
  if (dash != std::string::npos) {
    if (!number(rest.substr(0, dash), &days)) return -1;
    rest = rest.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  size_t from = 0;
  for (;;) {
    const size_t colon = rest.find(':', from);
    int64_t v = 0;
    if (!number(rest.substr(from, colon == std::string::npos ? colon : colon - from), &v))
      return -1;
    parts.push_back(v);
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  // Without days the last field is seconds and there are two or three; with days the first is
  // hours. Every field after the first is below 60.
  if (parts.size() > 3 || (days < 0 && parts.size() < 2)) return -1;
  for (size_t k = 1; k < parts.size(); ++k) {
    if (parts[k] >= 60) return -1;
  }
  if (days >= 0) parts.resize(3, 0);  // D-HH[:MM[:SS]]
  int64_t seconds = 0;
  for (int64_t v : parts) seconds = seconds * 60 + v;
  return std::max<int64_t>(days, 0) * 86400 + seconds;
}

Result<std::string> GresFor(const JobRequest& job) {
  const QueueMapping& m = job.mapping;
  if (job.gpus <= 0 || job.form.empty()) return std::string();
  if (job.form == "whole") {
    std::string pat = !m.gres_whole.empty() ? m.gres_whole
                      : m.gpu_type.empty()  ? "gpu:{gpus}"
                                            : "gpu:{type}:{gpus}";
    return ExpandGres(pat, job.gpus, m.gpu_type, 0);
  }
  if (job.form == "share") {
    const int64_t per = m.shard_mib > 0 ? m.shard_mib : 1024;
    const int64_t shards = std::max<int64_t>(1, (job.gpu_memory_mib + per - 1) / per);
    return ExpandGres(m.gres_share.empty() ? "shard:{shards}" : m.gres_share, job.gpus, m.gpu_type,
                      shards);
  }
  if (job.form == "partition") {
    if (m.gres_partition.empty() && job.mig_profile.empty()) {
      return Status::InvalidArgument(
          "this queue maps no MIG instance (gres_partition or mig_model)");
    }
    // Slurm names MIG GRES types after the profile (gpu:1g.10gb:1).
    if (m.gres_partition.empty()) return "gpu:" + job.mig_profile + ":1";
    return ExpandGres(m.gres_partition, job.gpus, m.gpu_type, 0, job.mig_profile);
  }
  return Status::InvalidArgument("unknown form '" + job.form + "'");
}

Result<std::map<std::string, std::string>> CommonVars(const JobRequest& job) {
  std::map<std::string, std::string> v;
  v["job_id"] = job.id;
  v["job_name"] = job.name;
  v["partition"] = job.mapping.partition;
  v["cpus"] = std::to_string(std::max<int64_t>(1, (job.cpu_milli + 999) / 1000));
  v["memory_mib"] = std::to_string(std::max<int64_t>(1, job.memory_mib));
  v["output"] = job.output_path;
  v["gpus"] = std::to_string(job.gpus);
  v["gpu_memory_mib"] = std::to_string(job.gpu_memory_mib);
  const int64_t per = job.mapping.shard_mib > 0 ? job.mapping.shard_mib : 1024;
  v["shards"] = std::to_string(
      job.form == "share" ? std::max<int64_t>(1, (job.gpu_memory_mib + per - 1) / per) : 0);
  auto gres = GresFor(job);
  v["gres"] = gres.ok() ? *gres : "";
  v["walltime"] = job.walltime_s > 0 ? ClockText(job.walltime_s) : "";
  std::map<std::string, std::string> env = job.env;
  env["TESSERA_JOB_ID"] = job.id;
  if (job.form == "share" && job.gpu_memory_mib > 0) {
    env["TESSERA_GPU_MEMORY_LIMIT"] = std::to_string(job.gpu_memory_mib * 1024 * 1024);
    if (!job.mapping.cap_library.empty()) env["LD_PRELOAD"] = job.mapping.cap_library;
  }
  std::string exports;
  for (const auto& [k, val] : env) {
    // Names go into the script unquoted: only portable shell names (the API refuses others;
    // this guards records written before it did).
    bool name = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0]));
    for (char c : k) name = name && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!name)
      return Status::InvalidArgument("environment variable name '" + k + "' is not a shell name");
    exports += "export " + k + "=" + ShellQuote(val) + "\n";
  }
  v["env"] = exports;
  std::string cmd;
  for (const auto& a : job.command) cmd += (cmd.empty() ? "" : " ") + ShellQuote(a);
  v["command"] = cmd;
  return v;
}

ScriptBackend::ScriptBackend(BackendOptions options, std::string name, const char* default_template,
                             std::string cancel_command)
    : opt_(std::move(options)),
      name_(std::move(name)),
      default_template_(default_template),
      cancel_command_(std::move(cancel_command)) {}

Result<std::string> ScriptBackend::Render(const JobRequest& request) const {
  auto as = ForSubmitAccount(name_, request);  // a refused run_as account fails the job
  if (!as.ok()) return as.status();
  auto text = TemplateText(*as, default_template_);
  if (!text.ok()) return text.status();
  if (Status st = CheckScriptTemplate(*text, name_); !st.ok()) {
    return Status::InvalidArgument("template '" + as->mapping.template_path + "': " + st.message());
  }
  auto own = OwnVars(*as);
  if (!own.ok()) return own.status();
  auto vars = CommonVars(*as);
  if (!vars.ok()) return vars.status();
  for (auto& [k, v] : *own) (*vars)[k] = std::move(v);
  auto script = RenderTemplate(*text, *vars);
  // sbatch refuses such a script ("DOS line breaks") every time: the job fails, naming why,
  // rather than waiting for a submission that cannot succeed.
  if (script.ok() && name_ == "slurm" && script->find('\r') != std::string::npos) {
    return Status::InvalidArgument(
        "the job's command or environment holds a carriage return (\\r), and sbatch refuses a "
        "batch script with one");
  }
  return script;
}

Result<std::string> ScriptBackend::Submit(const JobRequest& job, const std::string& script) {
  auto account = ResolveSubmitAccount(name_, job.run_as, geteuid());
  if (!account.ok()) return account.status();
  Status prepared = PrepareOutputFor(*account, job.output_path);
  if (!prepared.ok()) return prepared;
  const SubmitCommand c = SubmitCommandFor(*account);
  return PrintedJobId(
      RunSchedulerCommand(opt_, c.argv, script, SubmitWrapper(*account, c.switch_user)),
      c.argv.front(), c.id_end);
}

Status ScriptBackend::Cancel(const std::string& external_id) {
  return RunSchedulerCommand(opt_, {cancel_command_, external_id}).status();
}

Result<std::vector<ExternalJob>> ScriptBackend::List(const std::string& prefix) {
  auto all = Listing();
  if (!all.ok()) return all.status();
  std::vector<ExternalJob> out;
  for (const auto& [id, j] : *all) {
    if (j.name.rfind(prefix, 0) == 0) out.push_back(j);
  }
  return out;
}

}  // namespace tessera::backends
