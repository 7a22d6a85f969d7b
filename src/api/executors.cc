#include "api/executors.h"

#include <chrono>
#include <utility>

namespace tessera::api {

BackendExecutors::BackendExecutors(std::vector<std::string> backends, Pass pass, int period_ms,
                                   Report report)
    : backends_(std::move(backends)),
      pass_(std::move(pass)),
      period_ms_(period_ms),
      report_(std::move(report)) {
  for (const std::string& b : backends_) passes_[b] = 0;
}

BackendExecutors::~BackendExecutors() { Stop(); }

void BackendExecutors::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  for (const std::string& b : backends_) threads_.emplace_back([this, b] { Loop(b); });
}

void BackendExecutors::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int64_t BackendExecutors::Passes(const std::string& backend) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = passes_.find(backend);
  return it == passes_.end() ? 0 : it->second;
}

void BackendExecutors::Loop(const std::string& backend) {
  std::string last_error;
  bool failing = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    const Status st = pass_(backend);
    if (st.ok() == failing || (!st.ok() && st.message() != last_error)) {
      failing = !st.ok();
      last_error = st.ok() ? "" : st.message();
      if (report_) report_(backend, st);
    }
    lock.lock();
    ++passes_[backend];
    wake_.wait_for(lock, std::chrono::milliseconds(period_ms_), [this] { return stop_; });
  }
}

}  // namespace tessera::api
