// store_lease_holder URL: takes the store's leader lease and commits one event after another,
// without a pause, for the lease test (tests/store/lease_pg_test.cc), which stops it (SIGSTOP),
// most likely in the middle of a write. Prints "leading EPOCH" once it leads and "ok N" after
// each acknowledged commit; on a refused commit prints "refused MESSAGE" and exits 3. Exits 2 on
// any other error.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "store/store.h"

namespace {
bool Say(const std::string& line) {
  const std::string text = line + "\n";
  return write(1, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}
}  // namespace

int main(int argc, char** argv) {
  using tessera::store::Store;
  if (argc != 2) {
    std::fprintf(stderr, "usage: store_lease_holder URL\n");
    return 2;
  }
  auto store = Store::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "lease_holder: %s\n", store.status().ToString().c_str());
    return 2;
  }
  auto lead = (*store)->TryLead("http://holder:1");
  if (!lead.ok() || !lead->has_value()) {
    std::fprintf(stderr, "lease_holder: did not lead: %s\n", lead.status().ToString().c_str());
    return 2;
  }
  if (!Say("leading " + std::to_string((*lead)->epoch))) return 2;
  for (int64_t i = 1;; ++i) {
    tessera::store::Event e;
    e.time_ms = i;
    e.actor = "engine";
    e.kind = "lease.test";
    e.subject = "holder";
    e.data = "{}";
    auto s = (*store)->Commit({e}, {}, nullptr);
    if (s.code() == tessera::StatusCode::kFailedPrecondition) {
      Say("refused " + s.message());
      return 3;
    }
    if (!s.ok()) {
      // A write cut off while the process was stopped (its transaction ended by the database):
      // not acknowledged; the next one finds out whether it still leads.
      if (!Say("failed " + s.message())) return 2;
      continue;
    }
    if (!Say("ok " + std::to_string(i))) return 2;
  }
}
