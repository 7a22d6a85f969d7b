// The event log's rendering: whatever bytes reach an event (a request's path and method in an
// auth.failed event, the reason an agent refuses, a node name, text an older server stored) must
// be stored and read back as JSON that renders and parses, and is valid UTF-8. Once, one request
// with %FF%FE in its path made every page of /v1/events that held its event answer 500.
//
// The engine is a real one (api/engine.h) over a SQLite store in a scratch directory (in memory,
// /dev/shm, where it exists), with an injected clock, living across inputs (a fresh one every
// kInputsPerEngine). Each input is cut at NUL bytes into method, path and reason; they are
// recorded as a failed authentication, and JsonText quotes them. The event goes through the
// commit pipeline (queued, written by the engine's writer thread; Engine::Sync waits until it is
// durable), not through Engine::Tick, whose scheduling cycle, history, retention and fair-share
// passes do nothing for an event. The newest event, this input's, is read as an admin reads it
// (Views::Events) and rendered as the server answers (nlohmann::json::dump with invalid UTF-8
// replaced); an event as an older server stored it (any bytes in every field, data too) is
// rendered the way Views::Events builds it. Every rendering must parse back and be valid UTF-8,
// or the run stops.
//
// Speed (issue 30): most of an execution is JSON (dumping and parsing arbitrary bytes, \u
// escapes six times their size, in instrumented nlohmann code), the sanitizers' allocator and
// libFuzzer's coverage collection over the whole engine; SQLite, in /dev/shm, is a few percent.
// Reading back the one new event instead of the newest five, and checking renderings with
// Json::accept (no document built), took it from about 1,400 to 2,300 executions per CPU-second
// on the same 9,744 inputs.
//
// Input: method NUL path NUL reason [NUL data].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "api/engine.h"
#include "api/json_text.h"
#include "common/log.h"
#include "common/text.h"
#include "fuzz_util.h"
#include "store/store.h"

namespace {

using namespace tessera;
using api::Json;

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups: [{name: research}]
profiles: [{name: train, gpus: 1, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research]}]
)";

constexpr int kInputsPerEngine = 2000;

// What the server answers for a JSON value: its dump, invalid UTF-8 replaced (api/server.cc).
std::string Render(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// A rendering parses back (Json::accept: the parser's checks without building the document) and
// is valid UTF-8.
void CheckRendering(const std::string& text) {
  Check(IsValidUtf8(text));
  Check(Json::accept(text));
}

class Harness {
 public:
  Harness() {
    log::Configure(log::Level::kOff, log::Format::kText);
    auto c = api::ParseConfig(kConfig);
    if (!c.ok()) abort();
    config_ = std::move(*c);
    admin_ = config_.identities[0];
  }
  api::Engine& engine() {
    if (engine_ == nullptr || ++inputs_ >= kInputsPerEngine) Reopen();
    return *engine_;
  }
  const api::Identity& admin() const { return admin_; }
  // A second each input: the auth.failed rate limit (20 a second) never drops one.
  void Advance() { now_ms_ += 1000; }
  int64_t now() const { return now_ms_; }

 private:
  void Reopen() {
    engine_.reset();
    dir_.reset();
    dir_ = std::make_unique<fuzz::ScratchDir>("tessera-fuzz-events");
    inputs_ = 0;
    auto s = store::Store::Open(dir_->path() + "/tessera.db");
    if (!s.ok()) abort();
    auto e = api::Engine::Open(config_, std::move(*s), dir_->path(), [this] { return now_ms_; });
    if (!e.ok()) abort();
    engine_ = std::move(*e);
  }

  api::EngineConfig config_;
  api::Identity admin_;
  std::unique_ptr<fuzz::ScratchDir> dir_;
  std::unique_ptr<api::Engine> engine_;  // declared after dir_: closed before it is removed
  int inputs_ = 0;
  int64_t now_ms_ = 1'700'000'000'000;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness h;
  api::Engine& e = h.engine();
  h.Advance();
  const std::vector<std::string> parts = fuzz::SplitNul(fuzz::AsText(data, size), 4);
  const std::string method = parts.size() > 0 ? parts[0] : "";
  const std::string path = parts.size() > 1 ? parts[1] : "";
  const std::string reason = parts.size() > 2 ? parts[2] : "";
  const std::string extra = parts.size() > 3 ? parts[3] : "";

  // What JsonText writes parses, whatever it was given.
  api::JsonText t;
  t.BeginObject().Key(method).Str(path).Key("reason").Str(reason).EndObject();
  CheckRendering(t.str());

  // The engine's own event, through its commit pipeline.
  e.audit().AuthFailure(method, path, reason);
  if (!e.Sync().ok()) abort();

  // An event as an older server stored it, any bytes in every field, built as Views::Events
  // builds its answer (data that is not JSON becomes {}).
  Json stored_data = Json::parse(extra, nullptr, false);
  const Json old_event = {{"seq", 1},
                          {"time_ms", h.now()},
                          {"actor", method},
                          {"kind", "auth.failed"},
                          {"subject", path},
                          {"reason", reason},
                          {"data", stored_data.is_discarded() ? Json::object() : stored_data}};
  CheckRendering(Render(Json{{"events", Json::array({old_event})}, {"next", 1}}));

  // The newest event, this input's, as a page of /v1/events reads it (a page of several renders
  // as its events do, and each of those was checked as its input's).
  auto last = e.views().LastEventSeq();
  if (!last.ok()) abort();
  auto events = e.views().Events(h.admin(), std::max<int64_t>(0, *last - 1), 10, {});
  if (!events.ok()) abort();
  Check((*events)["events"].size() == 1);
  CheckRendering(Render(*events));
  for (const Json& one : (*events)["events"]) {
    // What the CLI prints of it is free of control characters.
    Check(!HasControlCharacters(EscapeForTerminal(one.value("subject", ""))));
  }
  return 0;
}
