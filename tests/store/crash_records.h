// The records the crash writer commits, shared with the test that checks them, so that a torn
// or altered record is told apart from a whole one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace tessera::store::crashtest {

inline std::string JobId(int64_t i) {
  std::string n = std::to_string(i);
  return "job-" + std::string(n.size() < 6 ? 6 - n.size() : 0, '0') + n;
}

// Events of commit i: submitted and placed, with a payload large enough to span pages.
inline std::vector<Event> Events(int64_t i) {
  const std::string id = JobId(i);
  const std::string pad(200 + static_cast<size_t>(i % 97) * 13, 'x');
  Event submitted{0,
                  1700000000000 + i,
                  "user:crash",
                  "job.submitted",
                  id,
                  "submitted " + id,
                  "{\"n\":" + std::to_string(i) + ",\"pad\":\"" + pad + "\"}"};
  Event placed{0,
               1700000000000 + i,
               "engine",
               "job.placed",
               id,
               "",
               "{\"n\":" + std::to_string(i) + ",\"node\":\"node-" + std::to_string(i % 7) + "\"}"};
  return {submitted, placed};
}

// Job i's record; `updated` is the later state written by commit i+1 (when i+1 is a multiple
// of 3).
inline JobRecord Job(int64_t i, bool updated) {
  JobRecord j;
  j.id = JobId(i);
  j.queue = "q" + std::to_string(i % 3);
  j.identity = "alice";
  j.group = "g" + std::to_string(i % 5);
  j.state = updated ? "running" : "placed";
  j.spec = "{\"n\":" + std::to_string(i) + ",\"gpus\":" + std::to_string(i % 8) + "}";
  j.placement = "{\"node\":\"node-" + std::to_string(i % 7) + "\"}";
  j.submit_ms = 1700000000000 + i;
  j.update_ms = j.submit_ms + (updated ? 1 : 0);
  if (updated) j.exit_code = static_cast<int>(i % 4);
  j.reason = updated ? "started" : "";
  return j;
}

}  // namespace tessera::store::crashtest
