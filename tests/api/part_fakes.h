// What the engine's parts' unit tests share in their fakes of the engine (backend_executor_test,
// agent_executor_test, cycle_driver_test, chores_test): a job's state change as the engine makes
// it, a quota engine as the engine makes one, a parsed test config and a scratch SQLite store.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "api/config.h"
#include "api/records.h"
#include "model/job_state.h"
#include "sched/quota/engine.h"
#include "store/store.h"
#include "support/config_builder.h"
#include "support/test_dir.h"

namespace tessera::api::fakes {

// Engine::TransitionLocked's rule: refused (false, nothing changed) when the job state table does
// not hold the change.
inline bool Transition(Job& j, JobState to, JobCause cause) {
  if (!CheckJobTransition(j.state, to, cause).ok()) return false;
  j.state = to;
  return true;
}
// Engine::EndLocked's, less the quota engine: the change, then its reason.
inline bool End(Job& j, JobState state, JobCause cause, const std::string& reason) {
  if (!Transition(j, state, cause)) return false;
  j.rec.reason = reason;
  return true;
}

// A quota engine for `config`'s policy, as the engine makes one (a preempted job's slot returns
// once its processes are gone).
inline std::unique_ptr<quota::QuotaEngine> NewQuota(const EngineConfig& config) {
  quota::EngineOptions o;
  o.await_stop = true;
  auto created = quota::QuotaEngine::Create(config.policy, {}, o);
  EXPECT_TRUE(created.ok()) << created.status().message();
  return created.ok() ? std::move(*created) : nullptr;
}

// The config a builder writes, parsed (the defaults: tests/support/config_builder.h).
inline EngineConfig Config(const tessera::testing::ConfigBuilder& builder) {
  auto parsed = ParseConfig(builder.Yaml());
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? std::move(*parsed) : EngineConfig{};
}

// A real SQLite store in a fresh scratch directory.
inline std::unique_ptr<store::Store> ScratchStore(const std::string& prefix) {
  auto opened = store::Store::Open(tessera::testing::FreshTestDir(prefix) + "/tessera.db");
  EXPECT_TRUE(opened.ok()) << opened.status().message();
  return opened.ok() ? std::move(*opened) : nullptr;
}

}  // namespace tessera::api::fakes
