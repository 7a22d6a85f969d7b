// The quota engine's runtime guards (QueueSpec): max_runtime stops a running job; min_runtime and
// preemption_delay are read where victims and preemptors are chosen (PastMinRuntime, MayPreempt
// in engine_impl.h). See engine_impl.h.
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

void Engine::WatchRuntime(int self) {
  const Job& j = jobs_[self];
  if (j.max_runtime > 0 && j.start >= 0) runtime_stops_.insert({j.start + j.max_runtime, self});
}

void Engine::ForgetRuntime(int self) {
  const Job& j = jobs_[self];
  if (j.max_runtime > 0 && j.start >= 0) runtime_stops_.erase({j.start + j.max_runtime, self});
}

void Engine::SetStartTime(int self, int64_t start) {
  Job& j = jobs_[self];
  if (j.state != JobState::kRunning || start < 0 || start > j.start) return;
  ForgetRuntime(self);
  j.start = start;
  WatchRuntime(self);
}

int Engine::StopOverRuntime(int64_t now) {
  now_ = std::max(now_, now);
  int stopped = 0;
  while (!runtime_stops_.empty() && runtime_stops_.begin()->first <= now_) {
    const int h = runtime_stops_.begin()->second;
    runtime_stops_.erase(runtime_stops_.begin());
    Job& j = jobs_[h];
    if (j.state != JobState::kRunning) continue;
    const std::string why = "max_runtime " + std::to_string(j.max_runtime) + "s of queue " +
                            policy_.queues[j.queue].name + " reached (running since " + T(j.start) +
                            ")";
    if (options_.await_stop) {
      // Its processes stop first: terminating, then done (not requeued) once Stopped().
      AddToChain(leaving_gpu_, j.group, j.charge.gpu_milli);
      j.state = JobState::kTerminating;
      terminating_.insert(h);
      j.grace_end = now_;
      j.claimant = -1;
      j.stop_final = true;
    } else {
      EndHeld(h);
      j.state = JobState::kDone;
    }
    j.wait_step.clear();
    j.wait_reason.clear();
    Emit(EventKind::kStopped, &j, why);
    ++stopped;
  }
  if (stopped > 0) StepCheck("runtime guard");
  return stopped;
}

}  // namespace tessera::quota::internal
