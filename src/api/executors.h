// BackendExecutors: one thread per external backend (Slurm, PBS, Kubernetes), each running that
// backend's passes (BackendExecutor::Pass: submit, follow, suspend, cancel) every period.
//
// The ticker thread owns the cycle and node-loss detection (Engine::Tick) and never runs a
// scheduler's command. A scheduler whose commands hang (each bounded by the backend's command
// timeout, 30 s by default) therefore delays its own jobs only: not the cycle, not the
// heartbeat-timeout check, not another backend.
//
// Thread-safety: Start and Stop from one thread (the server's); Passes from any.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tessera::api {

class BackendExecutors {
 public:
  using Pass = std::function<Status(const std::string& backend)>;
  // Called from a backend's thread when its passes start failing (with the error) and when they
  // work again (with Ok): once per change, not every pass.
  using Report = std::function<void(const std::string& backend, const Status& st)>;

  BackendExecutors(std::vector<std::string> backends, Pass pass, int period_ms, Report report);
  ~BackendExecutors();  // Stop()
  BackendExecutors(const BackendExecutors&) = delete;
  BackendExecutors& operator=(const BackendExecutors&) = delete;

  void Start();  // one thread per backend; the first pass at once
  // Wakes every thread and joins it. A pass in progress is finished first (its commands are
  // bounded by the backend's command timeout).
  void Stop();
  // Passes completed by `backend`'s thread so far (0 for an unknown name).
  int64_t Passes(const std::string& backend) const;

 private:
  void Loop(const std::string& backend);

  const std::vector<std::string> backends_;
  const Pass pass_;
  const int period_ms_;
  const Report report_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<std::string, int64_t> passes_;  // under mu_
  std::vector<std::thread> threads_;
};

}  // namespace tessera::api
