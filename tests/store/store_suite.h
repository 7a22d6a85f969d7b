// The backend-independent store suite. store_suite.cc and store_suite_crash.cc define the tests
// (TEST_P on StoreSuite); each backend's test binary instantiates them with its backend name
// ("sqlite" or "postgresql").
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace tessera::store {

class StoreSuite : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A URL of a fresh, empty store of the backend under test.
  std::string NewUrl();
  // Opens `url`, failing the test on error.
  std::unique_ptr<Store> MustOpen(const std::string& url);

  bool is_postgres() const { return GetParam() == "postgresql"; }

 private:
  std::string tmp_dir_;
  int next_ = 0;
};

// Expects two events (or job records) to be equal field by field.
void ExpectSameEvent(const Event& a, const Event& b);
void ExpectSameJob(const JobRecord& a, const JobRecord& b);
// Every event of `store` that passes `filter`, read page by page.
std::vector<Event> AllEvents(Store& store, const EventFilter& filter = {});
// A pending job of queue "training", identity alice, group vision, spec {"gpus":1}, submitted
// (and last updated) at `submit_ms`.
JobRecord MakeJob(const std::string& id, int64_t submit_ms);

}  // namespace tessera::store
