// The jobs' event log as usage (history.cc) and what-if (whatif.cc) read it: every job.* event in
// the store, oldest first, a page at a time; and which events end a job's hold on its grants.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace tessera::api {

Status ForEachJobEvent(store::StoreReader& store,
                       const std::function<Status(const store::Event&)>& fn);
bool EndsHold(const std::string& kind);

}  // namespace tessera::api
