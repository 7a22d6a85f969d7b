// The engine tests' fixture (engine_test.cc, engine_lifecycle_test.cc, engine_requests_test.cc):
// a configuration with users, agents, groups and queues, and an engine started on it.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "api/engine.h"
#include "engine_fixture.h"

namespace tessera::api::engine_test {

inline const char* kConfig = R"(
heartbeat_timeout: 10s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: bob, role: user, groups: [prod], token: bob-token-12}
  - {name: agent, role: agent, token: agent-token-1}
  - {name: rack1, role: agent, nodes: [r1-*], token: rack1-token-1}
  - {name: carol, role: user, groups: [research], token: carol-token-1}
groups:
  - {name: research, reservation: {gpu: 1}, limit: {gpu: 2}}
  - {name: prod}
profiles:
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, max_gpu_memory: 40GiB, cpu: 1, memory: 1GiB, forms: [share]}
  - {name: train, gpus: 1, max_gpus: 4, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: notebooks, profile: nb, groups: [research], priority: 10, class: interactive}
  - {name: training, profile: train, groups: [research, prod], class: training, requeue_on_loss: true}
  - {name: fragile, profile: train, groups: [research], requeue_on_loss: false}
)";

class EngineTest : public testing::EngineFixture {
 protected:
  void SetUp() override { Start("engine", kConfig); }
  Json Submit(const std::string& who, Json body) {
    auto r = engine_->Submit(Who(who), body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  Json Heartbeat(const std::string& node, Json extra = Json::object()) {
    extra["node"] = node;
    auto r = engine_->agents().Heartbeat(Who("agent"), extra);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  std::string State(const std::string& id) {
    return (*engine_->views().GetJob(Who("admin"), id))["state"];
  }
  // The engine again with `max_output` bytes of output kept per job, and a share placed on n1:
  // its id.
  std::string OutputJob(int64_t max_output) {
    config_.limits.max_output_bytes = max_output;
    Reopen();
    Register("n1", 1);
    const std::string id = Submit(
        "alice", {{"queue", "notebooks"}, {"command", {"yes"}}, {"gpu_memory", "8GiB"}})["id"];
    Heartbeat("n1");
    return id;
  }
};

}  // namespace tessera::api::engine_test
