#include "agent/agent_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/host_files.h"
#include "agent/launcher.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

constexpr const char* kSuffix = ".json";

void SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

// `text` to `path`: a temporary file beside it, fsync'ed, renamed over it, the directory synced.
Status WriteDurably(const std::string& dir, const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Internal("cannot write " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return Status::Internal("cannot write " + tmp + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    unlink(tmp.c_str());
    return Status::Internal("cannot sync " + tmp + ": " + why);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(tmp.c_str());
    return Status::Internal("cannot rename " + tmp + ": " + why);
  }
  SyncDir(dir);
  return Status::Ok();
}

bool Int(const json& j, const char* name, int64_t* out) {
  if (!j.contains(name) || !j[name].is_number_integer()) return false;
  *out = j[name].get<int64_t>();
  return true;
}

}  // namespace

AgentState::AgentState(std::string work_dir, bool enabled)
    : dir_(work_dir + "/exits"), epoch_path_(work_dir + "/epoch"), enabled_(enabled) {
  if (enabled_) mkdir(dir_.c_str(), 0700);
}

std::string AgentState::RecordPath(const std::string& job) const {
  return dir_ + "/" + job + kSuffix;
}

Status AgentState::Save(const ExitRecord& r) {
  if (!enabled_ || !ValidateJobId(r.report.job).ok()) return Status::Ok();
  json j = {{"job", r.report.job},       {"exit_code", r.report.exit_code},
            {"signal", r.report.signal}, {"output_bytes", r.report.output_bytes},
            {"ended_ms", r.ended_ms},    {"uploaded", r.uploaded}};
  if (!r.report.stopped_by.empty()) j["stopped_by"] = r.report.stopped_by;
  if (r.report.run_ms >= 0) j["run_ms"] = r.report.run_ms;
  return WriteDurably(dir_, RecordPath(r.report.job), j.dump() + "\n");
}

void AgentState::Remove(const std::string& job) {
  if (!enabled_ || !ValidateJobId(job).ok()) return;
  if (unlink(RecordPath(job).c_str()) == 0) SyncDir(dir_);
}

std::vector<ExitRecord> AgentState::Load(std::vector<std::string>* corrupt) const {
  std::vector<ExitRecord> out;
  if (!enabled_) return out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > std::strlen(kSuffix) &&
        name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) == 0) {
      names.push_back(name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    bool ok = false;
    const std::string path = dir_ + "/" + name;
    const std::string text = internal::ReadSmallFile(path, &ok);
    json j = ok ? json::parse(text, nullptr, false) : json();
    ExitRecord r;
    int64_t code = 0, signal = 0;
    const bool good = ok && j.is_object() && j.contains("job") && j["job"].is_string() &&
                      j["job"].get<std::string>() + kSuffix == name &&
                      ValidateJobId(j["job"].get<std::string>()).ok() &&
                      Int(j, "exit_code", &code) && Int(j, "signal", &signal) &&
                      Int(j, "output_bytes", &r.report.output_bytes) && r.report.output_bytes >= 0;
    if (!good) {
      if (corrupt != nullptr) corrupt->push_back(path);
      continue;
    }
    r.report.job = j["job"].get<std::string>();
    r.report.exit_code = static_cast<int>(code);
    r.report.signal = static_cast<int>(signal);
    if (j.contains("stopped_by") && j["stopped_by"].is_string())
      r.report.stopped_by = j["stopped_by"].get<std::string>();
    Int(j, "ended_ms", &r.ended_ms);
    if (!Int(j, "run_ms", &r.report.run_ms) || r.report.run_ms < 0) r.report.run_ms = -1;
    Int(j, "uploaded", &r.uploaded);
    r.uploaded = std::clamp<int64_t>(r.uploaded, 0, r.report.output_bytes);
    out.push_back(std::move(r));
  }
  return out;
}

int64_t AgentState::LoadEpoch(std::string* error) const {
  if (!enabled_) return -1;
  bool ok = false;
  const std::string text = internal::ReadSmallFile(epoch_path_, &ok);
  if (!ok) return -1;  // none yet
  json j = json::parse(text, nullptr, false);
  if (!j.is_number_integer() || j.get<int64_t>() < 0) {
    if (error != nullptr) *error = epoch_path_ + " does not hold an epoch";
    return -1;
  }
  return j.get<int64_t>();
}

Status AgentState::SaveEpoch(int64_t epoch) {
  if (!enabled_) return Status::Ok();
  const size_t slash = epoch_path_.rfind('/');
  return WriteDurably(epoch_path_.substr(0, slash), epoch_path_, std::to_string(epoch) + "\n");
}

}  // namespace tessera::agent
