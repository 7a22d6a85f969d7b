// The server's config file (`tessera serve --config`): api::ParseConfig over arbitrary text.
// A refused config is an ordinary outcome; a crash, a leak, undefined behaviour or an exception
// escaping ParseConfig (its contract: every problem comes back as a Status) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "api/config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = tessera::api::ParseConfig(std::string(tessera::fuzz::AsText(data, size)));
  if (config.ok()) {
    // What the server does with a loaded config: look things up by name and token.
    const tessera::api::EngineConfig& c = *config;
    for (const auto& q : c.policy.queues) {
      if (c.FindQueue(q.name) == nullptr || c.FindRoute(q.name) == nullptr) __builtin_trap();
      (void)c.FindProfile(q.profile);
    }
    for (const auto& id : c.identities) {
      if (c.FindIdentityByTokenHash(id.token_sha256) == nullptr) __builtin_trap();
      (void)id.MaySpeakFor("node-1");
    }
  }
  return 0;
}
