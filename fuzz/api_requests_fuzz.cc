// API request bodies, handed to the engine the way ApiServer does (api/server.cc): the body is
// parsed as JSON (a malformed one is refused there, before the engine sees it), then
//
//   POST /v1/jobs                 Engine::Submit (a user, an admin, or with an Idempotency-Key)
//   POST /v1/jobs/{id}/cancel     Engine::Cancel (the id is the body's text)
//   POST /v1/agent/register       AgentExecutor::RegisterNode
//   POST /v1/agent/heartbeat      AgentExecutor::Heartbeat (exits and running jobs in, orders out)
//
// The engine is a real one (api/engine.h) over a SQLite store in a scratch directory, with an
// injected clock. It lives across inputs, so nodes registered and jobs submitted by earlier
// inputs meet later heartbeats, cancels and cycles; every kInputsPerEngine inputs it is closed
// and a fresh one (new store) opened, so memory stays bounded. A crash therefore may need the
// inputs before it to reproduce: run the crashing input after the corpus (see README.md).
//
// Input: one byte choosing the request (its value modulo 7), then the body.
//   0 submit as alice (user)   1 submit as admin   2 register   3 heartbeat   4 cancel as alice
//   5 submit as alice with an Idempotency-Key (the body's first line; the JSON follows)
//   6 a scheduling cycle (no body)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "api/engine.h"
#include "common/log.h"
#include "fuzz_util.h"
#include "store/store.h"

namespace {

using namespace tessera;
using api::Json;

// The queues cover each way a submission is checked: shares, whole devices with a gang
// maximum, and an external (Slurm) queue whose partition jobs map onto MIG profiles.
const char* kConfig = R"(
heartbeat_timeout: 10s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: research, reservation: {gpu: 1}, limit: {gpu: 4}}
  - {name: prod, parent: research}
pools:
  - {name: default, forms: [whole, share, partition]}
profiles:
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, max_gpu_memory: 40GiB, cpu: 1, memory: 1GiB, forms: [share]}
  - {name: train, gpus: 1, max_gpus: 4, cpu: 1, memory: 1GiB, forms: [whole]}
  - {name: mig, gpus: 1, gpu_fraction: 0.25, gpu_memory: 10GiB, cpu: 1, memory: 1GiB, forms: [partition, whole]}
queues:
  - {name: notebooks, profile: nb, groups: [research], priority: 10, class: interactive}
  - {name: training, profile: train, groups: [research, prod], class: training, preemptible: true}
  - {name: hpc, profile: mig, groups: [research], backend: slurm, partition: gpu, mig_model: A100-40GB}
)";

constexpr int kInputsPerEngine = 2000;

class Harness {
 public:
  Harness() {
    log::Configure(log::Level::kOff, log::Format::kText);
    auto c = api::ParseConfig(kConfig);
    if (!c.ok()) abort();
    config_ = std::move(*c);
    for (const char* name : {"admin", "alice", "agent"}) {
      for (const auto& i : config_.identities) {
        if (i.name == name) who_[name] = i;
      }
    }
  }

  api::Engine& engine() {
    if (engine_ == nullptr || ++inputs_ >= kInputsPerEngine) Reopen();
    return *engine_;
  }
  const api::Identity& who(const std::string& name) { return who_[name]; }
  void Advance(int64_t ms) { now_ms_ += ms; }
  // TESSERA_FUZZ_VERBOSE=1: each request's outcome on stderr (to check what the seeds reach).
  bool verbose() const { return verbose_; }

 private:
  void Reopen() {
    engine_.reset();
    dir_.reset();
    dir_ = std::make_unique<fuzz::ScratchDir>("tessera-fuzz-api");
    inputs_ = 0;
    auto store = store::Store::Open(dir_->path() + "/tessera.db");
    if (!store.ok()) abort();
    auto e =
        api::Engine::Open(config_, std::move(*store), dir_->path(), [this] { return now_ms_; });
    if (!e.ok()) abort();
    engine_ = std::move(*e);
  }

  api::EngineConfig config_;
  std::map<std::string, api::Identity> who_;
  std::unique_ptr<fuzz::ScratchDir> dir_;
  std::unique_ptr<api::Engine> engine_;  // declared after dir_: closed before it is removed
  int inputs_ = 0;
  bool verbose_ = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
  int64_t now_ms_ = 1'700'000'000'000;
};

// The server's Body(): JSON or refused.
bool ParseBody(std::string_view text, Json* body) {
  *body = Json::parse(text, nullptr, false);
  return !body->is_discarded();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness h;
  if (size == 0) return 0;
  api::Engine& e = h.engine();
  h.Advance(250);
  std::string_view text = fuzz::AsText(data + 1, size - 1);
  Json body;
  Status st = Status::Ok();
  switch (data[0] % 7) {
    case 0:
      if (ParseBody(text, &body)) st = e.Submit(h.who("alice"), body).status();
      break;
    case 1:
      if (ParseBody(text, &body)) st = e.Submit(h.who("admin"), body).status();
      break;
    case 2:
      if (ParseBody(text, &body)) st = e.agents().RegisterNode(h.who("agent"), body).status();
      break;
    case 3:
      if (ParseBody(text, &body)) st = e.agents().Heartbeat(h.who("agent"), body).status();
      break;
    case 4:
      st = e.Cancel(h.who("alice"), std::string(text)).status();
      break;
    case 5: {
      const size_t nl = text.find('\n');
      const std::string key(text.substr(0, nl));
      text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
      if (ParseBody(text, &body)) st = e.Submit(h.who("alice"), body, key).status();
      break;
    }
    case 6:
      st = e.RunCycle();
      break;
  }
  if (h.verbose()) std::fprintf(stderr, "request %d: %s\n", data[0] % 7, st.ToString().c_str());
  return 0;
}
